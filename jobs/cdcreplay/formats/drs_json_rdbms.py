"""Huawei DRS JSON for Oracle / PostgreSQL / GaussDB / SQL Server (docs/format-spec.md c3): see drs_json."""

from __future__ import annotations

from cdcreplay.formats.drs_json import VariantDecoder
from cdcreplay.formats.envelopes.drs_variants import FORMAT_RDBMS, VARIANTS

FORMAT_ID = FORMAT_RDBMS
decode_in_python, reads_natively, decode_natively, decode = VariantDecoder(VARIANTS[FORMAT_ID]).functions()
