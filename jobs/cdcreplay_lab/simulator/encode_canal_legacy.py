"""Encode a history as a LEGACY Alibaba DTS instance writes "Canal Json" (created before 2022-03-20, never restarted).

The same messages as ``encode_canal_json``, with the arrays swapped the legacy way:
- UPDATE: ``old`` holds the after images (every column, DTS's default) and ``data`` the before images;
- DELETE: the deleted rows are in ``old`` and ``data`` is null;
- INSERT, INIT and DDL messages are unchanged.
A reader must be told the layout (``options.legacy_swapped: true``): only the DELETEs give it away.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from cdcreplay_lab.simulator.encode_canal import encode_canal_json
from cdcreplay_lab.simulator.history import History
from cdcreplay_lab.simulator.records import KafkaRecord

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def legacy_layout(record: KafkaRecord) -> KafkaRecord:
    """One open-source-layout Canal JSON record rewritten in the legacy DTS layout."""
    message = json.loads(record.value)
    kind = message.get("type")
    if kind == "UPDATE":
        after = message["data"]
        # The open-source `old` lists only the changed columns' old values: the before image is data overlaid with it.
        message["data"] = [{**row, **changed} for row, changed in zip(after, message["old"], strict=True)]
        message["old"] = after
    elif kind == "DELETE":
        message["old"], message["data"] = message["data"], None
    else:
        return record
    return record._replace(value=_compact(message).encode("utf-8"))


def legacy_records(records: Iterable[KafkaRecord]) -> Iterator[KafkaRecord]:
    for record in records:
        yield legacy_layout(record)


def encode_canal_json_legacy(history: History, **options) -> Iterator[KafkaRecord]:
    return legacy_records(encode_canal_json(history, **options))
