"""Huawei DRS JSON-C for MySQL / GaussDB(for MySQL) (docs/format-spec.md c2): see drs_json."""

from __future__ import annotations

from cdcreplay.config import PipelineConfig
from cdcreplay.formats.drs_json import VariantDecoder, timestamp_zone_of
from cdcreplay.formats.envelopes.drs_variants import FORMAT_JSON_C, VARIANTS

FORMAT_ID = FORMAT_JSON_C
decode_in_python, reads_natively, decode_natively, decode = VariantDecoder(VARIANTS[FORMAT_ID]).functions()


def check_config(pipeline: PipelineConfig) -> None:
    timestamp_zone_of(pipeline)
