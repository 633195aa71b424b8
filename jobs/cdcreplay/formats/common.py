"""What every format shares: the entry a decoder emits per row-change, and the decoded rows entries become.

A format turns each raw Kafka record into entries (ENTRY_DDL: one per row-change; exactly one for a control message
or a quarantined record) -- normally in Python (``python_rows``). Routing them is the same for every format
(``formats.routing``): table identity, key override from config, key text, type overrides, value validation, and the
route to the changelog, the control log or the quarantine with its reason. ``finish`` does that for a DataFrame whose
entries were built in Spark (drs-dds-json folds its documents there before routing).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.routing import (
    DECODED_DDL,
    Routing,
    decoded_arrow_schema,
    decoded_batch,
    entry_from_arrow,
    route,
)
from cdcreplay.formats.routing import (  # the record kinds are defined with the routing; the pipeline imports them here
    KIND_CHANGE as KIND_CHANGE,
)
from cdcreplay.formats.routing import KIND_CONTROL as KIND_CONTROL
from cdcreplay.formats.routing import KIND_QUARANTINE as KIND_QUARANTINE
from cdcreplay.formats.routing import RECORD_KINDS as RECORD_KINDS

RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")
COORDINATES = ("topic", "partition", "offset")  # a record's Kafka coordinates: unique in a deduplicated selection

ENTRY_DDL = (
    "record_kind string, op string, control_kind string, reason string, detail string, "
    "source_db string, source_schema string, source_table string, "
    "key_columns array<string>, key_image map<string,string>, "
    "after map<string,string>, before map<string,string>, column_types map<string,string>, "
    "position array<decimal(38,0)>, event_time timestamp, row_index int"
)
DECODED_COLUMNS = S.column_names(DECODED_DDL)


def finish(records: DataFrame, entries: Column, pipeline: PipelineConfig) -> DataFrame:
    """Records (raw columns) + their entries -> decoded rows with DECODED_DDL columns (``formats.routing``)."""
    exploded = records.select(*RECORD_COLUMNS, F.explode(entries).alias("e"))
    routing = Routing.of(pipeline)
    arrow_schema = decoded_arrow_schema()  # on the driver: parsing the DDL needs the Spark session

    def run(batches):
        for batch in batches:
            rows = [route(entry_from_arrow(e), routing) for e in batch.column("e").to_pylist()]
            yield decoded_batch(batch, list(range(batch.num_rows)), rows, arrow_schema)

    return exploded.mapInArrow(run, DECODED_DDL)
