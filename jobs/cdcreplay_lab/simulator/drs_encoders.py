"""The simulator encoders of the Huawei DRS formats as ``(encode, pipeline)`` pairs, spliced into ``encoders.ENCODERS``.

Kept apart so that ``encoders.py`` needs one line for all of them. DRS DDS (MongoDB) is not here: its documents do not
have the relational tables' columns and types, so the generic truth tests (parametrized over ``ENCODERS``) cannot
judge it; ``tests/test_huawei_dds.py`` compares it with the truth through the documented document mapping
(``encode_drs_dds.expected_documents``).
"""

from __future__ import annotations

from cdcreplay_lab.simulator import encode_drs_avro
from cdcreplay_lab.simulator.encode_drs_json import encode_drs_json, pipeline_settings
from cdcreplay_lab.simulator.history import TABLES


def _json(source: str):
    return (
        lambda history, out_dir: encode_drs_json(history, source),
        lambda out_dir: pipeline_settings(TABLES, source),
    )


DRS_ENCODERS = {
    "drs-json-mysql": _json("mysql"),
    "drs-json-c": _json("json-c"),
    # The generic truth tests need table ids `shop.<table>`: an Oracle source gives them (DRS leaves `database`
    # empty for Oracle); the PostgreSQL source (`shop.public.<table>`) has its own truth test.
    "drs-json-rdbms": _json("oracle"),
    "drs-avro": (
        lambda history, out_dir: encode_drs_avro.encode_drs_avro(history, out_dir),
        encode_drs_avro.pipeline_settings,
    ),
}
