"""Huawei DRS JSON for Oracle / PostgreSQL / GaussDB / SQL Server (docs/format-spec.md c3): see drs_json."""

from __future__ import annotations

from cdcreplay.formats.drs_json import VariantDecoder
from cdcreplay.formats.envelopes.drs_variants import FORMAT_RDBMS, VARIANTS

FORMAT_ID = FORMAT_RDBMS
_DECODER = VariantDecoder(VARIANTS[FORMAT_ID])
decode_in_python, reads_natively, decode_natively, decode = (
    _DECODER.decode_in_python,
    _DECODER.reads_natively,
    _DECODER.decode_natively,
    _DECODER.decode,
)
