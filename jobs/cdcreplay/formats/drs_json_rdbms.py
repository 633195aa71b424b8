"""Huawei DRS JSON for Oracle / PostgreSQL / GaussDB / SQL Server (docs/format-spec.md c3): see drs_json."""

from __future__ import annotations

from pyspark.sql import DataFrame

from cdcreplay.config import PipelineConfig
from cdcreplay.formats.drs_json import FORMAT_RDBMS, VARIANTS, decode_variant

FORMAT_ID = FORMAT_RDBMS


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_variant(records, pipeline, VARIANTS[FORMAT_ID])
