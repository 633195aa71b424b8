"""Debezium change events serialized by Kafka Connect's JsonConverter, with or without schemas (formats.md e).

The Kafka value is the JSON text itself; everything else -- op mapping, snapshot markers, connector positions, type
conversion, MongoDB documents -- is the shared envelope logic of ``debezium_envelope`` (native Spark throughout).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import text_payload
from cdcreplay.formats.debezium_envelope import canonical_value, decimal_from_base64, decode_envelopes

FORMAT_ID = "debezium-json"

__all__ = ["FORMAT_ID", "canonical_value", "decimal_from_base64", "decode"]


def decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    return decode_envelopes(records, text_payload(F.col("value")), F.col("key").cast("string"), pipeline)
