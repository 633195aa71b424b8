"""Simulator encoders of issue 5 (Debezium Avro, Qlik JSON, Qlik Avro) as (encode, pipeline settings) pairs.

Each writes the files its readers need (Avro schemas) into the archive folder under names starting with ``_``, and
its ``pipeline`` function returns the config entries that point a pipeline at them.
"""

from __future__ import annotations

from pathlib import Path

from cdcreplay_lab.simulator.encode_debezium_avro import SCHEMA_FOLDER, encode_debezium_avro
from cdcreplay_lab.simulator.encode_qlik import encode_qlik_avro, encode_qlik_json


def _registry_dir(out_dir: Path) -> dict:
    return {"options": {"schema_registry_dir": str(Path(out_dir) / SCHEMA_FOLDER)}}


def _nothing(out_dir: Path) -> dict:
    return {}


ENCODERS = {
    "debezium-avro": (lambda history, out_dir: encode_debezium_avro(history, out_dir), _registry_dir),
    "qlik-json": (lambda history, out_dir: encode_qlik_json(history), _nothing),
    "qlik-avro": (lambda history, out_dir: encode_qlik_avro(history), _nothing),
}
