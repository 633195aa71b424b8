"""Which simulator encoder writes which format, and what a pipeline needs to read the result.

An encoder is a function ``(history, out_dir, **options) -> Iterable[KafkaRecord]``. ``out_dir`` is the archive's
folder: an encoder whose format needs more than the records (Avro schema files, a schema-registry export) writes
those there, under names starting with ``_`` so the archive reader skips them. ``pipeline`` returns the pipeline
config entries (``options``, ``tables``) a reader of that archive needs, e.g. the writer schema's path or primary keys
for a format whose messages carry none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cdcreplay_lab.simulator import alibaba_encoders, drs_encoders, qlik_debezium_encoders
from cdcreplay_lab.simulator.encode_canal import encode_canal_json
from cdcreplay_lab.simulator.encode_debezium import encode_debezium_json
from cdcreplay_lab.simulator.history import History
from cdcreplay_lab.simulator.records import KafkaRecord


def _no_settings(out_dir: Path) -> dict:
    return {}


@dataclass(frozen=True)
class Encoder:
    encode: Callable[..., Iterable[KafkaRecord]]
    pipeline: Callable[[Path], dict] = _no_settings


ENCODERS: dict[str, Encoder] = {
    "debezium-json": Encoder(lambda history, out_dir, schemas=True: encode_debezium_json(history, schemas=schemas)),
    "canal-json": Encoder(lambda history, out_dir: encode_canal_json(history)),
    # Vendor encoders, by format id: (encode, pipeline settings) pairs kept beside their encoders.
    **{
        format_id: Encoder(*pair)
        for format_id, pair in {
            **alibaba_encoders.ENCODERS,
            **drs_encoders.DRS_ENCODERS,
            **qlik_debezium_encoders.ENCODERS,
        }.items()
    },
}
FORMATS = tuple(ENCODERS)


def encoder(format_id: str) -> Encoder:
    if format_id not in ENCODERS:
        raise ValueError(f"unknown format {format_id!r}; the simulator encodes {', '.join(FORMATS)}")
    return ENCODERS[format_id]


def encode(format_id: str, history: History, out_dir: Path, **options) -> Iterable[KafkaRecord]:
    return encoder(format_id).encode(history, out_dir, **options)
