"""The Avro wire layer every Avro format shares: framing, writer-schema lookup, and one record decoded by fastavro.

Kafka values carry Avro in three framings:
  confluent      -- byte 0x00, a 4-byte big-endian schema id, then the Avro binary (Confluent Schema Registry
                    serializers: Debezium Avro, Qlik with a registry); writer schema ``<registry dir>/<id>.avsc``.
  single-object  -- bytes 0xC3 0x01, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema, then the
                    Avro binary (Avro's own single-object encoding; generated ``Record.getDecoder()`` classes).
  raw            -- the Avro binary alone (Alibaba DTS); the writer schema comes from the pipeline config.
``auto`` decides by the first bytes; since raw Avro may itself start with 0x00 (an int field of value 0), auto treats
0x00 as Confluent only when a registry folder is configured, and 0xC3 0x01 as single-object only when the fingerprint
is one of the known schemas. Envelope semantics (what the record means) live in the format modules, not here.
"""

from __future__ import annotations

import io
import itertools
import json
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cdcreplay.config import ConfigError
from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.schema import REASON_BAD_AVRO, REASON_UNKNOWN_SCHEMA

FRAMINGS = ("auto", "raw", "confluent", "single-object")
CONFLUENT_MAGIC = 0x00
SINGLE_OBJECT_MAGIC = b"\xc3\x01"


class AvroSchemaError(ValueError):
    """A schema file that cannot be read or parsed; the message names the file and the fix."""


def check_writer_schema(pipeline) -> None:
    """A pipeline's ``options.writer_schema`` must exist and parse; else a ConfigError naming the option."""
    try:
        load_schema(str(pipeline.options["writer_schema"]))
    except AvroSchemaError as error:
        raise ConfigError(f"pipeline {pipeline.name}: options.writer_schema: {error}") from None


@lru_cache(maxsize=256)
def load_schema(path: str):
    """Parse an ``.avsc`` file: one schema, or a JSON array of named types whose LAST entry is the message type."""
    import fastavro

    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AvroSchemaError(f"Avro schema file {path} does not exist; fix the path in the pipeline options") from None
    except json.JSONDecodeError as error:
        raise AvroSchemaError(f"Avro schema file {path} is not valid JSON ({error})") from None
    try:
        if isinstance(document, list):
            named: dict = {}
            parsed = None
            for item in document:
                parsed = fastavro.parse_schema(item, named_schemas=named)
            if parsed is None:
                raise AvroSchemaError(f"Avro schema file {path} is an empty list")
            return parsed
        return fastavro.parse_schema(document)
    except AvroSchemaError:
        raise
    except Exception as error:
        raise AvroSchemaError(f"Avro schema file {path} is not a valid Avro schema ({error})") from None


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def standalone_schema(document) -> dict:
    """The message schema of a parsed ``.avsc`` (one schema, or a JSON array of named types whose last entry is the
    message type, as :func:`load_schema` reads it) as one document that Spark's ``from_avro`` can read on its own:
    every named type it uses written out where it is first used, and referred to by name after that."""
    items = document if isinstance(document, list) else [document]
    named = {_full_name(item["name"], item.get("namespace")): item for item in items if isinstance(item, dict)}
    written: set[str] = set()

    def inline(schema, namespace: str | None):
        if isinstance(schema, str):
            full = _full_name(schema, namespace)
            if full in named and full not in written:
                definition = named[full]
                return inline(definition, definition.get("namespace", namespace))
            return schema
        if isinstance(schema, list):
            return [inline(branch, namespace) for branch in schema]
        if not isinstance(schema, dict):
            return schema
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            own = schema.get("namespace", namespace)
            written.add(_full_name(schema["name"], own))
            if kind == "enum" or kind == "fixed":
                return schema
            return {**schema, "fields": [{**f, "type": inline(f["type"], own)} for f in schema.get("fields", ())]}
        if kind == "array":
            return {**schema, "items": inline(schema["items"], namespace)}
        if kind == "map":
            return {**schema, "values": inline(schema["values"], namespace)}
        return {**schema, "type": inline(kind, namespace)} if isinstance(kind, (list, dict)) else schema

    record = items[-1]
    return inline(record, record.get("namespace"))


