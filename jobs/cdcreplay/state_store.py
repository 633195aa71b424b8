"""The compacted state: one Delta table per pipeline, and the one policy that writes it -- merge or rewrite.

A nightly run changes few keys of a large state, yet rewriting the state costs what the whole state costs, whatever
the night brought. So an incremental run merges only the new rows of the keys it changed into the state: one commit
deletes their stored rows (deletion vectors mark them; the rest of the files stay as they are) and appends the new
rows (``delta_tables.replace_rows``: cheaper than an upsert MERGE). Each such row is the compaction of the
key's stored row with the run's changes (``compaction.changed_rows``), so it is the key's latest row as of the run:
the merged state is the one a whole rewrite gives. Tombstones are rows like any other, so a deleted key stays deleted.

A run rewrites the state whole (one overwrite commit) instead when it:
  - has no state to build on (the first run, ``--full-rebuild``);
  - truncates a table (every key of the table changes) or purges tombstones (``tombstone_retention_days``: the purge
    needs every row);
  - changes more keys than one broadcast join carries (:data:`cdcreplay.compaction.CARRY_OVER_MAX_CHANGES`) or more
    than :data:`MAX_MERGE_SHARE` of the state's rows: then the rewrite costs less than finding the keys.
A merge leaves the replaced rows in their files, marked deleted; once the nights before marked more than
:data:`cdcreplay.delta_tables.MAX_MARKED_SHARE` of the state's rows, the run writes the same merged rows by one
whole write of the state instead (``delta_tables.rewrite_replacing``), which drops the marked rows and the nights'
small files.

Either is one new version of the state table; the run's pointer (``warehouse.publish``) names it, and the previous
published version stays readable for the reconciliation and for ``keep_versions``. A run that dies after committing
and before publishing is rolled back to the published version by the next (``publishing.roll_back_unpublished``).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdcreplay import delta_tables, warehouse
from cdcreplay.compaction import (
    CARRY_OVER_MAX_CHANGES,
    changed_rows,
    merge_with_state,
    purge_tombstones,
    truncated_tables,
)
from cdcreplay.storage import Location
from cdcreplay.tables import changed_patterns, state_patterns

# The state is partitioned by a hash of the table id, not by the id itself: a table id comes from the data and may be
# longer than a file name can be (MySQL allows 64 + 64 characters, 3 bytes each in UTF-8). table_id stays a column.
STATE_PARTITION = "table_hash"
# A state row is one key of one table. The merge matches on the partition column too, which lets Spark prune the
# partitions of tables the night did not change where it can (not measured: the benchmark's state is one table).
STATE_KEY = (STATE_PARTITION, "table_id", "key")
MAX_MERGE_SHARE = 0.5


@dataclass(frozen=True)
class StateCommit:
    version: int  # the state table's version this run committed
    merged: bool  # the changed keys' rows were merged (False: the state was compacted and written whole)
    patterns: DataFrame | None  # the new state's patterns, from the previous ones and the merged rows; None: unknown
    # A merge's rows, the new rows of the keys the run changed: kept (persisted) for the type stage, which merges the
    # same keys into the typed tables; the caller unpersists them (release_merged_rows). None when written whole.
    merged_rows: DataFrame | None = None
    # A merge written as one whole write of the state (the merged rows, without the rows marked deleted before)
    rewritten: bool = False

    def release_merged_rows(self) -> None:
        if self.merged_rows is not None:
            self.merged_rows.unpersist()


def with_partition(state: DataFrame) -> DataFrame:
    return state.withColumn(STATE_PARTITION, F.xxhash64("table_id"))


def write_state(state: DataFrame, path: Location | str) -> int:
    """Write ``state`` (changelog columns + deleted) as the whole state table; its new version."""
    return delta_tables.write_whole(
        with_partition(state), str(path), partition_by=(STATE_PARTITION,), deletion_vectors=True
    )


def read_state(spark: SparkSession, path: Location | str, version: int | None = None, keep_partition: bool = False):
    """The state as of ``version`` (the newest when None), without the partition column unless ``keep_partition``
    (for :func:`table_state`)."""
    state = delta_tables.read_version(spark, str(path), version)
    return state if keep_partition else state.drop(STATE_PARTITION)


def state_ref(path: Location | str, version: int, patterns_file: Location | str | None) -> dict:
    """One version of a state, as a run summary names it for the reconciliation: its table, version and patterns."""
    return {"path": str(path), "version": version, "patterns": str(patterns_file) if patterns_file else None}


def read_state_ref(spark: SparkSession, ref: dict) -> DataFrame:
    return read_state(spark, ref["path"], ref["version"])


def read_patterns_ref(spark: SparkSession, ref: dict) -> DataFrame | None:
    return read_patterns(spark, Location(ref["patterns"])) if ref.get("patterns") else None


def table_state(state: DataFrame, table_id: str) -> DataFrame:
    """The rows of one table, reading only its partition when ``state`` still has the partition column.

    The type stage writes each table on its own; without the partition filter each write would scan the whole
    state, so a database of hundreds of tables would read the state hundreds of times.
    """
    rows = state.where(F.col("table_id") == table_id)
    if STATE_PARTITION not in state.columns:
        return rows
    return rows.where(F.col(STATE_PARTITION) == F.xxhash64(F.lit(table_id))).drop(STATE_PARTITION)


def merge_fits(state_rows: int, change_count: int) -> bool:
    """Whether merging ``change_count`` changelog rows into a state of ``state_rows`` rows costs less than a rewrite
    (see the module docstring)."""
    return change_count <= CARRY_OVER_MAX_CHANGES and change_count <= state_rows * MAX_MERGE_SHARE


def commit_state(
    path: Location,
    base_state: DataFrame | None,
    base_patterns: DataFrame | None,
    changes: DataFrame,
    change_count: int,
    tombstone_retention_days: int | None,
    base_version: int | None = None,
) -> StateCommit:
    """Commit the run's new state at ``path``: ``changes`` compacted onto ``base_state`` (the published state, read
    as of its version ``base_version``: a read of the newest version would follow the commits made here; None on a
    full rebuild), merged or written whole as the module docstring says. ``base_patterns``: the published state's
    patterns (:func:`read_patterns`), from which a merge's patterns are updated."""
    # A purge of tombstones needs every row: no merge, and no count of the rows to weigh one against.
    mergeable = base_state is not None and tombstone_retention_days is None
    state_rows = _rows_of(base_state, base_patterns) if mergeable else 0
    if mergeable and merge_fits(state_rows, change_count) and not truncated_tables(changes):
        with changed_rows(base_state, changes) as change:
            rows = with_partition(change.rows).persist()  # merged, its patterns taken, then typed (StateCommit)
            try:
                rows.count()  # computed once, here: the merge, the patterns and the type stage read the cache
                broadcast = delta_tables.fits_broadcast(rows)
                worn = base_version is not None and delta_tables.worn_by_merges(path, base_version, state_rows)
                rewritten = broadcast and worn
                # The patterns read only cached rows: their small jobs run beside the replace, on the cores its
                # commit leaves idle (reading the table's log, planning, committing), not after it.
                with ThreadPoolExecutor(max_workers=1) as beside:
                    pending = beside.submit(_merged_patterns, base_patterns, change.stored, rows)
                    if rewritten:
                        version = delta_tables.rewrite_replacing(rows, str(path), STATE_KEY, (STATE_PARTITION,))
                    else:
                        version = delta_tables.replace_rows(rows, str(path), STATE_KEY, broadcast=broadcast)
                    patterns = pending.result()
            except BaseException:
                rows.unpersist()
                raise
        return StateCommit(version, merged=True, patterns=patterns, merged_rows=rows, rewritten=rewritten)
    merged = merge_with_state(base_state, changes, change_count)
    version = write_state(purge_tombstones(merged, tombstone_retention_days), path)
    return StateCommit(version, merged=False, patterns=None)


