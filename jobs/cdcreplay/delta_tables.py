"""The Delta Lake operations the warehouse is built of: write whole, merge, read a version, roll back, vacuum.

Every published table and the state is a Delta table, so any engine that reads Delta (Spark SQL, delta-rs and
pandas, DuckDB, Trino) reads them without this package, and a run's commits are atomic per table. A pipeline's
*published version* is a set of table versions (``_CURRENT.json``, see ``warehouse``): readers who need one run's
tables together read each as of the version recorded there, and a run that died after committing some tables is
rolled back (``roll_back_to``) before the next run builds on them.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from cdcreplay.storage import Location, delta_rs_options

log = logging.getLogger(__name__)

DELTA = "delta"
# Deletion vectors: a MERGE that changes a few rows of a large file marks them deleted instead of rewriting the file.
# Always on for the state; for the published tables a pipeline's `deletion_vectors` option decides
# (use_deletion_vectors), as they cost readers: delta-rs's Arrow reader (`DeltaTable.to_pyarrow_table()`, `to_pandas()`)
# refuses a table whose protocol allows them, with or without any in it.
DELETION_VECTORS = "delta.enableDeletionVectors"
# The writer features of the Delta tables this package writes (writer version 2, or 7 with deletion vectors,
# TIMESTAMP_NTZ columns and the two features every version-7 table lists), all of which delta-rs writes: roll_back_to
# restores such a table with delta-rs.
ROLLBACK_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "deletionVectors", "timestampNtz"})
# A merge with deletion vectors leaves the rows it replaces in their files, marked; every read still reads them and
# skips them. Night after night they pile up: a 200k-key night marks 4% more of a 5M-row table, so a year of nights
# would leave the table's files holding ~15 times its rows. A table (the state, a published table) whose marked rows
# pass this share of its live rows is written whole by its next run, which leaves none (worn_by_merges). The share
# weighs that night's whole writes (on the 5M-key benchmark ~25 s more than a merging night: state 20, table 4.5)
# against reading the marked rows (six nights of 4% each did not slow the night measurably): about one night in twelve.
MAX_MARKED_SHARE = 0.5
# A vacuum lists every file of the table (seconds, even for a small one). Its retention is at least an hour (below),
# so while the oldest kept version is younger than that it could only free files removed over an hour before it:
# those wait for the next run's vacuum, and the runs of a busy hour (backfills, reruns, tests) skip the listing.
VACUUM_MIN_AGE_S = 3600
COMMIT_FILE = re.compile(r"(\d{20})\.json")  # a commit of the Delta log, named by its version
# How a merge or a replace names the table's rows and the rows written into it, in its conditions.
STORED, CHANGED = "stored", "changed"
# The user metadata of a night's commit that wrote a table whole with its changed keys applied (rewrite_flagged), which
# the table's history otherwise shows as a plain WRITE, like a full rebuild's.
CHANGED_KEYS_WRITTEN = "cdcreplay: changed keys applied, table written whole"


def _table(spark: SparkSession, path: str):
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path)


def is_delta_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def _log(path: Location | str) -> Location:
    return Location(path) / "_delta_log"


def _commit_file(path: Location | str, version: int) -> Location:
    """The log file of the table's commit ``version`` (whether or not it exists)."""
    return _log(path) / f"{version:020d}.json"


def latest_version(path: Location | str) -> int:
    """The version of the table's newest commit: the Delta log names each commit's file by its version, so this is a
    listing of the log. (Delta's own ``history(1)`` is a Spark job that reads the commits: 0.1-0.5 s a call, and a
    small run asks after each of its writes.)"""
    log = _log(path)
    versions = [int(match[1]) for entry in log.iterdir() if (match := COMMIT_FILE.fullmatch(entry.name))]
    if not versions:
        raise FileNotFoundError(f"{path} is not a Delta table: {log} holds no commit")
    return max(versions)


def rows_written(path: Location | str, version: int) -> int | None:
    """The rows the commit ``version`` wrote, from the metrics Delta records in the commit's own log entry (for a
    whole write, the table's rows): a read of one small file, not a Spark job. None where the commit holds none
    (``spark.databricks.delta.history.metricsEnabled`` off)."""
    for line in _commit_file(path, version).read_text().splitlines():
        if line.startswith('{"commitInfo"'):
            written = json.loads(line)["commitInfo"].get("operationMetrics", {}).get("numOutputRows")
            return None if written is None else int(written)
    return None


