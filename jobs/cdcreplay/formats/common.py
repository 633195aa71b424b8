"""What every format shares: the entry a decoder emits per row-change, the decoded rows entries become, and how
those are written (``write_by_kind``).

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
from cdcreplay.spark import one_file_per_folder

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


# Decoded columns whose values differ from row to row (a row's image values, key, position, coordinates, times):
# Parquet's writer would build a dictionary of each column chunk's values and give it up once it outgrew its page.
# That was 8.6% of the executors' time over a 2M-event Debezium run; without it the decode stage took about 9% less
# (docs/benchmarks.md, fifty-fifth session). The names, types and few-valued columns keep their dictionaries.
UNIQUE_VALUED_COLUMNS = (
    "key",
    "after.key_value.value",
    "before.key_value.value",
    "position.list.element",
    "event_time",
    "offset",
    "timestamp",
    "detail",
    "raw_key",
    "raw_value",
)


def write_by_kind(decoded: DataFrame, path: str, mode: str, folders: int = len(RECORD_KINDS)) -> None:
    """Decoded rows into ``path`` as Parquet, one ``record_kind=<kind>`` folder per kind, with a file open per folder
    in each task instead of the rows sorted by kind first (``spark.one_file_per_folder``); ``folders``: how many
    kinds the rows can have. Columns of unique values are written without a dictionary (``UNIQUE_VALUED_COLUMNS``)."""
    no_dictionaries = {f"parquet.enable.dictionary#{column}": "false" for column in UNIQUE_VALUED_COLUMNS}
    with one_file_per_folder(decoded.sparkSession, folders):
        decoded.write.mode(mode).options(**no_dictionaries).partitionBy("record_kind").parquet(path)