def _merged_patterns(base_patterns: DataFrame | None, stored: DataFrame, rows: DataFrame) -> DataFrame | None:
    """The patterns of the state once ``rows`` replace the ``stored`` rows of their keys, from the published state's
    ``base_patterns`` (:func:`changed_patterns`); None where they cannot be told without the whole state."""
    if base_patterns is None:
        return None
    changed = changed_patterns(base_patterns, state_patterns(stored), state_patterns(rows))
    return local_patterns(changed) if changed is not None else None


def _rows_of(state: DataFrame, patterns: DataFrame | None) -> int:
    """The state's rows, live and tombstones: from its patterns where kept, else counted."""
    if patterns is not None:
        return patterns.agg(F.sum("count")).first()[0] or 0
    return state.count()


def save_patterns(patterns: DataFrame, file: Location) -> DataFrame:
    """Compute the patterns of a state version (a small aggregation, or a frame made by
    :func:`cdcreplay.tables.changed_patterns`) once, and keep them in ``file``; them, as a frame of local rows."""
    document = local_rows(patterns)
    warehouse.write_json_atomically(file, document)
    return _frame(patterns.sparkSession, document)


def read_patterns(spark: SparkSession, file: Location) -> DataFrame | None:
    """The patterns kept in ``file``; None where none were kept."""
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
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