def without_logical_types(schema):
    """The schema with every ``logicalType`` removed: values arrive as the primitives Avro wrote (a decimal's unscaled
    bytes, a date's days, a timestamp's count), as a native path that renders them itself reads them."""
    if isinstance(schema, list):
        return [without_logical_types(branch) for branch in schema]
    if isinstance(schema, dict):
        return {
            key: without_logical_types(value) if key in ("type", "fields", "items", "values") else value
            for key, value in schema.items()
            if key != "logicalType"
        }
    return schema


# The fixed type a boolean is read as (``booleans_as_bytes``), numbered per occurrence: Avro names are unique.
RAW_BOOLEAN = "cdcreplay_raw_boolean_{}"


def booleans_as_bytes(schema):
    """The schema with every boolean read as a fixed of its one byte. The two readers differ on a byte other than 0
    and 1: fastavro reads any byte but 0 as true, Java's reader only 1. The byte lets a native path read it as
    fastavro does; a fixed of size 1 takes exactly the boolean's one byte."""
    count = itertools.count(1)

    def rewrite(node):
        if node == "boolean":
            return {"type": "fixed", "name": RAW_BOOLEAN.format(next(count)), "size": 1}
        if isinstance(node, list):
            return [rewrite(branch) for branch in node]
        if isinstance(node, dict):
            if node.get("type") == "boolean":
                return rewrite("boolean")
            return {
                key: [{**f, "type": rewrite(f["type"])} for f in value]
                if key == "fields"
                else rewrite(value)
                if key in ("type", "items", "values")
                else value
                for key, value in node.items()
            }
        return node

    return rewrite(schema)


def read_as_written(schema) -> str:
    """The schema text a native path's ``from_avro`` reads a writer schema's values with: each value as the bytes
    Avro wrote it in (``without_logical_types``, ``booleans_as_bytes``), for the path to render as Python does."""
    return json.dumps(booleans_as_bytes(without_logical_types(schema)), separators=(",", ":"))


def named_types(schema, found: dict | None = None) -> dict[str, dict]:
    """The records, enums and fixed types defined anywhere in ``schema``, by short name (a later reference to one is
    its name alone)."""
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "error", "enum", "fixed") and "name" in schema:
            found[schema["name"].rsplit(".", 1)[-1]] = schema
        for field_ in schema.get("fields", ()):
            named_types(field_.get("type"), found)
        for part in ("items", "values"):
            if part in schema:
                named_types(schema[part], found)
        if isinstance(schema.get("type"), (list, dict)):
            named_types(schema["type"], found)
    return found


class SchemaTypes:
    """The types of one schema document, named references resolved (by short name, as ``named_types`` keeps them):
    what a native path checks a writer schema's shape with."""

    def __init__(self, schema):
        self.named = named_types(schema)

    def resolved(self, schema):
        if isinstance(schema, str) and schema.rsplit(".", 1)[-1] in self.named:
            return self.named[schema.rsplit(".", 1)[-1]]
        return schema

    def nullable(self, schema) -> tuple[object, bool]:
        """(the one non-null branch of a union with null, or the schema itself, resolved; whether null is allowed).
        A union of more branches gives None."""
        if isinstance(schema, list):
            branches = [branch for branch in schema if branch != "null"]
            return (self.resolved(branches[0]) if len(branches) == 1 else None), len(branches) < len(schema)
        return self.resolved(schema), False


@lru_cache(maxsize=512)
def parsed_schema_text(text: str):
    """A schema text a message carries (Qlik's messageSchema and dataSchema), parsed once per worker; a text that is
    not a schema is the message's ``bad_avro``."""
    import fastavro

    try:
        return fastavro.parse_schema(json.loads(text))
    except Exception as error:
        raise DecodeError(REASON_BAD_AVRO, f"message schema is not a valid Avro schema: {error}") from None


@lru_cache(maxsize=512)
def canonical_form(text: str) -> str:
    """The parsing canonical form of a schema text (:func:`parsed_schema_text`): two texts of one schema compare
    equal by it."""
    from fastavro.schema import to_parsing_canonical_form

    return to_parsing_canonical_form(parsed_schema_text(text))


