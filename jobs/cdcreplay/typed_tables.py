"""The type stage: the typed latest-state tables users read, from the compacted state, and how each is written.

Per table, the cheapest write that publishes what a full rebuild would:
- kept: a table the run did not change, typed as the published version has it, keeps its Delta version (no commit);
- merged: a large table a night changed a small share of gets its changed keys' rows MERGEd (the state was merged
  too, so its other rows are the published ones); with the pipeline's `deletion_vectors` on, the rows it replaces are
  marked in deletion vectors, otherwise the files holding them are rewritten; where those would be every file, or
  the merges before marked more than ``delta_tables.MAX_MARKED_SHARE`` of its rows deleted, the table is written
  whole with the changed keys applied instead (``rewrite_flagged``);
- written whole: every other table, and a merged one whose row count shows two keys folded into one typed row;
- emptied: a table whose every key is deleted keeps its columns and no rows.
Live rows whose stored value no longer fits its column's type are held back (``type_conflicts/``) and stay in the
state: a later change of the key replaces them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame, SparkSession

from cdcreplay import delta_tables, warehouse
from cdcreplay.contracts import TYPE_CONFLICTS_FOLDER
from cdcreplay.state_store import STATE_PARTITION, StateCommit, save_patterns, table_state
from cdcreplay.storage import Location
from cdcreplay.tables import (
    PUBLISHED,
    TYPED_TABLE_FORMAT,
    TableLayout,
    layouts_of_patterns,
    state_patterns,
    type_conflicts,
    typed_changes,
    typed_table,
)

# One Spark job per table (and one for the rows held back): with many small tables the time goes to the driver's
# planning and scheduling of each job, so a few run at once (Spark runs concurrent jobs from several threads; the
# executors' cores are shared).
TYPED_WRITES_AT_ONCE = 4
# A typed table is merged with its changed keys' rows, instead of written whole, from this many rows on, when a night
# changes at most TYPED_MERGE_MAX_SHARE of them: below, a rewrite costs less than a merge's join (a small table's
# merge costs ~1.5 s of Delta's own work against ~0.4 s for its rewrite).
TYPED_MERGE_MIN_ROWS = 100_000
TYPED_MERGE_MAX_SHARE = 0.5
# Without deletion vectors a merge rewrites every file one of the night's keys is in. A typed table's rows are in the
# state's hash order, not key order, so the night's keys spread evenly over its files: with this many keys per file
# it leaves fewer than 2% of them (e^-4) untouched, and the table is written whole instead (rewrite_flagged).
REWRITE_MIN_KEYS_PER_FILE = 4


@dataclass(frozen=True)
class TypedTables:
    """What the type stage left for the audit and the publish."""

    versions: dict[str, int | None]  # per table: the Delta version to publish (None: never typed, every key deleted)
    tables: dict[str, dict]  # per table: what the pointer and the summary say of it (rows, columns, key, ...)
    retyped: dict[str, TableLayout]  # the tables this run committed, which the audit checks
    unchanged: dict[str, dict]  # the tables kept as published (their pointer entries)
    conflicts: dict[str, int]  # per table: live rows held back from it


def type_tables(
    spark: SparkSession,
    paths: warehouse.PipelinePaths,
    published: dict | None,
    committed: StateCommit,
    partitioned_state: DataFrame,
    changes_by_table: dict[str, int],
    version: str,
    run_dir: Location,
    deletion_vectors: bool = False,
) -> TypedTables:
    """Write every table of the state ``committed`` (read as ``partitioned_state``) that needs a commit; see the
    module's doc. ``published``: the pointer this run builds on (None on a full rebuild); ``changes_by_table``: this
    run's changelog rows per table; ``version``: the version this run will publish;
    ``deletion_vectors``: the pipeline's option, whether a merge marks the rows it replaces instead of rewriting
    their files."""
    state = partitioned_state.drop(STATE_PARTITION)
    # What the tables' columns and counts need of the whole state: updated from the merged rows where it can be
    # (see tables.changed_patterns), and kept with the state version for the next night.
    patterns = committed.patterns if committed.patterns is not None else state_patterns(state)
    layouts, counts = layouts_of_patterns(save_patterns(patterns, paths.patterns_file(committed.version)))
    unchanged = unchanged_tables(paths, published, layouts, changes_by_table)
    retyped = {table_id: layout for table_id, layout in layouts.items() if table_id not in unchanged}
    versions = {table_id: info["delta_version"] for table_id, info in unchanged.items()}
    merged_tables = _typed_merges(published if committed.merged else None, retyped, counts, changes_by_table)

    # The tables written whole that hold every live row of the state: none of their rows was held back.
    whole_without_conflicts: set[str] = set()

    def write_typed(table_id: str) -> None:
        rows = table_state(partitioned_state, table_id)
        path = str(paths.table_dir(table_id))
        if table_id in merged_tables:
            # The state's merge wrote the new rows of exactly the keys the night changed: typed, they are this merge's
            # rows, without reading the new state again to find them.
            changed = typed_changes(table_state(committed.merged_rows, table_id), retyped[table_id])
            on = tuple(retyped[table_id].key_columns)
            detail = delta_tables.table_detail(spark, path)  # its files and properties, read once
            delta_tables.use_deletion_vectors(spark, path, deletion_vectors, detail)
            broadcast = delta_tables.fits_broadcast(changed)  # typed from the merged rows, which are cached
            spread = not deletion_vectors and changed.count() >= REWRITE_MIN_KEYS_PER_FILE * detail["numFiles"]
            built_on = published["tables"][table_id]["delta_version"]
            worn = delta_tables.worn_by_merges(path, built_on, counts[table_id].rows)
            if broadcast and (spread or worn):
                # spread: the merge would rewrite about every file, so writing the table whole costs less than its
                # join; worn: the merges before marked too many of its rows deleted, and a whole write drops them.
                versions[table_id] = delta_tables.rewrite_flagged(changed, path, on, PUBLISHED)
            else:
                versions[table_id] = delta_tables.merge_flagged(changed, path, on, PUBLISHED, broadcast=broadcast)
        else:
            # A table a later night may merge into allows deletion vectors from its creation, when the option wants
            # them: its first merge then needs no commit of its own (use_deletion_vectors). Smaller ones stay
            # readable by every Delta reader.
            mergeable = deletion_vectors and counts[table_id].rows >= TYPED_MERGE_MIN_ROWS
            typed_rows = typed_table(rows, retyped[table_id])
            versions[table_id] = delta_tables.write_whole(typed_rows, path, deletion_vectors=mergeable)
            # typed_table leaves out exactly the live rows with a type conflict: a write of all of them left none out.
            if delta_tables.rows_written(path, versions[table_id]) == counts[table_id].rows:
                whole_without_conflicts.add(table_id)

    with ThreadPoolExecutor(max_workers=TYPED_WRITES_AT_ONCE) as pool:
        for done in [pool.submit(write_typed, table_id) for table_id in sorted(retyped)]:
            done.result()  # the first failure ends the run, as one written in sequence would
    # The rows held back are then looked for only where some may be: every value is cast again to find them, which
    # cost a 20M-event full rebuild a minute of CPU for none.
    checked = {t: layout for t, layout in retyped.items() if t not in whole_without_conflicts}
    clean = _merged_without_conflicts(published, merged_tables)
    conflicts = _write_type_conflicts(
        state, committed.merged_rows, retyped, checked, clean, run_dir / TYPE_CONFLICTS_FOLDER
    )
    conflicts.update({table_id: info.get("type_conflicts", 0) for table_id, info in unchanged.items()})
    for table_id in sorted(merged_tables):
        # A merge matches typed keys: two keys of the state that type to one value (text "01" and "1" in an int
        # column) would be one row of the table. Such a table is written whole, and its audit names the keys.
        expected = counts[table_id].rows - conflicts.get(table_id, 0)
        path = str(paths.table_dir(table_id))
        if delta_tables.row_count(spark, path, versions[table_id]) != expected:
            typed = typed_table(table_state(partitioned_state, table_id), retyped[table_id])
            versions[table_id] = delta_tables.write_whole(typed, path)
    tables: dict[str, dict] = {}
    for table_id, layout in layouts.items():
        tables[table_id] = {
            "rows": counts[table_id].rows - conflicts.get(table_id, 0),
            "tombstones": counts[table_id].tombstones,
            "type_conflicts": conflicts.get(table_id, 0),
            "key_columns": list(layout.key_columns),
            "columns": [list(c) for c in layout.columns],
            "changes_this_run": changes_by_table.get(table_id, 0),
            "typed_in_version": unchanged[table_id]["typed_in_version"] if table_id in unchanged else version,
            "typed_format": TYPED_TABLE_FORMAT,
        }
    for table_id, row in counts.items():  # tables whose every key is deleted still exist, empty
        if table_id not in tables:
            tables[table_id] = {"rows": 0, "tombstones": row.tombstones, "key_columns": [], "columns": []}
            versions[table_id] = _emptied(spark, paths, table_id)
    return TypedTables(versions, tables, retyped, unchanged, conflicts)


def unchanged_tables(
    paths: warehouse.PipelinePaths, current: dict | None, layouts: dict[str, TableLayout], changes_by_table: dict
) -> dict[str, dict]:
    """The tables a run can publish as the previous version has them: their published info, by table id.

    A table qualifies when this run applied no change to it (no row change, no truncate), so its state rows are the
    ones the previous version was typed from, and when its columns, key and typed format are the ones the previous
    version recorded (a column type declared anew, or a release that types differently, types it again). A tombstone
    the retention purges changes only the state, never the typed rows. ``current`` is None on a full rebuild.
    """
    if current is None:
        return {}
    unchanged = {}
    for table_id, layout in layouts.items():
        info = current["tables"].get(table_id)
        if not _typed_alike(info, layout) or changes_by_table.get(table_id) or not (paths.root / info["path"]).is_dir():
            continue
        unchanged[table_id] = info
    return unchanged


def _typed_alike(info: dict | None, layout: TableLayout) -> bool:
    """Whether a table published as ``info`` (the pointer's entry) was typed with ``layout``'s columns and key, by a
    release that types as this one does."""
    return (
        info is not None
        and info.get("typed_format") == TYPED_TABLE_FORMAT
        and info.get("key_columns") == list(layout.key_columns)
        and info.get("columns") == [list(column) for column in layout.columns]
    )


def _typed_merges(
    published: dict | None, retyped: dict[str, TableLayout], counts: dict, changes_by_table: dict
) -> set[str]:
    """The tables a run merges its changed keys into (see TYPED_MERGE_MIN_ROWS): published as typed before, with
    the columns, key and typed format they have now. ``published`` is None when the run wrote the state whole."""
    if published is None:
        return set()
    merged = set()
    for table_id, layout in retyped.items():
        info = published["tables"].get(table_id)
        if (
            _typed_alike(info, layout)
            and info.get("delta_version") is not None
            and counts[table_id].rows >= TYPED_MERGE_MIN_ROWS
            and changes_by_table.get(table_id, 0) <= counts[table_id].rows * TYPED_MERGE_MAX_SHARE
        ):
            merged.add(table_id)
    return merged


def _merged_without_conflicts(published: dict | None, merged_tables: set[str]) -> set[str]:
    """The merged tables whose published version held back no row: their other rows are the ones it typed
    without a conflict, under the same columns and types (``_typed_alike``), and the state's merge left them as
    they were, so only the merged rows can conflict now."""
    return {t for t in merged_tables if published["tables"][t].get("type_conflicts", 0) == 0}


def _write_type_conflicts(
    state: DataFrame,
    merged_rows: DataFrame | None,
    typed: dict[str, TableLayout],
    checked: dict[str, TableLayout],
    clean: set[str],
    folder: Location,
) -> dict[str, int]:
    """Write the live rows held back from the tables this run ``typed`` (``tables.type_conflicts``), looked for in
    the tables ``checked`` (the others held back none); their count per table. A table in ``clean``
    (``_merged_without_conflicts``) is checked in the state's ``merged_rows`` alone, the others in the whole
    ``state``: a night then reads its few changed rows, not the whole state, for this.

    They stay in the state: a later change of the key replaces them, and the next run publishes that row.
    """
    if not typed:
        return {}
    whole = {t: layout for t, layout in checked.items() if t not in clean}
    checks = [type_conflicts(state, whole)] if whole else []
    merged = {t: layout for t, layout in checked.items() if t in clean}
    if merged:
        checks.append(type_conflicts(merged_rows.drop(STATE_PARTITION), merged))
    if not checks:  # the folder all the same, empty, with the columns its readers expect
        any_table = min(typed)
        type_conflicts(state.limit(0), {any_table: typed[any_table]}).write.mode("overwrite").parquet(str(folder))
        return {}
    reduce(DataFrame.unionByName, checks).write.mode("overwrite").parquet(str(folder))
    written = state.sparkSession.read.parquet(str(folder))
    return {row.table_id: row["count"] for row in written.groupBy("table_id").count().collect()}


def _emptied(spark: SparkSession, paths: warehouse.PipelinePaths, table_id: str) -> int | None:
    """A table whose every key is now deleted: its typed table emptied (its columns kept); its version, or None when
    it was never typed."""
    path = str(paths.table_dir(table_id))
    if not delta_tables.is_delta_table(spark, path):
        return None
    stored = delta_tables.read_version(spark, path)
    if stored.isEmpty():
        return delta_tables.latest_version(path)
    return delta_tables.write_whole(stored.limit(0), path)
