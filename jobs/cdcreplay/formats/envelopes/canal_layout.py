"""What the two Canal JSON decoders (``canal_json`` in Python, ``canal_native`` in Spark's JSON reader) share: the
format id, the row types, and the `data`/`old` layout a source declares (DTS instances created before 2022-03-20
swap the two)."""

from __future__ import annotations

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig

FORMAT_ID = "canal-json"

ROW_TYPES = {"INSERT": S.OP_INSERT, "UPDATE": S.OP_UPDATE, "DELETE": S.OP_DELETE, "INIT": S.OP_SNAPSHOT}
# Open-source Canal's DDL event types; DTS uses "DDL". TRUNCATE also empties the table.
DDL_TYPES = ("DDL", "CREATE", "ALTER", "ERASE", "QUERY", "RENAME", "CINDEX", "DINDEX", "INIT_DDL", "TRUNCATE")

LAYOUT_LEGACY, LAYOUT_OPEN_SOURCE, LAYOUT_UNDECLARED = "legacy", "open-source", "undeclared"


def layout_of(pipeline: PipelineConfig) -> str:
    """The source's declared `data`/`old` layout: legacy, open-source, or undeclared (option absent)."""
    declared = pipeline.options.get("legacy_swapped")
    if declared is None:
        return LAYOUT_UNDECLARED
    return LAYOUT_LEGACY if declared else LAYOUT_OPEN_SOURCE
