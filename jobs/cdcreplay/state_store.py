"""The compacted state on disk: one Parquet folder, or the files of an earlier state plus the deltas of the runs since.

A nightly run changes few keys of a large state, yet rewriting the state costs what the whole state costs, whatever
the night brought. So an incremental run may write only the new rows of the keys it changed -- a *delta* -- next to
the files of the state it built on (hard links into the new version's folder: nothing is copied, and the files stay
when the older version is removed). ``versions/<version>/state/`` is then either

    table_hash=<h>/part-*.parquet     a whole state (a full rebuild, a run past the limits below, or older releases)

or

    _LAYERS.json                      the layers, oldest first, with their row counts (written last)
    base/table_hash=<h>/...           a whole state, linked from the version it was written in
    delta-001/table_hash=<h>/...      the changed keys' rows of each run since, linked too; the newest is this run's

Reading the state resolves the layers: a key's row is its row in the newest layer that has the key. That is the
row a whole rewrite would have written: a delta row is the compaction of the key's stored row (read through the same
resolution) with the run's changes, so it is the key's latest row as of that run and no older layer's row of the key
can still win (compaction is a max over the events' total order). Tombstones are rows like any other, so a deleted key
stays deleted in every layer above its delete.

Limits: a run writes the state whole instead when it would make more than :data:`MAX_DELTAS` deltas, or the deltas
would hold more than :data:`MAX_DELTA_SHARE` of the base's rows or more keys than one broadcast join carries
(:data:`cdcreplay.compaction.CARRY_OVER_MAX_CHANGES`): reading would then cost more than the rewrite saves. A run that
truncates a table, or a pipeline that purges tombstones (``tombstone_retention_days``: the purge needs every row), also
writes it whole.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from functools import reduce
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdcreplay import warehouse
from cdcreplay.compaction import CARRY_OVER_MAX_CHANGES

# The state is partitioned by a hash of the table id, not by the id itself: a table id comes from the data and may be
# longer than a file name can be (MySQL allows 64 + 64 characters, 3 bytes each in UTF-8). table_id stays a column.
STATE_PARTITION = "table_hash"
LAYERS_FILE = "_LAYERS.json"
# The state's patterns (cdcreplay.tables.state_patterns): what the type stage needs of the whole state, kept so that a
# night can update them from the rows it changed instead of aggregating the whole state again.
PATTERNS_FILE = "_PATTERNS.json"
BASE_LAYER = "base"
MAX_DELTAS = 10
MAX_DELTA_SHARE = 0.5


@dataclass(frozen=True)
class Layer:
    folder: str  # under the state folder
    rows: int  # state rows (live and tombstones) it holds


def write_state(state: DataFrame, path: Path) -> None:
    """Write ``state`` whole: the flat layout."""
    state.withColumn(STATE_PARTITION, F.xxhash64("table_id")).write.mode("overwrite").partitionBy(
        STATE_PARTITION
    ).parquet(str(path))


def read_state(spark: SparkSession, path: Path | str, keep_partition: bool = False) -> DataFrame:
    """A published state, whole or layered (also one written when it was partitioned by table_id itself), without
    the partition column unless ``keep_partition`` (for :func:`table_state`)."""
    layers = _layers_file(Path(path))
    if layers is None:
        state = spark.read.parquet(str(path))
    else:
        state = _resolved(spark.read.parquet(str(Path(path) / layer.folder)) for layer in layers)
    return state.drop(STATE_PARTITION) if STATE_PARTITION in state.columns and not keep_partition else state


def _resolved(layers) -> DataFrame:
    """Each key's row from the newest layer that has it (``layers`` oldest first).

    Every layer but the newest is joined against the keys of the layers above it. Those are the deltas' keys, at most
    CARRY_OVER_MAX_CHANGES of them, so the joins are broadcast and the base is read once, in its own order, with no
    shuffle. A filter on the partition column (``table_state``) reaches each layer's scan.
    """
    layers = list(layers)
    # The partition column joins too (where every layer has it), so a filter on it reaches the keys' scans as well.
    on = ["table_id", "key"] + ([STATE_PARTITION] if all(STATE_PARTITION in x.columns for x in layers) else [])
    parts, newer_keys = [], None
    for layer in reversed(layers):
        if newer_keys is None:
            parts.append(layer)
        else:
            parts.append(layer.join(F.broadcast(newer_keys), on, "left_anti").select(*layer.columns))
        keys = layer.select(*on)
        newer_keys = keys if newer_keys is None else newer_keys.unionByName(keys)
    return reduce(DataFrame.unionByName, reversed(parts))


def table_state(state: DataFrame, table_id: str) -> DataFrame:
    """The rows of one table, reading only its partition when ``state`` still has the partition column.

    The type stage writes each table on its own; without the partition filter each write would scan the whole
    state, so a database of hundreds of tables would read the state hundreds of times.
    """
    rows = state.where(F.col("table_id") == table_id)
    if STATE_PARTITION not in state.columns:
        return rows
    return rows.where(F.col(STATE_PARTITION) == F.xxhash64(F.lit(table_id))).drop(STATE_PARTITION)


def state_layers(spark: SparkSession, path: Path) -> list[Layer]:
    """The layers of the state at ``path``, oldest first; a whole state is one base layer (its rows counted)."""
    layers = _layers_file(path)
    return layers if layers is not None else [Layer(BASE_LAYER, _row_count(spark, path))]


def delta_fits(layers: list[Layer], new_rows: int) -> bool:
    """Whether one more delta of at most ``new_rows`` rows stays within the limits (see the module docstring)."""
    base, deltas = layers[0], layers[1:]
    delta_rows = sum(layer.rows for layer in deltas) + new_rows
    return (
        len(deltas) < MAX_DELTAS and delta_rows <= base.rows * MAX_DELTA_SHARE and delta_rows <= CARRY_OVER_MAX_CHANGES
    )


def write_delta(
    spark: SparkSession, delta: DataFrame, previous: Path, previous_layers: list[Layer], path: Path
) -> list[Layer]:
    """Write the state at ``path`` as the layers of the state at ``previous`` (linked) plus ``delta``; its layers.

    A whole previous state becomes the base layer. ``_LAYERS.json`` is written last: a run killed before it leaves a
    folder no reader is pointed at (the publish that would point at it never happened).
    """
    path.mkdir(parents=True, exist_ok=True)
    if _layers_file(previous) is None:
        warehouse.link_folder(previous, path / BASE_LAYER)
        (path / BASE_LAYER / PATTERNS_FILE).unlink(missing_ok=True)  # the patterns are of the whole state, not a layer
    else:
        for layer in previous_layers:
            warehouse.link_folder(previous / layer.folder, path / layer.folder)
    folder = f"delta-{len(previous_layers):03d}"
    write_state(delta, path / folder)
    rows = _row_count(spark, path / folder)
    layers = [*previous_layers, Layer(folder, rows)] if rows else list(previous_layers)
    if not rows:  # no key changed (the run had only control records): nothing to resolve
        shutil.rmtree(path / folder)
    warehouse.write_json_atomically(path / LAYERS_FILE, {"layers": [asdict(layer) for layer in layers]})
    return layers


def save_patterns(patterns: DataFrame, path: Path) -> DataFrame:
    """Compute the patterns of the state at ``path`` (a small aggregation, or a frame made by
    :func:`cdcreplay.tables.changed_patterns`) once, and keep them there; them, as a frame of local rows."""
    document = local_rows(patterns)
    warehouse.write_json_atomically(path / PATTERNS_FILE, document)
    return _frame(patterns.sparkSession, document)


def read_patterns(spark: SparkSession, path: Path) -> DataFrame | None:
    """The patterns kept with the state at ``path``; None for a state written without (by an earlier release)."""
    try:
        document = json.loads((path / PATTERNS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return _frame(spark, document)


def local_patterns(patterns: DataFrame) -> DataFrame:
    """``patterns`` computed now, as a frame of local rows (the rows they come from may not outlive the call)."""
    return patterns.sparkSession.createDataFrame(patterns.collect(), patterns.schema)


def local_rows(df: DataFrame) -> dict:
    """A small frame's rows as JSON text, with its schema: Spark writes and reads the text, so every value (a
    decimal position, a nested struct) comes back as it was."""
    rows = df.select(F.to_json(F.struct("*")).alias("row")).collect()
    return {"schema": df.schema.json(), "rows": [r.row for r in rows]}


def _frame(spark: SparkSession, document: dict) -> DataFrame:
    schema = StructType.fromJson(json.loads(document["schema"]))
    text = spark.createDataFrame([(row,) for row in document["rows"]], "row string")
    return text.select(F.from_json("row", schema).alias("r")).select("r.*")


def _layers_file(path: Path) -> list[Layer] | None:
    try:
        document = json.loads((path / LAYERS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return [Layer(**layer) for layer in document["layers"]]


def _row_count(spark: SparkSession, path: Path) -> int:
    """Rows of a whole state folder (from the Parquet footers); 0 when no data file was written."""
    if not any(path.rglob("*.parquet")):
        return 0
    return spark.read.parquet(str(path)).count()