def rows_marked_deleted(path: Location | str, version: int) -> int | None:
    """The rows of the table's version ``version`` that deletion vectors mark deleted: still in its files, read and
    skipped by every reader. From the version's checksum file (``<version>.crc`` beside the commit: the Delta
    protocol's optional Version Checksum File, which Delta writes after each commit, with ``numDeletedRecordsOpt``
    once the table allows deletion vectors): a read of one small file, not a Spark job. None where the file or the
    count is missing (a table without deletion vectors, a writer that writes no checksum)."""
    checksum = _log(path) / f"{version:020d}.crc"
    try:
        marked = json.loads(checksum.read_text()).get("numDeletedRecordsOpt")
    except FileNotFoundError:
        return None
    return None if marked is None else int(marked)


def worn_by_merges(path: Location | str, version: int, live_rows: int) -> bool:
    """Whether the table's version ``version`` holds more rows marked deleted than MAX_MARKED_SHARE of its
    ``live_rows``: its next run writes it whole instead of merging into it again (see MAX_MARKED_SHARE)."""
    marked = rows_marked_deleted(path, version)
    return marked is not None and marked > live_rows * MAX_MARKED_SHARE


def has_commits_after(path: Location | str, version: int) -> bool:
    """Whether the table has a commit after ``version``: the Delta log names each commit by its version, so this is
    one look for a file, not a read of the log."""
    return _commit_file(path, version + 1).exists()


