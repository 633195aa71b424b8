"""Ground truth for tests, the demo and the benchmarks: a simulated MySQL change history, its encodings, its archive.

    history = simulate(seed=7, events=2000, drift=3)           # what happened in the source (deterministic)
    records = encode_debezium_json(history)                     # or encode_canal_json(history)
    write_archive(records, out_dir, layout="parquet")           # Spark Kafka-source columns on disk
    history.final_state("shop.customers")                       # what every decoder + compactor must produce

No pyspark here: the simulator is plain Python and pyarrow.
"""

from cdcreplay_lab.simulator.archive_writer import LAYOUTS, build_sample_archive, jsonl_line, kcat_line, write_archive
from cdcreplay_lab.simulator.encode_canal import canal_text, encode_canal_json
from cdcreplay_lab.simulator.encode_debezium import decimal_from_base64, decimal_to_base64, encode_debezium_json
from cdcreplay_lab.simulator.encoders import FORMATS
from cdcreplay_lab.simulator.history import (
    TABLES,
    Column,
    DriftRow,
    Event,
    History,
    ResyncExpectation,
    SnapshotEpoch,
    TableSpec,
    simulate,
)
from cdcreplay_lab.simulator.records import KafkaRecord
from cdcreplay_lab.simulator.truth import canonical_text, json_row, truth_lines, write_truth

__all__ = [
    "FORMATS",
    "LAYOUTS",
    "TABLES",
    "Column",
    "DriftRow",
    "Event",
    "History",
    "KafkaRecord",
    "ResyncExpectation",
    "SnapshotEpoch",
    "TableSpec",
    "build_sample_archive",
    "canal_text",
    "canonical_text",
    "decimal_from_base64",
    "decimal_to_base64",
    "encode_canal_json",
    "encode_debezium_json",
    "json_row",
    "jsonl_line",
    "kcat_line",
    "simulate",
    "truth_lines",
    "write_archive",
    "write_truth",
]
