"""A Kafka value as a JSON object, for the formats decoded in Python (Qlik JSON, DRS DDS).

Stricter than ``json.loads`` where the changelog needs it: JSON may escape a lone UTF-16 surrogate ("\\ud800"),
which Python accepts as a string no UTF-8 column can hold -- such a payload is not Unicode text, so it is
quarantined (``not_utf8``) here rather than failing the whole batch when the rows are written. Nesting too deep for
the parser and numbers too long to convert are ``not_json``, like any other unreadable payload.
"""

from __future__ import annotations

import json
import re

from cdcreplay import schema as S
from cdcreplay.formats.python_rows import DecodeError

# Only a payload that escapes a surrogate can hold a lone one: the full check runs for those alone.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def json_object(payload: bytes) -> dict:
    """The payload's JSON object, or DecodeError with the quarantine reason and the payload's start."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise DecodeError(S.REASON_NOT_UTF8, "payload is not valid UTF-8 text") from None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        document = None
    if not isinstance(document, dict):
        raise DecodeError(S.REASON_NOT_JSON, f"payload is not a JSON object: {text[:120]}")
    if SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(document, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise DecodeError(
                S.REASON_NOT_UTF8, "payload escapes a lone UTF-16 surrogate (\\ud800-\\udfff): it is not Unicode text"
            ) from None
    return document