def fingerprint(parsed_schema) -> bytes:
    """CRC-64-AVRO fingerprint of a parsed schema, little-endian, as single-object encoding writes it."""
    from fastavro.schema import fingerprint as avro_fingerprint
    from fastavro.schema import to_parsing_canonical_form

    # fastavro prints the fingerprint's bytes in little-endian order already: the header bytes as they are.
    return bytes.fromhex(avro_fingerprint(to_parsing_canonical_form(parsed_schema), "CRC-64-AVRO"))


@dataclass(frozen=True)
class AvroWire:
    """How a pipeline's values are framed and where their writer schemas are (paths, so it pickles to executors)."""

    framing: str = "auto"
    writer_schema: str | None = None  # .avsc for raw (and single-object) values
    registry_dir: str | None = None  # folder of <schema id>.avsc for Confluent-framed values
    _fingerprints: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if self.framing not in FRAMINGS:
            raise AvroSchemaError(f"framing {self.framing!r} is not one of {', '.join(FRAMINGS)}")

    def _single_object_schema(self, print_bytes: bytes):
        if not self._fingerprints:
            candidates = [self.writer_schema] if self.writer_schema else []
            if self.registry_dir:
                candidates += [str(p) for p in sorted(Path(self.registry_dir).glob("*.avsc"))]
            for path in candidates:
                self._fingerprints[fingerprint(load_schema(path))] = path
        path = self._fingerprints.get(print_bytes)
        return load_schema(path) if path else None

    def split(self, value: bytes) -> tuple[object, bytes, str]:
        """(parsed writer schema, Avro body, framing description) for one Kafka value."""
        framing = self.framing
        if framing == "auto":
            if value[:1] == b"\x00" and self.registry_dir:
                framing = "confluent"
            elif value[:2] == SINGLE_OBJECT_MAGIC and len(value) >= 10 and self._single_object_schema(value[2:10]):
                framing = "single-object"
            else:
                framing = "raw"
        if framing == "confluent":
            if len(value) < 5 or value[0] != CONFLUENT_MAGIC:
                raise DecodeError(REASON_BAD_AVRO, "value is not Confluent-framed Avro (no 0x00 magic byte and id)")
            schema_id = struct.unpack(">I", value[1:5])[0]
            path = Path(self.registry_dir or ".") / f"{schema_id}.avsc"
            if not path.is_file():
                raise DecodeError(
                    REASON_UNKNOWN_SCHEMA,
                    f"schema id {schema_id} is not in the schema folder {self.registry_dir} (expected {path.name}); "
                    "export it from the schema registry into that folder",
                )
            return load_schema(str(path)), value[5:], f"confluent id {schema_id}"
        if framing == "single-object":
            if value[:2] != SINGLE_OBJECT_MAGIC or len(value) < 10:
                raise DecodeError(REASON_BAD_AVRO, "value is not Avro single-object encoded (no C3 01 header)")
            schema = self._single_object_schema(value[2:10])
            if schema is None:
                raise DecodeError(
                    REASON_UNKNOWN_SCHEMA,
                    f"no known schema has the fingerprint {value[2:10].hex()}; configure the writer schema",
                )
            return schema, value[10:], "single-object"
        if not self.writer_schema:
            raise DecodeError(REASON_UNKNOWN_SCHEMA, "raw Avro needs a writer schema; set it in the pipeline options")
        return load_schema(self.writer_schema), value, "raw"

    def decode(self, value: bytes) -> dict:
        """The Avro record of one Kafka value, as fastavro returns it (unions of records keep their name)."""
        import fastavro

        schema, body, framing = self.split(value)
        stream = io.BytesIO(body)
        try:
            record = fastavro.schemaless_reader(stream, schema, return_record_name=True)
        except Exception as error:
            raise DecodeError(
                REASON_BAD_AVRO,
                f"{framing} Avro does not decode with its writer schema: {type(error).__name__}: {error}",
            ) from None
        # Bytes after the record are ignored, as Avro's Java readers (and so every Kafka consumer) ignore them.
        return record
