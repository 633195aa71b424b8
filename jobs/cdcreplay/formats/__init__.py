"""Format registry: a stable id per vendor change format, each turning raw Kafka records into decoded rows.

Every decoder has the signature ``decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame`` and returns
``formats.common.DECODED_DDL`` columns; ``record_kind`` routes each row to the changelog, control log or quarantine.
"""

from __future__ import annotations

from collections.abc import Callable

from cdcreplay.config import KNOWN_FORMATS


def decoder(format_id: str) -> Callable:
    """The decode function registered under ``format_id``."""
    if format_id == "debezium-json":
        from cdcreplay.formats import debezium_json

        return debezium_json.decode
    if format_id == "canal-json":
        from cdcreplay.formats import canal_json

        return canal_json.decode
    raise KeyError(f"no decoder registered for format {format_id!r}; known formats: {', '.join(KNOWN_FORMATS)}")
