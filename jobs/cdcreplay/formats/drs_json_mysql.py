"""Huawei DRS JSON for MySQL / GaussDB(for MySQL) (docs/format-spec.md c1): see drs_json."""

from __future__ import annotations

from cdcreplay.formats.drs_json import VariantDecoder
from cdcreplay.formats.envelopes.drs_variants import FORMAT_MYSQL, VARIANTS

FORMAT_ID = FORMAT_MYSQL
decode_in_python, reads_natively, decode_natively, decode = VariantDecoder(VARIANTS[FORMAT_ID]).functions()
