"""Huawei DRS JSON-C for MySQL / GaussDB(for MySQL) (docs/format-spec.md c2): see drs_json."""

from __future__ import annotations

from pyspark.sql import DataFrame

from cdcreplay.config import PipelineConfig
from cdcreplay.formats.drs_json import FORMAT_JSON_C, VARIANTS, decode_variant, timestamp_zone_of

FORMAT_ID = FORMAT_JSON_C


def check_config(pipeline: PipelineConfig) -> None:
    timestamp_zone_of(pipeline)


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_variant(records, pipeline, VARIANTS[FORMAT_ID])
