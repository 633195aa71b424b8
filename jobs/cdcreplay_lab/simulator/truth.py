"""The true final state as text: what a decoder + compactor must publish, one JSON object per live row."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

from cdcreplay_lab.simulator.history import History


def _java_double(value: float) -> str:
    """Double as Java's Double.toString (and Spark's CAST(double AS STRING)) render it: shortest digits, plain
    notation in [1e-3, 1e7), else ``d.dddE<exp>``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{len(text) - 1 + exponent}"


def canonical_text(value, spark_type: str) -> str | None:
    """``value`` as Spark renders ``CAST(value AS STRING)`` for its Spark type (the changelog's canonical text)."""
    if value is None:
        return None
    if spark_type == "boolean":
        return "true" if value else "false"
    if spark_type.startswith("decimal"):
        return format(value, "f")
    if spark_type in ("double", "float"):
        return _java_double(value)
    if spark_type == "date":
        return value.isoformat()
    if spark_type in ("timestamp_ntz", "timestamp"):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        if value.microsecond:
            text += "." + f"{value.microsecond:06d}".rstrip("0")
        return text
    return str(value)


def _json_value(value, spark_type: str):
    if isinstance(value, Decimal | date | datetime):
        return canonical_text(value, spark_type)
    return value


def json_row(table_id: str, row: dict, types: dict[str, str]) -> str:
    """One row as a truth line: ``table_id`` first, then the row's columns in the order given."""
    document = {"table_id": table_id}
    document.update({name: _json_value(value, types.get(name, "string")) for name, value in row.items()})
    return json.dumps(document, ensure_ascii=False)


def truth_lines(history: History) -> Iterator[str]:
    """Final state as JSON lines: ``table_id`` first, then columns in table order; sorted by table, then key."""
    for table_id in sorted(history.tables):
        spec = history.tables[table_id]
        types = {c.name: c.spark_type for c in spec.columns}
        for row in history.final_state(table_id):
            yield json_row(table_id, row, types)


def write_truth(history: History, path: Path | str) -> int:
    """Write ``truth_lines`` to ``path``; returns the number of rows."""
    count = 0
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8", newline="\n") as handle:
        for line in truth_lines(history):
            handle.write(line + "\n")
            count += 1
    return count
