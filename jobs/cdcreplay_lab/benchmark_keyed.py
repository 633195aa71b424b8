"""An archive of one big table and one night of changes to it, written by Spark: the incremental target's own case.

``cdcreplay benchmark --incremental --state-keys 5000000`` measures a nightly run of 200,000 new records onto a state
of 5M keys against a full rebuild of the same archive. The simulator's mix reaches 5M keys only at ~13M row events
(over an hour of one core to simulate, and as long again to rebuild); Spark writes this archive in a minute or two.
It is DTS Shareplex JSON, exactly as DTS writes it (``simulator/encode_shareplex.py``), because that format decodes
fastest of all, so the full rebuild it is compared with is the shortest any format could give. One table,
``bench.items`` (id, name, amount, note), one topic partition, every record its own transaction:

- offsets 0..N-1, the first two days: the initial load, one ``ins`` per key ``id`` = offset;
- the newest M records (offsets N..N+M-1, ``--nightly-events``, default 200,000), on the third day, each on its own
  key: every tenth record a ``del`` of an existing key, every tenth (shifted by one) an ``ins`` of a new key (its
  offset), the rest an ``upd`` of an existing key. As DTS writes a Shareplex update, ``data`` holds only the changed
  columns (``amount`` + 1, ``note``) and ``key`` the key column and the changed columns' old values: the nightly run
  must complete the image from the stored row, the full rebuild from the same key's insert. The existing keys the
  night touches are spread evenly over 0..N-1 (key j * (N // M) for the night's j-th record), as the simulator's
  uniformly chosen keys are;
- with ``--nights K``, K such nights of M records, one a day (NIGHT_SPACING). Night n (from 0) touches the existing
  keys j * (N // M) + n, so no two nights change the same key, and at most N // M nights fit.

The order is (scn, trans, seq) = (FIRST_SCN + offset, "0.0.<offset>", 1); ``meta.time`` is the Kafka timestamp.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

FORMAT = "dts-shareplex-json"
TOPIC = "dts.bench.shareplex"
SCHEMA, TABLE = "bench", "items"
TABLE_ID = f"{SCHEMA}.{TABLE}"
COLUMN_TYPES = {"id": "bigint", "name": "string", "amount": "decimal(12,2)", "note": "string"}
FIRST_SCN = 14_589_063_118_712
START = datetime(2026, 1, 5, tzinfo=UTC)  # the load spans two days from here, the night is the third
LOAD_SECONDS = 2 * 86_400
NIGHT_START_SECONDS = LOAD_SECONDS + 3_600
NIGHT_SECONDS = 20 * 3_600
NIGHT_SPACING = timedelta(days=1)  # with several nights, night n starts n days after the first
ROWS_PER_FILE = 500_000
ARCHIVE_VERSION = 1  # bump when the records written change, so archives written before are written again


def pipeline_settings() -> dict:
    """What a reader of the archive needs: Shareplex carries neither keys nor types."""
    return {"tables": {TABLE_ID: {"primary_key": ["id"], "column_types": dict(COLUMN_TYPES)}}}


def write_keyed_archive(spark, folder: Path, keys: int, nightly: int, nights: int = 1) -> None:
    """Write the archive (module docstring) as Parquet with Spark's Kafka-source columns."""
    from pyspark.sql import functions as F

    if keys < nightly:
        raise ValueError(f"the night touches {nightly:,} distinct existing keys at most: --state-keys must be >= that")
    stride = keys // nightly  # the existing keys a night touches are this far apart
    if nights > stride:
        raise ValueError(
            f"{nights} nights of {nightly:,} records each change keys no other night changes only up to "
            f"--state-keys // --nightly-events = {stride} nights: give fewer --nights or more --state-keys"
        )
    total = keys + nightly * nights
    offset = F.col("id")
    night = offset >= keys
    n = F.floor((offset - keys) / nightly)  # which night
    j = offset - keys - n * nightly  # the record's place in its night
    kind = F.when(~night, F.lit("load")).when(j % 10 == 0, F.lit("del")).when(j % 10 == 1, F.lit("new"))
    kind = kind.otherwise(F.lit("upd"))
    row_id = F.when(~night, offset).when(kind == "new", offset).otherwise(j * stride + n)

    def loaded_cents(key):
        return (key * 7_919) % 10_000_000 + 100

    def amount(cents):
        return F.format_string("%d.%02d", (cents / 100).cast("long"), cents % 100)

    def loaded(column: str, key):
        """A column's value as the initial load wrote it for ``key``."""
        return {
            "id": key.cast("string"),
            "name": F.concat(F.lit("item "), key.cast("string")),
            "amount": amount(loaded_cents(key)),
            "note": F.concat(F.lit("n"), (key % 97).cast("string")),
        }[column]

    def image(columns, value) -> object:
        return F.create_map(*[part for column in columns for part in (F.lit(column), value(column))])

    changed = ("amount", "note")
    updated = {
        "amount": amount(loaded_cents(F.col("_row")) + 100),
        "note": F.lit("changed at night"),
    }
    night_start = NIGHT_START_SECONDS + n * NIGHT_SPACING.total_seconds()
    seconds = F.when(~night, offset * LOAD_SECONDS / keys).otherwise(night_start + j * NIGHT_SECONDS / nightly)
    meta = F.struct(
        F.date_format("_time", "yyyy-MM-dd'T'HH:mm:ss").alias("time"),
        F.lit(84).alias("userid"),
        F.when(F.col("_kind") == "upd", F.lit("upd"))
        .when(F.col("_kind") == "del", F.lit("del"))
        .otherwise(F.lit("ins"))
        .alias("op"),
        (F.lit(FIRST_SCN) + offset).cast("string").alias("scn"),
        F.concat(F.lit("AAATGp"), F.lpad(F.col("_row").cast("string"), 12, "A")).alias("rowid"),
        F.concat(F.lit("0.0."), offset.cast("string")).alias("trans"),
        F.lit(1).alias("seq"),
        F.lit(1).alias("size"),
        F.lit(TABLE_ID).alias("table"),
        F.lit("1/1").alias("idx"),
        F.date_format(F.col("_time") + F.expr("INTERVAL 2 SECONDS"), "yyyy-MM-dd'T'HH:mm:ss").alias("posttime"),
    )
    full_row = image(COLUMN_TYPES, lambda column: loaded(column, F.col("_row")))
    message = F.struct(
        meta.alias("meta"),
        F.when(F.col("_kind") == "upd", image(changed, updated.get)).otherwise(full_row).alias("data"),
        F.when(F.col("_kind") == "upd", image(("id", *changed), lambda column: loaded(column, F.col("_row")))).alias(
            "key"
        ),  # NULL, so left out of the JSON, except on updates
    )
    records = (
        spark.range(0, total, numPartitions=max(1, -(-total // ROWS_PER_FILE)))
        .withColumn("_kind", kind)
        .withColumn("_row", row_id)
        .withColumn("_time", F.timestamp_seconds(F.lit(START.timestamp()) + seconds))
        .select(
            F.lit(TOPIC).alias("topic"),
            F.lit(0).alias("partition"),
            offset.alias("offset"),
            F.col("_time").alias("timestamp"),
            F.lit(0).alias("timestampType"),
            F.encode(F.lit(TABLE), "UTF-8").alias("key"),
            F.encode(F.to_json(message), "UTF-8").alias("value"),
            F.array().cast("array<struct<key: string, value: binary>>").alias("headers"),
        )
    )
    records.write.mode("overwrite").parquet(str(folder))
