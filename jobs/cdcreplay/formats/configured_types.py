"""What the pipeline config declares per table, as Spark columns, for formats whose messages lack types or keys.

Shareplex JSON carries neither types nor keys, DataWorks JSON has no decimal type: for them the config's
``tables.<table>.column_types`` / ``primary_key`` are the source of truth, and a decoder must know them while it
decodes (to render a DataWorks DATE as a date, to tell a key change, to see a partial image). ``finish`` applies the
same config through these helpers for every format; a decoder may look it up earlier.

A configured type is applied with CAST, which rounds a decimal with more fraction digits than the scale and drops the
time of day from a date: ``lossy_columns`` names the values a cast would change, so a decoder quarantines them instead
of letting the cast alter a value silently.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from cdcreplay.config import PipelineConfig

TEXT_MAP = "map<string,string>"


def table_id_of(db: Column, schema: Column, table: Column) -> Column:
    """The table id ``finish`` derives (empty parts are absent); NULL without a table name."""
    parts = [F.nullif(part, F.lit("")) for part in (db, schema, table)]
    return F.when(parts[2].isNotNull(), F.concat_ws(".", *parts))


def _literal_map(mapping: dict, value_type: str) -> Column:
    if not mapping:
        return F.create_map().cast(f"map<string,{value_type}>")
    items = []
    for key, value in sorted(mapping.items()):
        items.extend([F.lit(key), value])
    return F.create_map(*items)


def configured_keys(pipeline: PipelineConfig) -> Column:
    """map<table id, array<key column>> of ``tables.<t>.primary_key``."""
    return _literal_map(
        {tid: F.array(*[F.lit(c) for c in t.primary_key]) for tid, t in pipeline.tables.items() if t.primary_key},
        "array<string>",
    )


def configured_types(pipeline: PipelineConfig) -> Column:
    """map<table id, map<column, Spark type>> of ``tables.<t>.column_types``."""
    return _literal_map(
        {
            tid: F.create_map(*[x for c, ty in sorted(t.column_types.items()) for x in (F.lit(c), F.lit(ty))])
            for tid, t in pipeline.tables.items()
            if t.column_types
        },
        TEXT_MAP,
    )


def _decimal_lossy(value: Column, spark_type: Column) -> Column:
    """True when CAST(value AS decimal(p,s)) would round the value or overflow (exponent notation counts as lossy)."""
    precision = F.regexp_extract(spark_type, r"^decimal\(\s*(\d+)\s*,", 1).cast("int")
    scale = F.regexp_extract(spark_type, r",\s*(\d+)\s*\)$", 1).cast("int")
    digits = F.regexp_replace(F.trim(value), r"^[+-]", "")
    whole = F.regexp_replace(F.regexp_extract(digits, r"^(\d*)", 1), r"^0+", "")
    fraction = F.regexp_replace(F.regexp_extract(digits, r"\.(\d*)$", 1), r"0+$", "")
    plain = digits.rlike(r"^(\d+(\.\d*)?|\.\d+)$")
    return ~plain | (F.length(whole) > precision - scale) | (F.length(fraction) > scale)


def _date_lossy(value: Column) -> Column:
    """True when the text carries a time of day other than midnight (CAST AS date would drop it)."""
    time_part = F.regexp_extract(F.trim(value), r"^[+-]?\d+-\d+-\d+[T ](.*)$", 1)
    return (time_part != "") & ~time_part.rlike(r"^00:00(:00(\.0*)?)?$")


def lossy_columns(image: Column, types: Column) -> Column:
    """Columns of a canonical-text image whose value CAST to its (configured) type would change."""
    empty = F.create_map().cast(TEXT_MAP)

    def lossy(column: Column, value: Column) -> Column:
        spark_type = F.coalesce(types[column], F.lit("string"))
        return (
            F.when(value.isNull(), F.lit(False))
            .when(spark_type.startswith("decimal"), _decimal_lossy(value, spark_type))
            .when(spark_type == "date", _date_lossy(value))
            .otherwise(F.lit(False))
        )

    return F.coalesce(F.map_keys(F.map_filter(F.coalesce(image, empty), lossy)), F.array().cast("array<string>"))
