"""The one JSON reader of the Python decoders, with the strictness each format declares.

Every vendor's messages are JSON text, but the formats were specified (and their expected rows written) against
three different readings of it. Each format module names its reading; they differ in three ways only:

- ``EXACT`` (debezium-json, canal-json): integers as int, other numbers as Decimal; text after the object makes it
  unreadable; a lone UTF-16 surrogate escape is kept in its string (below).
- ``PLAIN`` (qlik-json, drs-dds-json): numbers as Python reads them (others than integers as float); text after the
  object makes it unreadable; a lone surrogate makes the whole message ``not_utf8``.
- ``AS_SPARK_READ`` (dts-shareplex-json, dataworks-json, drs-json): numbers as the text Spark's ``from_json`` gives a
  string field; text after the object is ignored; a lone surrogate is kept in its string.

Why they differ:
- ``EXACT`` keeps every number token's exact value: Debezium and Canal values are rendered from them, and a decimal of
  38 digits must not pass through a float. Qlik writes its values as strings, DRS DDS reads its values in MongoDB's
  shell syntax (``mongo_shell``), so their few numbers (positions, flags) are read as Python reads them.
- ``AS_SPARK_READ`` formats were Spark expressions first; ``from_json_in_python`` keeps what Spark's reader made of
  a message (Jackson's number texts, nesting to 1000 levels, text after the object ignored).
- A lone surrogate (``"\\ud800"``) is JSON but not Unicode text. Where it is kept, a row that carries it into the
  changelog is quarantined ``not_utf8`` by ``routing``, naming the column (Canal quarantines a multi-row message as a
  whole); where the reading refuses it, the whole message is.

Every reading: a payload that is not UTF-8 is ``not_utf8``; one that is no JSON object, or nested deeper than the
parser goes, is ``not_json``. Both say so in the quarantine detail with the payload's start.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from cdcreplay import schema as S
from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.formats.wire.from_json_in_python import parse_as_spark_read

# Only a text that escapes a surrogate can hold a lone one: the full check runs for those alone.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
LONE_SURROGATE = "payload escapes a lone UTF-16 surrogate (\\ud800-\\udfff): it is not Unicode text"
NOT_UTF8 = "payload is not valid UTF-8 text"


@dataclass(frozen=True)
class JsonReading:
    """How a format reads its messages' JSON text (the module's docstring lists the three)."""

    name: str
    parse_text: Callable[[str], object]  # the JSON value of a text; ValueError when it is none
    refuses_lone_surrogates: bool

    def parse(self, text: str):
        """The JSON value of ``text``; ValueError when it is none (nesting too deep for the parser included)."""
        try:
            return self.parse_text(text)
        except RecursionError:
            raise ValueError("nested deeper than the JSON parser reads") from None


EXACT = JsonReading("exact", json.JSONDecoder(parse_float=Decimal).decode, refuses_lone_surrogates=False)
PLAIN = JsonReading("plain", json.JSONDecoder().decode, refuses_lone_surrogates=True)
AS_SPARK_READ = JsonReading("as Spark read it", parse_as_spark_read, refuses_lone_surrogates=False)


def payload_text(payload: bytes) -> str:
    """The payload as text, or DecodeError ``not_utf8``."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        raise DecodeError(S.REASON_NOT_UTF8, NOT_UTF8) from None


def not_json(payload: bytes | str) -> DecodeError:
    """The error of a payload that is no JSON object a format reads, naming its start."""
    text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
    return DecodeError(S.REASON_NOT_JSON, f"payload is not a JSON object: {text[:120]}")


def escapes_surrogate(text: str) -> bool:
    """Whether ``text`` escapes a UTF-16 surrogate (a pair or a lone one): a substring search first."""
    return ("\\ud" in text or "\\uD" in text) and SURROGATE_ESCAPE.search(text) is not None


def object_of(text: str, reading: JsonReading) -> dict:
    """The JSON object ``text`` holds, read as ``reading`` says, or DecodeError ``not_json`` / ``not_utf8``."""
    try:
        document = reading.parse(text)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise not_json(text)
    if reading.refuses_lone_surrogates and escapes_surrogate(text):
        try:
            json.dumps(document, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise DecodeError(S.REASON_NOT_UTF8, LONE_SURROGATE) from None
    return document


def read_object(payload: bytes, reading: JsonReading) -> dict:
    """The payload's JSON object, read as ``reading`` says, or DecodeError ``not_utf8`` / ``not_json``."""
    return object_of(payload_text(payload), reading)