def read_version(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """The table as of ``version`` (its newest commit when None)."""
    reader = spark.read.format(DELTA)
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def write_whole(
    rows: DataFrame,
    path: str,
    partition_by: tuple[str, ...] = (),
    deletion_vectors: bool = False,
    user_metadata: str | None = None,
) -> int:
    """Replace the table's rows (and its schema) with ``rows`` in one commit, creating it if need be; the new version.
    ``user_metadata``: what the commit's history says of it beside its operation.

    The files the old version read stay until a vacuum drops them, so a reader of an older version is not disturbed.
    """
    # The whole table, whatever partitions ``rows`` has: the session's dynamic partition overwrite is for Parquet.
    writer = rows.write.format(DELTA).mode("overwrite").option("overwriteSchema", "true")
    writer = writer.option("partitionOverwriteMode", "static")
    if deletion_vectors:
        writer = writer.option(DELETION_VECTORS, "true")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if user_metadata:
        writer = writer.option("userMetadata", user_metadata)
    writer.save(path)
    return latest_version(path)


def replace_rows(rows: DataFrame, path: str, on: tuple[str, ...], broadcast: bool = False) -> int:
    """Replace the stored rows whose ``on`` columns match a row of ``rows`` with ``rows``, and add the others, in one
    commit; the new version. ``rows`` must hold each ``on`` combination at most once.

    Delta's ``replaceOn`` overwrite (Delta 4.3+): a delete of the stored rows an EXISTS subquery over ``rows`` finds
    (marked in deletion vectors where the table has them on: one scan of the stored keys), then an append of
    ``rows``, committed together. Every row written is a new row, so no join tells an update from an insert: one
    upsert MERGE gives the same rows but joins ``rows`` with every row of the files they touch, three times (find the
    files, write the rows, mark the old ones), and a night's keys are spread over every file of a large table. On the
    5M-row state: 10.8 s for the MERGE, 4.4-4.7 s for this. It cannot delete a key without writing a row for it, so
    the typed tables, whose deleted keys lose their row, keep the MERGE (``merge_flagged``). The table's history
    records the session's dynamic partition overwrite mode beside it (``isDynamicPartitionOverwrite``): Delta applies
    only the ``replaceOn`` condition, and the rows of the other keys of a partition stay.

    ``broadcast``: ``rows`` are few and small enough for every task to hold their keys (``fits_broadcast``): each
    task looks its stored rows' keys up in them instead of shuffling the whole table's keys."""
    written = F.broadcast(rows) if broadcast else rows
    (
        written.alias(CHANGED)
        .write.format(DELTA)
        .mode("overwrite")
        .option("targetAlias", STORED)
        .option("replaceOn", _same_key(on))
        .save(path)
    )
    return latest_version(path)


# A MERGE source is broadcast up to this size in memory: the driver collects it and builds its hash table (the DAG
# gives the driver 2 GB), and every executor holds a copy.
BROADCAST_MAX_BYTES = 256 * 1024 * 1024


def fits_broadcast(rows: DataFrame) -> bool:
    """Whether ``rows`` (computed from persisted, computed rows) take at most BROADCAST_MAX_BYTES: the planner's size
    of a plan over cached rows starts from the size of the rows cached, not from a guess of what files hold. False
    when the size cannot be read (it is read through Spark's internals, which have no public API for it): the merge
    then shuffles, as it would for a large source."""
    try:
        return cached_bytes(rows) <= BROADCAST_MAX_BYTES
    except Exception:  # py4j's errors or a changed plan API: only the hint is lost
        log.warning("could not read the size of a MERGE source; merging without a broadcast hint", exc_info=True)
        return False


def cached_bytes(rows: DataFrame) -> int:
    """The size Spark's planner gives ``rows`` (over persisted, computed rows: from their size in the cache; a new
    plan, since a plan keeps the size it was first given)."""
    return int(str(rows.select("*")._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))


def merge_flagged(rows: DataFrame, path: str, on: tuple[str, ...], flag: str, broadcast: bool = False) -> int:
    """Apply ``rows`` to the table by their ``on`` columns: a row whose ``flag`` is true replaces or adds the stored
    row, one whose flag is false deletes it; one commit. The new version.

    ``broadcast``: ``rows`` are few and small enough for every task to hold them (``fits_broadcast``). MERGE joins
    them with the whole table to find the files holding the rows they replace, and again to mark those rows in
    deletion vectors; broadcast, each task looks its rows up in them instead of shuffling the whole table's keys.
    (Delta keeps the hint on the source it materializes; the join that writes the new rows keeps its shuffle.)"""
    values = {f"`{name}`": f"{CHANGED}.`{name}`" for name in rows.columns if name != flag}
    source = F.broadcast(rows) if broadcast else rows
    (
        _table(rows.sparkSession, path)
        .alias(STORED)
        .merge(source.alias(CHANGED), _same_key(on))
        .whenMatchedDelete(condition=f"NOT {CHANGED}.`{flag}`")
        .whenMatchedUpdate(set=values)
        .whenNotMatchedInsert(condition=f"{CHANGED}.`{flag}`", values=values)
        .execute()
    )
    return latest_version(path)


def rewrite_flagged(rows: DataFrame, path: str, on: tuple[str, ...], flag: str) -> int:
    """What ``merge_flagged`` does, as one write of the whole table: its rows whose ``on`` columns match no row of
    ``rows``, then the rows of ``rows`` whose ``flag`` is true; one commit. The new version. ``rows`` must fit a
    broadcast (``fits_broadcast``): every task looks its stored rows' keys up in them.

    For a table without deletion vectors: a night's keys are spread over every file of a large table, so its MERGE
    rewrites every file anyway, after a join that shuffles the whole table with the changed rows (its insert clause
    makes it a full outer join, which cannot be broadcast). This write reads each file once and shuffles nothing. On
    the 5M-row typed table and a 200k-key night, alternating in one JVM: 14.6-16.4 s against 21.0-25.7 s, the same
    rows. Its history shows a WRITE with the user metadata CHANGED_KEYS_WRITTEN."""
    return _rewrite_with(rows.select(*on), rows.filter(F.col(flag)).drop(flag), path, on)


def rewrite_replacing(rows: DataFrame, path: str, on: tuple[str, ...], partition_by: tuple[str, ...] = ()) -> int:
    """What ``replace_rows`` does, as one write of the whole table (partitioned by ``partition_by``, as it is): its
    rows whose ``on`` columns match no row of ``rows``, then ``rows``; one commit. The new version. ``rows`` must fit
    a broadcast. The new version's files hold no row marked deleted (worn_by_merges). Its history shows a WRITE with
    the user metadata CHANGED_KEYS_WRITTEN."""
    return _rewrite_with(rows.select(*on), rows, path, on, partition_by)


def _rewrite_with(
    keys: DataFrame, written: DataFrame, path: str, on: tuple[str, ...], partition_by: tuple[str, ...] = ()
) -> int:
    """Write the table whole: its newest rows whose ``on`` columns match none of ``keys``, then ``written``."""
    stored = read_version(keys.sparkSession, path).alias(STORED)
    kept = stored.join(F.broadcast(keys).alias(CHANGED), F.expr(_same_key(on)), "left_anti")
    # The changed rows go to one file of their own: they fit a broadcast, so one task can write them. Written from
    # their many partitions (the state's window), each night added that many small files: the 5M-row table's first
    # night wrote 8 of 22k rows beside its 8 of 600k.
    rows = kept.unionByName(written.coalesce(1))
    return write_whole(rows, path, partition_by=partition_by, user_metadata=CHANGED_KEYS_WRITTEN)


def table_detail(spark: SparkSession, path: str) -> Row:
    """``DESCRIBE DETAIL`` of the table's newest version: ``numFiles`` (the data files it reads), ``properties``, ..."""
    return spark.sql(f"DESCRIBE DETAIL delta.{_quoted(path)}").first()


def use_deletion_vectors(spark: SparkSession, path: str, enabled: bool, detail: Row | None = None) -> None:
    """Make the table's next MERGEs mark replaced rows in deletion vectors (``enabled``) or rewrite their files, by
    its ``delta.enableDeletionVectors`` property (a commit of its own when it changes). Turning them on upgrades the
    table's protocol for good; turning them off again keeps that protocol, and the vectors already written stay until
    their files are rewritten. ``detail``: the table's :func:`table_detail`, where the caller has read it already."""
    properties = (detail if detail is not None else table_detail(spark, path))["properties"] or {}
    if (properties.get(DELETION_VECTORS) == "true") != enabled:
        spark.sql(
            f"ALTER TABLE delta.{_quoted(path)} SET TBLPROPERTIES ('{DELETION_VECTORS}' = '{str(enabled).lower()}')"
        )


def _quoted(path: str) -> str:
    """``path`` as a quoted identifier, for ``delta.`<path>``` in SQL."""
    return "`" + path.replace("`", "``") + "`"


def _same_key(on: tuple[str, ...]) -> str:
    """A merge's or a replace's match of a ``changed`` row with a ``stored`` one: equal ``on`` columns.

    Plain equality, which never matches NULL: a stored key is never NULL (the state's keys come from row events
    with a key; a published table whose key column holds NULL fails its audit and is rolled back before the next
    run merges into it), so a changed row with a NULL key matches nothing with ``<=>`` either. It lets Spark hash
    the key as it is: one bigint key column is looked up in a table of longs, where ``<=>`` made it two columns (the
    value and whether it is NULL) hashed as bytes. On the 5M-row night, lookups in such byte-keyed tables took ~8% of
    the tasks' CPU (a Java Flight Recorder profile); the typed table's three MERGE scans went from 3.6 to 2.9 s.
    """
    return " AND ".join(f"{STORED}.`{name}` = {CHANGED}.`{name}`" for name in on)


def row_count(spark: SparkSession, path: str, version: int) -> int:
    """The table's rows as of ``version`` (from the files' statistics in the log where Delta has them)."""
    return read_version(spark, path, version).count()


def roll_back_to(spark: SparkSession, path: str, version: int) -> bool:
    """Make ``version`` the table's newest content again when later commits exist (a run that committed and then
    failed or died before publishing); whether anything was rolled back. The rollback is itself a commit, a
    ``RESTORE``: the files of ``version`` added back, those of later versions removed, the schema and properties of
    ``version`` (the protocol is never lowered).

    delta-rs writes that commit from the two versions' logs alone, in 0.1-0.2 s a table; Spark's ``RESTORE`` runs a
    handful of Spark jobs for the same commit, 2-9 s a table in the fresh JVM of the run after a crash, which rolls
    back the state and every table it typed. Spark's stays for a table with a writer feature delta-rs does not
    write (Delta features a user's Spark settings may turn on: row tracking, ...)."""
    from deltalake import DeltaTable

    if latest_version(path) <= version:
        return False
    table = DeltaTable(path, storage_options=delta_rs_options())
    protocol = table.protocol()
    features = set(protocol.writer_features or ())
    if protocol.min_writer_version <= 2 or (protocol.min_writer_version == 7 and features <= ROLLBACK_WRITER_FEATURES):
        table.restore(version)
    else:
        log.info("%s: rolled back by Spark's RESTORE (writer protocol %s)", path, protocol)
        _table(spark, path).restoreToVersion(version)
    return True


def vacuum_older_than(spark: SparkSession, path: str, oldest_kept: int) -> None:
    """Delete the files no version from ``oldest_kept`` on reads (and files of runs that died before committing,
    once they are older than that version).

    Delta's vacuum deletes what was removed (or never committed) before a retention period, so the period is the age
    of the oldest kept version's commit: every file a kept version reads was removed after that commit, or not at
    all. Delta counts the period in whole hours (it rounds), so it is rounded up: what was removed less than an hour
    before that commit goes at a later vacuum.
    """
    # The commit's time is its log file's, as Delta's history reports it (a listing, not the history's Spark job).
    commit = _commit_file(path, oldest_kept)
    if not commit.exists():
        return  # the version's log entry is gone already: nothing to measure the retention from
    committed_s, now = commit.modified_at(), time.time()
    if now - committed_s < VACUUM_MIN_AGE_S:
        return  # see VACUUM_MIN_AGE_S
    _table(spark, path).vacuum(retention_hours(committed_s, now))


def retention_hours(oldest_kept_epoch_s: float, now_epoch_s: float) -> int:
    """The whole hours of retention that keep every file removed after ``oldest_kept_epoch_s`` (see above)."""
    return max(math.ceil((now_epoch_s - oldest_kept_epoch_s) / 3600), 0)
