"""JSON formats decoded by Spark's own JSON reader; the Python decoder stays the reference for what it cannot vouch for.

A native decoder parses each record with ``from_json`` and builds its changelog row from column expressions only (no
Python UDF, no ``mapInArrow``, no lambdas). It decodes the records whose shape it fully understands and flags every
other one ``native = false``: those records -- control messages, quarantines, rare layouts, values it cannot render
exactly -- go through the format's Python decoder, which stays the one reference for every corner case. So each
record is decoded by exactly one path, and both paths give the same row for a record both could decode
(``tests/test_native_decoding.py`` holds them to that).

What Spark's JSON reader does that the Python decoders do not, and the guards that keep such records off the native
path:
  - a number token in a string field is read through a double and printed as Java prints it (``1.10`` -> ``1.1``,
    ``1e5`` -> ``100000.0``, ``12345678901234567890.123456789`` -> ``1.2345678901234567E19``); integers of any length
    are kept exactly. :func:`plain_numbers` passes only number tokens that Java prints back as written;
  - text after the JSON object is ignored (Python reads it as not JSON); ``\\ud800`` (a lone surrogate) becomes "?";
    ``NaN``/``Infinity`` are numbers; an escaped control character inside a nested object is re-escaped in upper case.
    :func:`json_guards` sends such records to Python;
  - single-quoted strings are JSON to Jackson: turned off (``JSON_OPTIONS``), so they are unreadable on both paths.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.formats.common import DECODED_COLUMNS, KIND_CONTROL

# Records the native path did not decode carry this flag false; the caller hands them to the Python decoder.
NATIVE_FLAG = "native"
CORRUPT_FIELD = "_corrupt"
JSON_OPTIONS = {"allowSingleQuotes": "false", "columnNameOfCorruptRecord": CORRUPT_FIELD, "mode": "PERMISSIVE"}

# A number token (after ':', ',' or '[') that Java's Double.toString may not print back as written: an exponent, a
# fraction of more than one digit ending in 0, 16 or more digits, 8 or more integer digits with a fraction (Java
# switches to E notation at 10^7), a value below 10^-2 (E notation below 10^-3); NaN and Infinity; -0 (read as 0).
_RISKY_NUMBER = (
    r"[:,\[]\s*(-0(?![.0-9])|-?(NaN|Infinity|[0-9.]*[eE]|[0-9]*\.[0-9]*[0-9]0(?![0-9])|[0-9]{8,}\.|0\.0[0-9]"
    r"|[0-9.]{17}))"
)
# A lone surrogate escape ("?" to Spark) or an escaped control character (re-escaped differently in nested objects).
RISKY_ESCAPE = r"\\u[dD][89abAB]|\\u00[01]"


def text_of(binary: Column) -> Column:
    """The record's bytes as text, or NULL when they are not valid UTF-8 (Python quarantines those: ``not_utf8``)."""
    return F.when(F.is_valid_utf8(binary.cast("string")), binary.cast("string"))


def plain_numbers(text: Column) -> Column:
    """True when every number token of ``text`` reads back from a double as written (so a string field holds the
    token's own text); conservative: a string that looks like such a token also says false."""
    return ~text.rlike(_RISKY_NUMBER)


def json_guards(text: Column) -> Column:
    """``text`` holds nothing Spark's JSON reader renders differently from the Python decoders (see module doc)."""
    # Most texts hold no \u escape at all: a substring search spares them the regular expression.
    return plain_numbers(text) & ((F.instr(text, "\\u") == 0) | ~text.rlike(RISKY_ESCAPE))


def parse(text: Column, ddl: str) -> Column:
    """``from_json`` with the options every native decoder uses; the struct has ``_corrupt`` set when the text is
    not a JSON object of that shape (a field of another JSON type included)."""
    return F.from_json(text, f"{ddl}, {CORRUPT_FIELD} string", JSON_OPTIONS)


def one_object(text: Column) -> Column:
    """The text ends with its object's closing brace and opens as many braces as it closes: Spark ignores what
    follows a complete object, Python does not. A heuristic for the common case (a stray closing brace, a member
    after the payload): braces inside strings can hide a trailing text that balances them."""
    braces = F.regexp_replace(text, r"[^{}]+", "")  # one pass; a payload holds a few braces
    return text.endswith("}") & (F.length(braces) == 2 * F.length(F.replace(braces, F.lit("}"), F.lit(""))))


def literal_map(mapping: dict[str, str]) -> Column:
    """A map<string,string> literal in the dict's order (an empty dict gives an empty typed map)."""
    if not mapping:
        return F.create_map().cast("map<string,string>")
    return F.map_from_arrays(
        F.array(*[F.lit(k) for k in mapping]), F.array(*[F.lit(v) for v in mapping.values()])
    ).cast("map<string,string>")


