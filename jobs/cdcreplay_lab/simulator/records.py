"""The Kafka record every encoder yields and every archive layout stores."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple


class KafkaRecord(NamedTuple):
    """One Kafka record as a consumer sees it. ``value`` None is a tombstone."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime  # UTC, millisecond precision (Kafka timestamps are epoch ms)
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
