"""JSON formats decoded by Spark's own JSON reader; the Python decoder stays the reference for what it cannot vouch for.

A native decoder parses each record with ``from_json`` and builds its changelog row from column expressions only (no
Python UDF, no ``mapInArrow``, no lambdas). It decodes the records whose shape it fully understands and flags every
other one ``native = false``: those records -- control messages, quarantines, rare layouts, values it cannot render
exactly -- go through the format's Python decoder, which stays the one reference for every corner case. So each
record is decoded by exactly one path, and both paths give the same row for a record both could decode
(``tests/test_native_decoding.py`` holds them to that). The flag, the fallback and the two-pass write serve
``from_avro`` as well (``debezium_avro_native``).

What Spark's JSON reader does that the Python decoders do not, and the guards that keep such records off the native
path:
  - a number token in a string field is read through a double and printed as Java prints it (``1.10`` -> ``1.1``,
    ``1e5`` -> ``100000.0``, ``12345678901234567890.123456789`` -> ``1.2345678901234567E19``); integers of any length
    are kept exactly. :func:`plain_numbers` passes only number tokens that Java prints back as written (a decoder may
    run it only where a value could hold such a token: ``debezium_native._tokens_read_as_written``);
  - text after the JSON object is ignored (Python reads it as not JSON: :func:`one_object`); ``\\ud800`` or
    ``\\udc00`` (a lone surrogate) becomes "?"; ``NaN``/``Infinity`` are numbers; an escaped control character inside
    a nested object is re-escaped in upper case. :func:`plain_escapes` sends such records to Python;
  - single-quoted strings are JSON to Jackson: turned off (``JSON_OPTIONS``), so they are unreadable on both paths.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.archive import in_offset_ranges
from cdcreplay.formats.common import (
    COORDINATES,
    DECODED_COLUMNS,
    KIND_CHANGE,
    KIND_CONTROL,
    RECORD_KINDS,
    write_by_kind,
)
from cdcreplay.run_spec import OffsetRange
from cdcreplay.spark import no_methods_too_long_to_compile, vectorized_parquet_reads

# Records the native path did not decode carry this flag false; the caller hands them to the Python decoder.
NATIVE_FLAG = "native"
CORRUPT_FIELD = "_corrupt"
JSON_OPTIONS = {"allowSingleQuotes": "false", "columnNameOfCorruptRecord": CORRUPT_FIELD, "mode": "PERMISSIVE"}

# A number token (after ':', ',' or '[') that Java's Double.toString may not print back as written: an exponent, a
# fraction of more than one digit ending in 0, 16 or more digits, 8 or more integer digits with a fraction (Java
# switches to E notation at 10^7), a value below 10^-2 (E notation below 10^-3); NaN and Infinity; -0 (read as 0).
# Between 10^-2 and 10^-1 every shorter token prints as written: checked on JDK 17.0.15 for all tokens of up to six
# digits after "0.0" and 30M random ones of up to thirteen (JDK 19 and later print the shortest form, which is the
# token). Such values (a weight of 0.08) once sent their records to Python (docs/benchmarks.md, sixtieth session).
RISKY_TOKEN = r"(-0(?![.0-9])|-?(NaN|Infinity|[0-9.]*[eE]|[0-9]*\.[0-9]*[0-9]0(?![0-9])|[0-9]{8,}\.|0\.00|[0-9.]{17}))"
_RISKY_NUMBER = r"[:,\[]\s*" + RISKY_TOKEN
# What the reader makes of a number token where a string is read: a double's rendering (always with a point or an
# exponent, or NaN/Infinity), or nested JSON it rewrote. A string value that reads like this may have come from a
# number token the reader rewrote; a value that does not cannot have.
RENDERED_NUMBER = r"^(-?[0-9].*[.E]|NaN$|-?Infinity$|[\[{])"
# A surrogate escape (a lone one, high or low, is "?" to Spark; a pair is refused too) or an escaped control character
# (re-escaped differently in nested objects).
RISKY_ESCAPE = r"\\u[dD][89a-fA-F]|\\u00[01]"


def sampled(records: DataFrame, every: int) -> DataFrame:
    """About one record in ``every``, chosen by a hash of the offset (so that no offset pattern -- a transactional
    topic's commit markers -- hides a table): the input of a native path's schema pass. A large input repeats each
    table version's schema in thousands of records, so a sample finds them at a fraction of the cost; a rare version
    the sample misses costs speed, never correctness (its records are decoded in Python)."""
    return records.where(F.pmod(F.xxhash64("offset"), F.lit(every)) == 0) if every > 1 else records


# The schema pass samples an input larger than this many records down to about this many (``sampled``).
SCHEMA_SAMPLE = 100_000


def sample_rate(record_count: int | None) -> int:
    """``every`` of :func:`sampled` for a run of ``record_count`` records (None: unknown, no sampling)."""
    return max(1, (record_count or 0) // SCHEMA_SAMPLE)


def text_of(binary: Column) -> Column:
    """The record's bytes as text, or NULL when they are not valid UTF-8 (Python quarantines those: ``not_utf8``)."""
    return F.when(F.is_valid_utf8(binary.cast("string")), binary.cast("string"))


# Between strings checked together for UTF-8 (``all_utf8``): ASCII, so no invalid tail joins a valid head.
UTF8_SEPARATOR = "\u0001"


def all_utf8(*texts: Column) -> Column:
    """Every one of ``texts`` (strings, or arrays of strings) is valid UTF-8 or NULL. Avro strings reach Spark as
    raw bytes, unchecked; fastavro refuses a record that holds one that is not UTF-8, so a native Avro path takes
    none."""
    return F.coalesce(F.is_valid_utf8(F.concat_ws(UTF8_SEPARATOR, *texts)), F.lit(True))


def raw_boolean_text(byte: Column) -> Column:
    """An Avro boolean read as its byte (``avro_wire.booleans_as_bytes``) as the Python decoder writes it: fastavro
    reads 0 as false and any other byte as true."""
    return F.when(byte == F.lit(bytearray(b"\x00")), F.lit("false")).otherwise(F.lit("true"))


def plain_numbers(text: Column) -> Column:
    """True when every number token of ``text`` reads back from a double as written (so a string field holds the
    token's own text); conservative: a string that looks like such a token also says false."""
    return ~text.rlike(_RISKY_NUMBER)


def plain_member_numbers(text: Column) -> Column:
    """:func:`plain_numbers` for a text that holds no array: there every number token is a member's value, right
    after its name's closing quote and colon, so a time of day inside a string value ("06:40:05.690") is not taken
    for one."""
    return ~text.rlike(r'"\s*:\s*' + RISKY_TOKEN)


def reads_like_rendered_number(value: Column) -> Column:
    """A string value that may be a number token the reader rewrote, or nested JSON (false for NULL)."""
    return F.coalesce(value.rlike(RENDERED_NUMBER), F.lit(False))


def plain_escapes(text: Column) -> Column:
    """``text`` holds no escape Spark's JSON reader renders differently from the Python decoders (see module doc)."""
    # Most texts hold no \u escape at all: a substring search spares them the regular expression. (`contains`, not
    # `instr`: Spark's instr calls a byte-array compare at every position, several times slower on a text without it.)
    return ~text.contains("\\u") | ~text.rlike(RISKY_ESCAPE)


def parse(text: Column, ddl: str) -> Column:
    """``from_json`` with the options every native decoder uses; the struct has ``_corrupt`` set when the text is
    not a JSON object of that shape (a field of another JSON type included)."""
    return F.from_json(text, f"{ddl}, {CORRUPT_FIELD} string", JSON_OPTIONS)


def occurrences(text: Column, character: str) -> Column:
    """How often ``character`` occurs in ``text``. (A split at one escaped character is Java's fast path, without a
    regular expression: about ten times cheaper than counting by a substring replace.)"""
    return F.size(F.split(text, "\\" + character)) - 1


def containers_accounted_for(text: Column, objects: Column, arrays: Column) -> Column:
    """``text`` is one JSON object holding exactly ``objects`` objects (itself included) and ``arrays`` arrays: the
    ones its envelope accounts for. So no value holds nested JSON (the two readers render it differently), and
    nothing follows the closing brace. Conservative: a brace or bracket inside a string value counts too (a caller
    counts again without them: ``with_shape_verdict``)."""
    return (
        text.startswith("{")
        & text.endswith("}")
        & (occurrences(text, "{") == objects)
        & (occurrences(text, "}") == objects)
        & (occurrences(text, "[") == arrays)
        & (occurrences(text, "]") == arrays)
    )


def outside_strings(text: Column) -> Column:
    """``text`` with every string's content taken out (``"a{b"`` -> ``""``), for counting the containers and members
    of a text whose string values hold braces, brackets or ``":`` (JSON kept in a text column). Escapes go first, so
    every quote left delimits a string; in a JSON object the quotes then pair up as its strings do, and what follows
    the object's closing brace keeps any brace it has. Two passes of simple patterns (a character class repeated, no
    alternation inside a repetition: Java's matcher would recurse per character and overflow on a long value)."""
    return F.regexp_replace(F.regexp_replace(text, r"\\.", ""), '"[^"]*"', '""')


# The column ``with_shape_verdict`` adds, and the two it computes it from (dropped again).
SHAPED, _RAW_SHAPED, _STRIPPED = "_shaped", "_raw_shaped", "_stripped"


def with_shape_verdict(frame: DataFrame, shape_checks, text: Column) -> DataFrame:
    """``frame`` with a boolean ``_shaped`` column: ``shape_checks(text)`` (counts of containers and members over the
    raw text), and for a text that fails them the same counts over the text without its strings' contents
    (``outside_strings``). So a string value holding JSON text (a MySQL json column) is decoded natively, while nested
    JSON and number tokens outside strings still send the record to Python. The stripped text is computed once, in a
    projection of its own, and only for the records the raw counts refuse: as one expression, Spark would strip the
    text again for each count that reads it."""
    raw = frame.select("*", shape_checks(text).alias(_RAW_SHAPED))
    stripped = raw.select("*", F.when(~F.col(_RAW_SHAPED), outside_strings(text)).alias(_STRIPPED))
    verdict = F.col(_RAW_SHAPED) | shape_checks(F.col(_STRIPPED))
    return stripped.select(*[F.col(name) for name in frame.columns], verdict.alias(SHAPED))


def one_object(text: Column) -> Column:
    """The text ends with its object's closing brace and opens as many braces as it closes: Spark ignores what
    follows a complete object, Python does not. A heuristic for the common case (a stray closing brace, a member
    after the payload): braces inside strings can hide a trailing text that balances them."""
    return text.endswith("}") & (occurrences(text, "{") == occurrences(text, "}"))


def per_plan(plan_index: Column, values: list[Column], otherwise: Column | None = None) -> Column:
    """CASE plan_index WHEN i THEN values[i] ELSE otherwise END: a native decoder's per-table (or per-schema) plans
    under one generated projection, each branch holding only its own table's columns."""
    out = None
    for index, value in enumerate(values):
        out = F.when(plan_index == index, value) if out is None else out.when(plan_index == index, value)
    if out is None:
        return otherwise if otherwise is not None else F.lit(None)
    return out if otherwise is None else out.otherwise(otherwise)


def literal_map(mapping: dict[str, str]) -> Column:
    """A map<string,string> literal in the dict's order (an empty dict gives an empty typed map)."""
    if not mapping:
        return F.create_map().cast("map<string,string>")
    return F.map_from_arrays(
        F.array(*[F.lit(k) for k in mapping]), F.array(*[F.lit(v) for v in mapping.values()])
    ).cast("map<string,string>")


def changelog_row(format_id: str, **columns: Column) -> dict[str, Column]:
    """A native decoder's row by column name (the ``native`` flag, then ``DECODED_COLUMNS``): ``columns``, the row's
    own values, and what every natively decoded row change shares -- the record's coordinates and timestamp, the
    format, kind changelog, and no control kind, reason or raw bytes (a change keeps its raw record only when
    quarantined); no detail unless ``columns`` gives one (Debezium's key-change headers)."""
    shared = {name: F.col(name) for name in ("topic", "partition", "offset", "timestamp")}
    shared |= {
        "format": F.lit(format_id),
        "record_kind": F.lit(KIND_CHANGE),
        "control_kind": F.lit(None).cast("string"),
        "reason": F.lit(None).cast("string"),
        "detail": F.lit(None).cast("string"),
        "raw_key": F.lit(None).cast("binary"),
        "raw_value": F.lit(None).cast("binary"),
    }
    row = shared | columns
    return {name: row[name] for name in (NATIVE_FLAG, *DECODED_COLUMNS)}


def key_text_of(values: list[Column]) -> Column:
    """The key as ``routing.key_text`` writes it (a JSON array of texts) from its values, NULL when one is absent or
    null."""
    present = F.lit(True)
    for value in values:
        present = present & value.isNotNull()
    return F.when(present, F.to_json(F.array(*values)))


# The key of a map entry being built where there is none: removed before the map is made (``map_of_entries``). A
# native path makes no plan for a table with a column name that holds it.
NO_ENTRY_KEY = "\u0000"


def map_of_entries(entries: list[tuple[Column, Column, Column]]) -> Column:
    """The map<string,string> of the (key, value) of each (condition, key, value) of ``entries`` whose condition
    holds. The others become an entry of NO_ENTRY_KEY that ``array_remove`` takes out: ``array_compact`` would drop
    NULL entries, but it is a lambda, which Spark evaluates interpreted, and with it every expression below it (a
    value's whole conversion)."""
    if not entries:
        return literal_map({})
    no_entry = F.struct(F.lit(NO_ENTRY_KEY).alias("key"), F.lit(None).cast("string").alias("value"))
    structs = [
        F.when(condition, F.struct(key.alias("key"), value.alias("value"))).otherwise(no_entry)
        for condition, key, value in entries
    ]
    return F.map_from_entries(F.array_remove(F.array(*structs), no_entry))


TOMBSTONE, TOMBSTONE_DETAIL = "_tombstone", "_tombstone_detail"
# What a native pass carries from each record to the rows it decodes: the record's coordinates and timestamp, and
# its tombstone columns (``tombstone_columns``).
CARRIED = ("topic", "partition", "offset", "timestamp", TOMBSTONE, TOMBSTONE_DETAIL)


def tombstone_columns() -> list[Column]:
    """Whether a raw record is a Kafka tombstone, and its detail, read early from the record's own ``key`` and
    ``value`` (so that no later projection carries the raw bytes): see :func:`with_tombstones`."""
    tombstone = F.col("value").isNull() | (F.octet_length("value") == 0)
    detail = F.when(tombstone & (F.octet_length("key") > 0), F.base64("key"))
    return [tombstone.alias(TOMBSTONE), detail.alias(TOMBSTONE_DETAIL)]


def with_tombstones(columns: dict[str, Column]) -> list[Column]:
    """``columns`` (a native decoder's row, by name) for every record but a Kafka tombstone, which becomes the control
    row every Python decoder writes for it (``python_rows.safe_decode``): a null or empty value follows a delete so
    that log compaction can drop the key, and has nothing to apply. Its detail is the key in base64. The input holds
    the columns of :func:`tombstone_columns`."""
    tombstone = F.col(TOMBSTONE)
    instead = {
        NATIVE_FLAG: F.lit(True),
        "record_kind": F.lit(KIND_CONTROL),
        "control_kind": F.lit(S.CONTROL_TOMBSTONE),
        "detail": F.col(TOMBSTONE_DETAIL),
        "column_types": literal_map({}),
        "row_index": F.lit(0),
    }
    kept = ("topic", "partition", "offset", "timestamp", "format")
    return [
        F.when(tombstone, instead[name]).otherwise(column).alias(name)
        if name in instead
        else column.alias(name)
        if name in kept
        else F.when(~tombstone, column).alias(name)
        for name, column in columns.items()
    ]


def flagged_records(native: DataFrame, records: DataFrame) -> DataFrame:
    """The records the native path did not decode, found again in ``records`` by their Kafka coordinates.

    A native row carries no raw bytes: carrying every record's value (about 2.5 KB in Debezium JSON) through the
    native projection, for the few records it leaves to Python, cost a quarter of the pass."""
    return records.join(native.where(~F.col(NATIVE_FLAG)).select(*COORDINATES), list(COORDINATES), "left_semi")


def with_python_fallback(native: DataFrame, records: DataFrame, python_decode) -> DataFrame:
    """The natively decoded rows of ``records``, and the Python decoder's rows for every record the native path
    flagged. Both branches start from the same parse, which Spark computes once per branch."""
    decoded = native.where(F.col(NATIVE_FLAG)).select(*DECODED_COLUMNS)
    return decoded.unionByName(python_decode(flagged_records(native, records)))


# `reader: auto` decodes natively from this many records on. Below it the native path's fixed cost outweighs what it
# saves: a pass to find the table versions, generating and compiling its large projection (the JVM's optimizing
# compiler then takes a core from the tasks for tens of seconds), a second pass for the records left to Python.
# Measured in fresh JVMs on 2 cores (docs/benchmarks.md, 2026-11-26): Python faster by 5-6 s at 344,222 Debezium
# and 218,483 Canal records, native faster by ~50 s and ~20 s at 2.3M and 1.46M; both cross near 500,000.
NATIVE_MIN_RECORDS = 500_000


def reader_chooses_native(pipeline, record_count: int | None, min_records: int = NATIVE_MIN_RECORDS) -> bool:
    """``options.reader``: ``spark`` always decodes natively (the Python decoder takes what the native path flags),
    ``python`` never, ``auto`` (the default) for a run of at least ``min_records`` records (an unknown count reads in
    Python)."""
    reader = pipeline.options.get("reader", "auto")
    if reader == "auto":
        return record_count is not None and record_count >= min_records
    return reader == "spark"


def decode_by_reader(records: DataFrame, pipeline, reads_natively, decode_natively, decode_in_python) -> DataFrame:
    """A format's ``decode``: natively where its native path vouches for a record and in Python the rest when
    ``reads_natively`` says so (``auto`` needs a run's record count, which a bare call does not have), else in
    Python."""
    native = decode_natively(records, pipeline) if reads_natively(pipeline) else None
    if native is None:
        return decode_in_python(records, pipeline)
    return with_python_fallback(native, records, lambda rest: decode_in_python(rest, pipeline))


PENDING = "pending_python"  # record kind of a flagged record between the two passes of write_decoded


def write_decoded(native: DataFrame, records: DataFrame, python_decode, path: str, keep=None) -> None:
    """Decode ``records`` into ``path`` (Parquet partitioned by record_kind) parsing each record once: the native
    rows, with the coordinates of the records the native path flagged, are written in one pass; those records are
    then found again in ``records``, decoded in Python and appended. ``keep``: a filter of the decoded rows (the run's
    tables)."""
    flagged = ~F.col(NATIVE_FLAG)
    pending_kind = F.when(flagged, F.lit(PENDING)).otherwise(F.col("record_kind"))
    first = native.select(*[pending_kind.alias(c) if c == "record_kind" else F.col(c) for c in DECODED_COLUMNS])
    if keep is not None:
        first = first.where(flagged | keep)
    spark = native.sparkSession
    # No Python reads the archive in this pass; and the pass's projection, large, is generated in methods the JIT
    # compiles.
    with vectorized_parquet_reads(spark), no_methods_too_long_to_compile(spark):
        write_by_kind(first, path, "overwrite", folders=len(RECORD_KINDS) + 1)  # and PENDING
    pending_path = f"{path}/record_kind={PENDING}"
    if not _exists(spark, pending_path):
        return
    pending = spark.read.parquet(pending_path).select(*COORDINATES)
    near = around(pending.limit(FEW_PENDING + 1).collect())
    candidates = records if near is None else records.where(near)
    second = python_decode(candidates.join(pending, list(COORDINATES), "left_semi"))
    if keep is not None:
        second = second.where(keep)
    write_by_kind(second, path, "append")
    _remove(spark, pending_path)


# Up to this many flagged records, the second pass reads only the parts of the archive around them (``around``).
FEW_PENDING = 10_000
# At most this many offset ranges in the filter: a range per flagged record while they are few, else neighbours merged.
MAX_RANGES = 64


def around(pending: list) -> Column | None:
    """A filter that holds for every record of ``pending`` (rows of Kafka coordinates) and for as few others as
    ``MAX_RANGES`` offset ranges allow, or None when they are more than ``FEW_PENDING``.

    A native pass leaves few records to Python, and finding them again read the whole archive (54 records pending
    in the 2M-event Debezium benchmark: 5.8 s of its decode stage, 3.7 s with this filter; docs/benchmarks.md,
    sixtieth session). Spark hands the ranges to the Parquet reader (``archive.in_offset_ranges``), which skips every
    row group (and, in files written with page indexes, every page) whose topic and offsets lie outside them. The
    join on the coordinates that follows still decides which records are pending: the filter only narrows its
    input."""
    if not pending or len(pending) > FEW_PENDING:
        return None
    offsets: dict[tuple[str, int], list[int]] = {}
    for row in pending:
        offsets.setdefault((row.topic, row.partition), []).append(row.offset)
    ranges = offset_ranges({where: sorted(set(found)) for where, found in offsets.items()}, MAX_RANGES)
    return in_offset_ranges(OffsetRange(topic, partition, low, high + 1) for (topic, partition), low, high in ranges)


def offset_ranges(offsets: dict[tuple, list[int]], most: int) -> list[tuple[tuple, int, int]]:
    """(partition, first, last) ranges covering each partition's sorted, distinct ``offsets``: consecutive offsets
    share a range; while there are more than ``most`` ranges, the two with the smallest gap between them (in one
    partition) become one. Every partition keeps at least one range."""
    gaps = sorted(
        (found[i + 1] - found[i], where, i) for where, found in offsets.items() for i in range(len(found) - 1)
    )
    ranges = sum(len(found) for found in offsets.values())
    joined = set()
    for gap, where, i in gaps:
        if gap > 1 and ranges <= most:
            break
        joined.add((where, i))
        ranges -= 1
    out = []
    for where, found in offsets.items():
        low = found[0]
        for i, offset in enumerate(found):
            if (where, i) not in joined:  # the range ends here
                out.append((where, low, offset))
                if i + 1 < len(found):
                    low = found[i + 1]
    return out


def _exists(spark, path: str) -> bool:
    jvm_path = spark._jvm.org.apache.hadoop.fs.Path(path)
    return jvm_path.getFileSystem(spark._jsc.hadoopConfiguration()).exists(jvm_path)


def _remove(spark, path: str) -> None:
    jvm_path = spark._jvm.org.apache.hadoop.fs.Path(path)
    jvm_path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(jvm_path, True)