def with_tombstones(columns: dict[str, Column], value: Column, key: Column) -> list[Column]:
    """``columns`` (a native decoder's row, by name) for every record but a Kafka tombstone, which becomes the control
    row every Python decoder writes for it (``python_rows.safe_decode``): a null or empty value follows a delete so
    that log compaction can drop the key, and has nothing to apply. Its detail is the key in base64."""
    tombstone = value.isNull() | (F.octet_length(value) == 0)
    instead = {
        NATIVE_FLAG: F.lit(True),
        "record_kind": F.lit(KIND_CONTROL),
        "control_kind": F.lit(S.CONTROL_TOMBSTONE),
        "detail": F.when(F.octet_length(key) > 0, F.base64(key)),
        "column_types": literal_map({}),
        "row_index": F.lit(0),
    }
    kept = ("topic", "partition", "offset", "timestamp", "format", RECORD_KEY, RECORD_VALUE, RECORD_HEADERS)
    return [
        F.when(tombstone, instead[name]).otherwise(column).alias(name)
        if name in instead
        else column.alias(name)
        if name in kept
        else F.when(~tombstone, column).alias(name)
        for name, column in columns.items()
    ]


# The raw record beside the decoded columns (whose `key` is the key's text), for the Python decoder.
RECORD_KEY, RECORD_VALUE, RECORD_HEADERS = "_record_key", "_record_value", "_record_headers"


def record_columns() -> list[Column]:
    """The raw record's own columns under the names a native decoder keeps them by (with the decoded row's)."""
    return [
        "topic",
        "partition",
        "offset",
        F.col("key").alias(RECORD_KEY),
        F.col("value").alias(RECORD_VALUE),
        F.col("headers").alias(RECORD_HEADERS),
    ]


def flagged_records(native: DataFrame) -> DataFrame:
    """The records the native path did not decode, with the raw record columns the Python decoders read."""
    return native.where(~F.col(NATIVE_FLAG)).select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        F.col(RECORD_KEY).alias("key"),
        F.col(RECORD_VALUE).alias("value"),
        F.col(RECORD_HEADERS).alias("headers"),
    )


def with_python_fallback(native: DataFrame, python_decode) -> DataFrame:
    """The natively decoded rows, and the Python decoder's rows for every record the native path flagged.

    ``native`` has the decoded columns, the flag, and the raw record columns (``record_columns``). Both branches
    start from the same parse, which Spark computes once per branch.
    """
    decoded = native.where(F.col(NATIVE_FLAG)).select(*DECODED_COLUMNS)
    return decoded.unionByName(python_decode(flagged_records(native)))


PENDING = "pending_python"  # record kind of a flagged record between the two passes of write_decoded


def write_decoded(native: DataFrame, python_decode, path: str, keep=None) -> None:
    """Decode into ``path`` (Parquet partitioned by record_kind) parsing each record once: the native rows and the
    flagged records (with their raw columns) are written in one pass; the flagged records are then read back,
    decoded in Python and appended. ``keep``: a filter of the decoded rows (the run's tables)."""
    flagged = ~F.col(NATIVE_FLAG)
    first = native.select(
        *[
            F.when(flagged, F.lit(PENDING)).otherwise(F.col(c)).alias(c)
            if c == "record_kind"
            else F.when(flagged, F.col(RECORD_KEY if c == "raw_key" else RECORD_VALUE)).alias(c)
            if c in ("raw_key", "raw_value")
            else F.col(c)
            for c in DECODED_COLUMNS
        ],
        F.when(flagged, F.col(RECORD_HEADERS)).alias("headers"),
    )
    if keep is not None:
        first = first.where(flagged | keep)
    first.write.mode("overwrite").partitionBy("record_kind").parquet(path)
    pending_path = f"{path}/record_kind={PENDING}"
    spark = native.sparkSession
    if not _exists(spark, pending_path):
        return
    pending = spark.read.parquet(pending_path).select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        F.col("raw_key").alias("key"),
        F.col("raw_value").alias("value"),
        "headers",
    )
    second = python_decode(pending)
    if keep is not None:
        second = second.where(keep)
    second.write.mode("append").partitionBy("record_kind").parquet(path)
    _remove(spark, pending_path)


def _exists(spark, path: str) -> bool:
    jvm_path = spark._jvm.org.apache.hadoop.fs.Path(path)
    return jvm_path.getFileSystem(spark._jsc.hadoopConfiguration()).exists(jvm_path)


def _remove(spark, path: str) -> None:
    jvm_path = spark._jvm.org.apache.hadoop.fs.Path(path)
    jvm_path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(jvm_path, True)
