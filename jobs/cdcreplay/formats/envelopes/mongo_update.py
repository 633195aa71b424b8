"""Apply a MongoDB update document (``$set`` / ``$unset``, the operators DRS writes for DDS) to a stored document.

MongoDB semantics, as the server applies an oplog update:
- a path is dotted: ``"address.city"`` reaches into embedded documents, a numeric part (``"tags.1"``) into an array;
- ``$set`` creates missing embedded documents on the way and the field at the end (appended after the existing
  fields; fields one operator adds appear in lexicographic order of their paths, as MongoDB 5.0+ processes them);
  setting an array element past the end pads the array with nulls;
- ``$unset`` removes the field; a missing path is a no-op; an array element is set to null, never removed;
- a path through a value that is neither a document nor an array (``$set {"a.b": 1}`` with ``a: 5``), two paths of one
  update where one is a prefix of the other, a changed ``_id``, an empty path part, or any other operator
  (``$inc``, ``$push``, a ``$v: 2`` diff, a replacement document) raise :class:`UpdateError`.
The stored document is never modified: a new one is returned.
"""

from __future__ import annotations

import copy

SUPPORTED = ("$set", "$unset")


class UpdateError(ValueError):
    """An update the applier does not accept; ``unsupported`` is True for an operator it does not implement."""

    def __init__(self, message: str, unsupported: bool = False):
        super().__init__(message)
        self.unsupported = unsupported


def check_update(update) -> dict[str, dict]:
    """The update's operators, validated: only ``$set``/``$unset``, each a non-empty document of paths."""
    if not isinstance(update, dict) or not update:
        raise UpdateError(f"an update must be a non-empty document of operators, got {update!r}")
    for operator, fields in update.items():
        if operator not in SUPPORTED:
            kind = "operator" if operator.startswith("$") else "field (a replacement document, not an update)"
            raise UpdateError(f"update {kind} {operator!r} is not one DRS writes ($set, $unset)", unsupported=True)
        if not isinstance(fields, dict) or not fields:
            raise UpdateError(f"{operator} needs a non-empty document of paths, got {fields!r}")
    paths = sorted(path for fields in update.values() for path in fields)
    for path in paths:
        if any(part == "" for part in path.split(".")):
            raise UpdateError(f"path {path!r} has an empty part")
    seen = set()
    for path in paths:
        parts = path.split(".")
        prefixes = [".".join(parts[:n]) for n in range(1, len(parts) + 1)]
        clash = next((prefix for prefix in prefixes if prefix in seen), None)
        if clash is not None:
            raise UpdateError(f"paths {clash!r} and {path!r} of one update conflict")
        seen.add(path)
    return update


def _index(part: str) -> int | None:
    return int(part) if part.isdigit() else None


def _set(document: dict, path: str, value) -> None:
    parts = path.split(".")
    container = document
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(container, dict):
            if last:
                container[part] = value
                return
            if part not in container:
                container[part] = {}
            elif not isinstance(container[part], dict | list):
                raise UpdateError(f"$set {path!r}: {'.'.join(parts[: depth + 1])!r} is not a document or array")
            container = container[part]
        elif isinstance(container, list):
            index = _index(part)
            if index is None:
                where = ".".join(parts[:depth])
                raise UpdateError(f"$set {path!r}: {part!r} is not an index of the array at {where!r}")
            if index >= len(container):  # past the end: pad with nulls, then the new element
                container.extend([None] * (index - len(container)))
                container.append(value if last else {})
                if last:
                    return
            elif last:
                container[index] = value
                return
            elif not isinstance(container[index], dict | list):
                raise UpdateError(f"$set {path!r}: {'.'.join(parts[: depth + 1])!r} is not a document or array")
            container = container[index]


def _unset(document: dict, path: str) -> None:
    parts = path.split(".")
    container = document
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(container, dict):
            if part not in container:
                return
            if last:
                del container[part]
                return
            container = container[part]
        elif isinstance(container, list):
            index = _index(part)
            if index is None or index >= len(container):
                return
            if last:
                container[index] = None
                return
            container = container[index]
        else:
            return


def apply_update(document: dict, update: dict) -> dict:
    """The document after ``update`` (see the module docstring)."""
    check_update(update)
    result = copy.deepcopy(document)
    for path in sorted(update.get("$set", {})):
        if path == "_id" or path.startswith("_id."):
            if update["$set"][path] != _get(document, path):
                raise UpdateError("an update cannot change _id")
            continue
        _set(result, path, copy.deepcopy(update["$set"][path]))
    for path in sorted(update.get("$unset", {})):
        if path == "_id" or path.startswith("_id."):
            raise UpdateError("an update cannot remove _id")
        _unset(result, path)
    return result


def _get(document: dict, path: str):
    value = document
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and _index(part) is not None and _index(part) < len(value):
            value = value[_index(part)]
        else:
            return None
    return value
