"""Throughput of the real replay job on simulated archives: events/s per format and stage, against the reference.

cdcreplay benchmark [--events 2000000] [--formats debezium-json,canal-json|all|none] [--master local[2]] [--reconcile]
                   [--incremental [--nightly-events 200000] [--full-rebuild-from result.json
                                                             | --state-keys 5000000 [--nights 1]
                                                               [--no-deletion-vectors]]]
                   [--reconcile-rows 5000000] [--from-kafka] [--spark-stages]

For each format: the simulator writes a Parquet archive of ``--events`` row events (kept under ``--work`` and reused
while the parameters are unchanged), then the same ``run_pipeline`` the Spark job runs does a full rebuild: read
(manifest), decode (to Parquet, with accounting), compact, publish typed tables. Events are the Kafka records read.
The reference is the hand-written Spark job of shared/environment.md (Debezium JSON, 2M events, 2 cores):
196,000 events/s; DuckDB did the same at ~1,000,000 events/s. A JSON result file is written for comparisons.
``--reconcile-rows N`` also times the reconciliation of an N-row snapshot against an N-row state
(``benchmark_reconcile``). ``--incremental --state-keys N`` measures a nightly run onto a state of N keys on an
archive Spark writes instead of the simulator (``benchmark_keyed``), ``--nights K`` K such nights in a row (each
onto the state the one before built), ``--no-deletion-vectors`` with the pipeline's `deletion_vectors` option off.
``--from-kafka`` also replays each format's archive from a local Kafka broker and reports it beside the archive's row
(``benchmark_kafka``). ``--spark-stages`` lists each run's slowest Spark stages from Spark's REST API
(``benchmark_stages``) and keeps all of them in the result.

Not part of the test run: timings on a shared 2-core machine are noisy, so they are measured here, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cdcreplay.delta_tables import read_version
from cdcreplay.progress import PIPELINE_STAGES
from cdcreplay_lab import benchmark_keyed
from cdcreplay_lab.airflow_env import REPO
from cdcreplay_lab.benchmark_keyed import FORMAT as KEYED_FORMAT
from cdcreplay_lab.benchmark_reference import run_reference

REFERENCE_EVENTS_PER_S = {"spark (hand-written, from_json + max_by)": 196_000, "duckdb": 1_000_000}
SPARK_REFERENCE = REFERENCE_EVENTS_PER_S["spark (hand-written, from_json + max_by)"]
SEED = 4242
# The issue's throughput targets on 2 cores: JSON formats >= 250k events/s end to end; formats that need Python to
# read at all (Avro via fastavro, MongoDB shell syntax) >= 100k events/s.
JSON_TARGET_EVENTS_PER_S = 250_000
PYTHON_TARGET_EVENTS_PER_S = 100_000
PYTHON_FORMATS = ("dts-avro", "drs-avro", "debezium-avro", "qlik-avro", "drs-dds-json")


def target_events_per_s(fmt: str) -> int:
    return PYTHON_TARGET_EVENTS_PER_S if fmt in PYTHON_FORMATS else JSON_TARGET_EVENTS_PER_S


@dataclass(frozen=True)
class ArchiveSource:
    """An archive to measure and what its pipeline needs: the simulator's (:func:`simulated`) or another writer's."""

    path: Path
    settings: dict  # pipeline config entries a reader of the archive needs (keys, types, writer schemas)
    pipeline: str  # the pipeline's name, and so its warehouse folder
    archive: dict | None = None  # the pipeline's archive block when the records come from elsewhere (a broker)
    topics: tuple[str, ...] = ()  # the topics a Kafka pipeline reads


def simulated(work: Path, fmt: str, events: int) -> ArchiveSource:
    """The simulator's archive of ``events`` row events in ``fmt``."""
    from cdcreplay_lab.simulator.encoders import encoder

    archive = _archive(work, fmt, events)
    return ArchiveSource(archive, encoder(fmt).pipeline(archive), _simulated_pipeline(fmt))


def _simulated_pipeline(fmt: str) -> str:
    return f"bench_{fmt.replace('-', '_')}"


def keyed_source(
    spark, work: Path, keys: int, nightly: int, deletion_vectors: bool | None = None, nights: int = 1
) -> ArchiveSource:
    """The ``--state-keys`` archive (``benchmark_keyed``): ``keys`` keys loaded, then ``nights`` nights of ``nightly``
    records; its pipeline with the `deletion_vectors` option as given (None: the option's default)."""

    def write(folder: Path) -> str:
        benchmark_keyed.write_keyed_archive(spark, folder, keys, nightly, nights)
        return f"wrote {keys + nightly * nights:,} records ({keys:,} keys, {nights} x {nightly:,} at night)"

    wanted = {
        "format": KEYED_FORMAT,
        "state_keys": keys,
        "nightly_events": nightly,
        "version": benchmark_keyed.ARCHIVE_VERSION,
        **({"nights": nights} if nights > 1 else {}),  # one night: an archive written before --nights still serves
    }
    name = f"keyed-{KEYED_FORMAT}-{keys}-{nightly}" + (f"-x{nights}" if nights > 1 else "")
    folder = _written_once(work / "archives" / name, wanted, write)
    chosen = {} if deletion_vectors is None else {"deletion_vectors": deletion_vectors}
    settings = {**benchmark_keyed.pipeline_settings(), **chosen}
    return ArchiveSource(folder, settings, KEYED_PIPELINE)


def _archive(work: Path, fmt: str, events: int) -> Path:
    """A simulated archive for ``fmt``, regenerated only when its parameters changed."""
    from cdcreplay_lab.simulator import build_sample_archive

    def simulate(folder: Path) -> str:
        history = build_sample_archive(folder, fmt, events=events, seed=SEED, days=3, rows_per_file=500_000)
        return f"simulated {history.event_count} row events -> {history.archive['records']} records"

    wanted = {"format": fmt, "events": events, "seed": SEED}
    return _written_once(work / "archives" / f"{fmt}-{events}", wanted, simulate)


def _written_once(folder: Path, wanted: dict, write) -> Path:
    """``folder`` as ``write(folder)`` makes it, made again only when its parameters (``wanted``) changed since:
    archives of millions of records take minutes to write. ``write`` returns what to print about what it wrote."""
    stamp = folder / "_BENCHMARK.json"
    if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")) == wanted:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    began = time.monotonic()
    written = write(folder)
    stamp.write_text(json.dumps(wanted), encoding="utf-8")
    print(f"  {written} in {time.monotonic() - began:.0f}s", flush=True)
    return folder


def _config(work: Path, fmt: str, source: ArchiveSource, warehouse: str = "warehouse") -> Path:
    """A pipelines file for the archive, with what its writer says a reader of it needs (writer schemas, keys)."""
    import yaml

    pipeline = {
        "name": source.pipeline,
        "format": fmt,
        "archive": source.archive or {"path": str(source.path), "layout": "parquet"},
        **({"topics": list(source.topics)} if source.topics else {}),
        **source.settings,
    }
    path = work / f"{fmt}-{warehouse}.yaml"
    document = {"warehouse": str(work / warehouse), "keep_versions": 1, "pipelines": [pipeline]}
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def measure(spark, work: Path, fmt: str, events: int, reconcile: bool, source: ArchiveSource | None = None) -> dict:
    """The full rebuild of ``source`` (default: the simulator's archive of ``events`` row events in ``fmt``)."""
    from cdcreplay.config import load_config
    from cdcreplay.pipeline import run_pipeline
    from cdcreplay.run_spec import build_run_spec

    source = source or simulated(work, fmt, events)
    archive = source.path
    config = load_config(_config(work, fmt, source))
    pipeline = config.project.pipelines[0]
    run_id = f"bench_{datetime.now(UTC):%Y%m%dT%H%M%S}"
    spec = build_run_spec(config, run_id=run_id, full_rebuild=True)
    with PeakMemory(spark) as memory:
        started_at, began = time.time(), time.monotonic()
        summary = run_pipeline(spark, config, pipeline, spec)
        elapsed = round(time.monotonic() - began, 2)  # the rate is of the seconds the report shows
    result = {
        "started_at": started_at,
        "format": fmt,
        "pipeline": source.pipeline,
        "row_events": events,
        "records": summary.distinct_records,
        "seconds": elapsed,
        "events_per_s": round(summary.distinct_records / elapsed),
        "stages_s": summary.timings_s,
        "tables": {t: info["rows"] for t, info in summary.tables.items()},
        "table_paths": {t: info["path"] for t, info in summary.tables.items()},
        "table_versions": {t: info["delta_version"] for t, info in summary.tables.items()},
        "quarantined": summary.decoded["quarantined"],
        "peak_driver_jvm_mb": memory.peak_jvm_mb,
        "peak_python_rss_mb": memory.peak_python_rss_mb(),
    }
    if reconcile:
        from cdcreplay.reconcile import run_reconciliation

        began = time.monotonic()
        outcome = run_reconciliation(
            spark, Path(summary.manifest_path).parent, summary.changelog_path, summary.base_state
        )
        result["reconcile_s"] = round(time.monotonic() - began, 2)
        result["reconcile_verdict"] = outcome.verdict
    result["ratio_to_spark_reference"] = round(result["events_per_s"] / SPARK_REFERENCE, 2)
    result["target_events_per_s"] = target_events_per_s(fmt)
    result["ratio_to_target"] = round(result["events_per_s"] / result["target_events_per_s"], 3)
    reference = run_reference(fmt, archive, work / "duckdb")
    if reference is not None:
        result["duckdb"] = reference
        result["ratio_to_duckdb"] = round(result["events_per_s"] / reference["events_per_s"], 3)
        live_rows = sum(result["tables"].values())
        if reference["latest_rows"] != live_rows:
            result["duckdb_mismatch"] = f"DuckDB kept {reference['latest_rows']} latest rows, the job {live_rows}"
    return result


@contextmanager
def local_broker(work: Path) -> Iterator[str]:
    """A fresh one-node Kafka broker for this benchmark (its log under ``work``); yields its bootstrap address."""
    from cdcreplay_lab.kafka_broker import running_kafka

    folder = work / "kafka"
    shutil.rmtree(folder, ignore_errors=True)
    try:
        with running_kafka(folder) as bootstrap:
            yield bootstrap
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure_from_kafka(spark, work: Path, archive_run: dict, reconcile: bool, bootstrap: str) -> dict:
    """The full rebuild of ``archive_run``'s simulated archive, produced to the broker first and read from it; its
    tables must equal the archive run's (``differing_from_archive`` lists any that do not)."""
    from cdcreplay_lab.benchmark_kafka import put_on_broker

    fmt, events = archive_run["format"], archive_run["row_events"]
    archive = simulated(work, fmt, events)
    began = time.monotonic()
    topics, produced = put_on_broker(bootstrap, archive.path)
    print(f"  produced {produced:,} records to the broker in {time.monotonic() - began:.0f}s", flush=True)
    source = ArchiveSource(
        archive.path,
        archive.settings,
        f"{archive.pipeline}_kafka",
        archive={"layout": "kafka", "bootstrap_servers": [bootstrap]},
        topics=tuple(topics),
    )
    result = {**measure(spark, work, fmt, events, reconcile, source), "source": "kafka"}
    published = {table: (path, result["table_versions"].get(table)) for table, path in result["table_paths"].items()}
    result["differing_from_archive"] = differing = differing_tables(spark, published, archive_run)
    tables = f"DIFFERENT tables: {', '.join(differing)}" if differing else "the same tables as from the archive"
    print(f"  from Kafka: {result['events_per_s']:,} events/s in {result['seconds']:.1f}s, {tables}", flush=True)
    return result


# Unless --nightly-events says otherwise, the nightly run of the incremental measurement replays the newest tenth of
# the archive (by Kafka timestamp); with --state-keys, the issue's 200k new records.
NIGHTLY_SHARE = 0.1
KEYED_NIGHTLY_EVENTS = 200_000
KEYED_PIPELINE = "bench_keyed_dts_shareplex_json"


def earlier_full_rebuild(result_file: Path, fmt: str, events: int) -> dict:
    """The full rebuild of ``fmt`` at ``events`` row events measured in an earlier result file, to compare a nightly
    run with instead of running the full rebuild again (at 20M events it takes most of an hour). Its published tables
    must still be there: the nightly run's tables are compared with them."""
    try:
        document = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"--full-rebuild-from: cannot read {result_file}: {error}") from None
    pipeline = _simulated_pipeline(fmt)  # not a --state-keys archive of the same format and size
    for result in document.get("results") or []:
        if (
            result.get("format") == fmt
            and result.get("row_events") == events
            and result.get("pipeline", pipeline) == pipeline
        ):
            missing = [path for path in result["table_paths"].values() if not Path(path).is_dir()]
            if missing:
                raise ValueError(
                    f"--full-rebuild-from: the tables of that full rebuild are gone ({missing[0]}); "
                    "run without --full-rebuild-from to measure it again"
                )
            return {**result, "full_rebuild_from": str(result_file)}
    raise ValueError(
        f"--full-rebuild-from: {result_file} has no full rebuild of {fmt} at {events:,} row events; "
        "give --formats and --events as in that run"
    )


def nightly_cut(raw, nightly_events: int | None):
    """The Kafka timestamp that starts the nightly run: the newest ``nightly_events`` records (about: records with
    the cut's own timestamp all fall on the nightly side), or the newest tenth of the archive."""
    from pyspark.sql import functions as F

    share = NIGHTLY_SHARE
    if nightly_events:
        share = min(1.0, nightly_events / max(1, raw.count()))
    # accuracy 1/100,000 of the archive: within 200 records of the wanted count at 20M records
    cut = raw.agg(F.percentile_approx("timestamp", 1 - share, 100_000)).first()[0]
    return cut if cut.tzinfo else cut.replace(tzinfo=UTC)


def measure_incremental(
    spark,
    work: Path,
    fmt: str,
    events: int,
    full: dict,
    nightly_events: int | None = None,
    source: ArchiveSource | None = None,
    nights: int = 1,
) -> dict:
    """A nightly run (the newest ``nightly_events`` records, or the newest tenth of the archive) onto the state built
    from the rest, against ``full`` (the full rebuild of the same ``source``, default the simulator's archive).
    ``nights`` > 1 (a ``--state-keys`` archive of that many nights): the newest ``nights`` x ``nightly_events``
    records, one night after the other, each onto the state the one before built (``benchmark_keyed.NIGHT_SPACING``
    apart); the first night's figures stay where a single night's are, and ``nights`` lists each.

    The tables the last night publishes must equal the full rebuild's ones, provenance included (compared with Spark).
    """
    from cdcreplay import archive as archive_files
    from cdcreplay.config import load_config
    from cdcreplay.pipeline import run_pipeline
    from cdcreplay.run_spec import build_run_spec

    source = source or simulated(work, fmt, events)
    archive = source.path
    config = load_config(_config(work, fmt, source, warehouse="warehouse-incremental"))
    pipeline = config.project.pipelines[0]
    raw = archive_files.read_archive(spark, archive_files.archive_files(str(archive), "parquet"), "parquet")
    cut = nightly_cut(raw, nightly_events * nights if nightly_events else None)
    history = run_pipeline(
        spark, config, pipeline, build_run_spec(config, run_id="history", end=cut.isoformat(), full_rebuild=True)
    )
    measured = []
    with PeakMemory(spark) as memory:
        for night in range(nights):
            start = cut + night * benchmark_keyed.NIGHT_SPACING
            end = (start + benchmark_keyed.NIGHT_SPACING).isoformat() if night < nights - 1 else None
            run_id = "nightly" if nights == 1 else f"nightly_{night + 1}"
            spec = build_run_spec(config, run_id=run_id, start=start.isoformat(), end=end)
            started_at, began = time.time(), time.monotonic()
            summary = run_pipeline(spark, config, pipeline, spec)
            measured.append((summary, round(time.monotonic() - began, 2), started_at))
    first, first_s, _ = measured[0]
    last = measured[-1][0]
    published = {table: (info["path"], info["delta_version"]) for table, info in last.tables.items()}
    differing = differing_tables(spark, published, full)
    return {
        "state_records_before": history.distinct_records,
        # the keys the nightly run merges into: live rows and the tombstones of deleted keys
        "state_keys_before": sum(info["rows"] + info["tombstones"] for info in history.tables.values()),
        "nightly_records": first.distinct_records,
        "nightly_s": first_s,
        "full_rebuild_s": full["seconds"],
        # from the two times as reported, so the ratio printed is the one a reader computes from them
        "speedup_vs_full": round(full["seconds"] / first_s, 2),
        "nightly_stages_s": first.timings_s,
        "nights": [
            {
                "started_at": started_at,
                "records": summary.distinct_records,
                "seconds": seconds,
                "speedup_vs_full": round(full["seconds"] / seconds, 2),
                "stages_s": summary.timings_s,
            }
            for summary, seconds, started_at in measured
        ],
        "peak_driver_jvm_mb": memory.peak_jvm_mb,
        "identical_to_full_rebuild": not differing,
        "differing_tables": differing,
    }


def differing_tables(spark, published: dict[str, tuple[str, int | None]], reference: dict) -> list[str]:
    """The tables of ``published`` ((Delta folder, version) per table) whose rows differ from those of ``reference``
    (a result of :func:`measure`), or that only one of the two has."""
    versions = reference.get("table_versions", {})
    theirs = {table: (path, versions.get(table)) for table, path in reference["table_paths"].items()}
    return sorted(
        table
        for table in published.keys() | theirs.keys()
        if table not in published or table not in theirs or _differ(spark, published[table], theirs[table])
    )


def _differ(spark, left: tuple[str, int | None], right: tuple[str, int | None]) -> bool:
    """Whether two published tables, each (Delta folder, version), hold different rows."""
    a, b = read_version(spark, *left), read_version(spark, *right)
    if sorted(a.columns) != sorted(b.columns):
        return True
    b = b.select(*a.columns)
    return a.exceptAll(b).limit(1).count() > 0 or b.exceptAll(a).limit(1).count() > 0


class PeakMemory:
    """Peak heap used by the driver JVM (sampled every 0.2 s) and peak RSS of the Python processes (driver, workers)."""

    def __init__(self, spark):
        self._runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
        self.peak_jvm_mb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            try:
                used = self._runtime.totalMemory() - self._runtime.freeMemory()
            except Exception:  # the gateway is busy or closing: skip this sample
                continue
            self.peak_jvm_mb = max(self.peak_jvm_mb, round(used / 2**20))

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @staticmethod
    def peak_python_rss_mb() -> dict:
        # ru_maxrss is in KiB on Linux; RUSAGE_CHILDREN covers the largest finished Python worker.
        return {
            "driver": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "largest_worker": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
        }


def render(results: list[dict]) -> str:
    header = (
        f"{'format':21} {'records':>10} {'seconds':>8} {'events/s':>10} {'x target':>8} {'x ref':>6} {'duckdb/s':>9} "
        f"{'x duck':>6} "
        f"{'jvm MB':>6}  " + "  ".join(f"{s:>8}" for s in PIPELINE_STAGES) + f"  {'reconcile':>9}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        name = f"{r['format']} (kafka)" if r.get("source") == "kafka" else r["format"]
        stages = "  ".join(f"{r['stages_s'].get(s, 0):>7.1f}s" for s in PIPELINE_STAGES)
        reconcile = f"{r['reconcile_s']:>8.1f}s" if "reconcile_s" in r else f"{'-':>9}"
        duck = r.get("duckdb")
        duck_text = f"{duck['events_per_s']:>9,} {r['ratio_to_duckdb']:>6.3f}" if duck else f"{'-':>9} {'-':>6}"
        lines.append(
            f"{name:21} {r['records']:>10,} {r['seconds']:>8.1f} {r['events_per_s']:>10,} "
            f"{r['ratio_to_target']:>8.3f} {r['ratio_to_spark_reference']:>6.2f} {duck_text} "
            f"{r['peak_driver_jvm_mb']:>6}  {stages}  {reconcile}"
        )
    lines.append(
        f"x target: events/s divided by the issue's target ({JSON_TARGET_EVENTS_PER_S:,} events/s for JSON formats, "
        f"{PYTHON_TARGET_EVENTS_PER_S:,} for {', '.join(PYTHON_FORMATS)}); "
        f"x ref: events/s divided by the hand-written Spark reference ({SPARK_REFERENCE:,} events/s, "
        "shared/environment.md); duckdb/s: the same archive decoded and compacted by DuckDB SQL in this run "
        "(benchmark_reference.py), x duck the ratio to it; jvm MB: peak driver heap used; (kafka): the same records "
        "replayed from a local Kafka broker instead of the archive's files."
    )
    return "\n".join(lines)


def render_reconcile(r: dict) -> str:
    planted = "as planted" if r["counts_as_planted"] else "NOT as planted"
    counts = ", ".join(f"{count:,} {status}" for status, count in r["counts"].items())
    return (
        f"reconciliation: {r['snapshot_rows']:,} snapshot rows against {r['state_rows']:,} state rows in "
        f"{r['seconds']:.1f}s ({r['rows_per_s']:,} rows/s; inputs written in {r['inputs_s']:.1f}s), "
        f"verdict {r['verdict']}; {counts}: {planted}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cdcreplay benchmark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, help="row events per format (default 2,000,000)")
    parser.add_argument(
        "--formats", help="comma-separated format ids, all (every format) or none (default debezium-json,canal-json)"
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2], as the reference)")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory (default 4g)")
    parser.add_argument("--work", type=Path, default=REPO / "var" / "benchmark", help="archives and warehouse")
    parser.add_argument("--reconcile", action="store_true", help="also time the reconciliation of each run")
    parser.add_argument(
        "--incremental", action="store_true", help="also time a nightly run (newest tenth) against the full rebuild"
    )
    parser.add_argument(
        "--nightly-events",
        type=int,
        help="with --incremental: the nightly run replays the newest this many records instead of the newest tenth",
    )
    parser.add_argument(
        "--full-rebuild-from",
        type=Path,
        help="with --incremental and one format: take the full rebuild from this earlier result file (same --events) "
        "instead of running it again",
    )
    parser.add_argument(
        "--state-keys",
        type=int,
        help="with --incremental: the nightly run (--nightly-events, default 200,000) goes onto a state of this many "
        f"keys, on a {KEYED_FORMAT} archive Spark writes (benchmark_keyed.py) instead of the simulator's",
    )
    parser.add_argument(
        "--nights",
        type=int,
        default=1,
        help="with --state-keys: this many nights of --nightly-events records each, one a day, each run onto the state "
        "the night before built (default 1)",
    )
    parser.add_argument(
        "--deletion-vectors",
        action=argparse.BooleanOptionalAction,
        help="with --state-keys: the pipeline's `deletion_vectors` option (default on, as a pipeline's; off: its night "
        "rewrites the typed table's files instead of marking the rows it replaces)",
    )
    parser.add_argument(
        "--reconcile-rows",
        type=int,
        default=0,
        help="also time reconciling a snapshot of this many rows against a state of as many (e.g. 5000000)",
    )
    parser.add_argument(
        "--from-kafka",
        action="store_true",
        help="also replay each format's archive from a local Kafka broker (started from the jars `python -m "
        "cdcreplay.jars --test-servers` fetches) and report it beside the archive's row",
    )
    parser.add_argument(
        "--spark-stages",
        action="store_true",
        help="after each run, list its slowest Spark stages (task, CPU and GC time, from Spark's REST API); the result "
        "file keeps every stage",
    )
    parser.add_argument("--result", type=Path, help="JSON result file (default <work>/result-<time>.json)")
    args = parser.parse_args(argv)
    if args.deletion_vectors is not None and args.state_keys is None:
        parser.error("--[no-]deletion-vectors sets the option of the --state-keys pipeline: add --state-keys")
    if args.nights != 1 and args.state_keys is None:
        parser.error("--nights runs nights of the --state-keys archive in a row: add --state-keys")
    if args.state_keys is not None:
        _keyed_defaults(parser, args)
    args.formats = "debezium-json,canal-json" if args.formats is None else args.formats
    args.events = 2_000_000 if args.events is None else args.events

    from cdcreplay.config import KNOWN_FORMATS
    from cdcreplay_lab.simulator.encoders import FORMATS as SIMULATED_FORMATS

    formats = [f.strip() for f in args.formats.split(",") if f.strip() and f.strip() != "none"]
    if formats == ["all"]:
        formats = list(SIMULATED_FORMATS)
    unknown = [f for f in formats if f not in KNOWN_FORMATS]
    if unknown:
        parser.error(f"--formats: unknown {', '.join(unknown)}; known: {', '.join(KNOWN_FORMATS)}")
    unsimulated = [f for f in formats if f not in SIMULATED_FORMATS]
    if unsimulated:
        parser.error(
            f"--formats: the simulator writes no {', '.join(unsimulated)} archive, so it cannot be measured; "
            f"measurable: {', '.join(SIMULATED_FORMATS)} (or all)"
        )
    if args.events < 30:
        parser.error("--events must be at least 30")
    if args.reconcile_rows < 0 or 0 < args.reconcile_rows < 1000:
        parser.error("--reconcile-rows must be 0 (off) or at least 1000")
    if not formats and not args.reconcile_rows:
        parser.error("nothing to measure: give --formats, --reconcile-rows or both")
    if args.from_kafka and (args.incremental or not formats):
        parser.error("--from-kafka replays the formats' full rebuilds from a broker: give --formats, not --incremental")
    if (args.nightly_events is not None or args.full_rebuild_from) and not args.incremental:
        parser.error("--nightly-events and --full-rebuild-from apply to the nightly run: add --incremental")
    if args.nightly_events is not None and args.nightly_events < 1:
        parser.error("--nightly-events must be at least 1")
    if args.full_rebuild_from:
        if len(formats) != 1:
            parser.error("--full-rebuild-from takes the full rebuild of one format: give exactly one in --formats")
        try:
            earlier = earlier_full_rebuild(args.full_rebuild_from, formats[0], args.events)
        except ValueError as error:
            parser.error(str(error))

    from cdcreplay.spark import build_session

    args.work.mkdir(parents=True, exist_ok=True)
    extra = {"spark.driver.memory": args.driver_memory, "spark.sql.shuffle.partitions": "8"}
    if args.spark_stages:  # the UI keeps the last 1,000 stages; a rebuild, its history run and six nights make more
        extra["spark.ui.retainedStages"] = extra["spark.ui.retainedJobs"] = "20000"
    spark = build_session("cdcreplay-benchmark", master=args.master, extra=extra)
    from cdcreplay.progress import show_on_console

    show_on_console("[benchmark]")  # run_pipeline's stage lines as a bar (plain lines when not a terminal)
    with ExitStack() as broker:  # the broker stops however the measurements end
        bootstrap = broker.enter_context(local_broker(args.work)) if args.from_kafka else None
        results = []
        source = None
        if args.state_keys:
            several = f"{args.nights} nights of " if args.nights > 1 else ""
            night_records = f"{several}{args.nightly_events:,} night records"
            print(f"{KEYED_FORMAT}: a state of {args.state_keys:,} keys and {night_records}")
            source = keyed_source(
                spark, args.work, args.state_keys, args.nightly_events, args.deletion_vectors, args.nights
            )
        for fmt in formats:
            print(f"{fmt}: {args.events:,} " + ("records" if source else "row events"), flush=True)
            if args.full_rebuild_from:
                results.append(earlier)
                print(f"  full rebuild taken from {args.full_rebuild_from}", flush=True)
            else:
                results.append(measure(spark, args.work, fmt, args.events, args.reconcile, source))
                _with_spark_stages(spark, results[-1], args.spark_stages)
            print(f"  {results[-1]['events_per_s']:,} events/s in {results[-1]['seconds']:.1f}s", flush=True)
            if bootstrap:
                results.append(measure_from_kafka(spark, args.work, results[-1], args.reconcile, bootstrap))
                _with_spark_stages(spark, results[-1], args.spark_stages)
            if args.incremental:
                results[-1]["incremental"] = incremental = measure_incremental(
                    spark, args.work, fmt, args.events, results[-1], args.nightly_events, source, args.nights
                )
                nights = incremental["nights"]
                compared = "identical tables" if len(nights) == 1 else f"after night {len(nights)}, identical tables"
                print(
                    f"  nightly run of {incremental['nightly_records']:,} records onto a state of "
                    f"{incremental['state_keys_before']:,} keys (built from {incremental['state_records_before']:,} "
                    f"records): {incremental['nightly_s']:.1f}s, "
                    f"{incremental['speedup_vs_full']}x faster than the full rebuild, "
                    + (
                        compared
                        if incremental["identical_to_full_rebuild"]
                        else f"DIFFERENT tables: {', '.join(incremental['differing_tables'])}"
                    ),
                    flush=True,
                )
                for number, night in enumerate(nights[1:], start=2):  # each onto the state the night before built
                    print(
                        f"  night {number}: {night['records']:,} records, {night['seconds']:.1f}s, "
                        f"{night['speedup_vs_full']}x faster than the full rebuild",
                        flush=True,
                    )
                for number, night in enumerate(nights, start=1):
                    _with_spark_stages(spark, night, args.spark_stages, f"night {number}")
        reconciliation = None
        if args.reconcile_rows:
            from cdcreplay_lab.benchmark_reconcile import measure_reconcile

            print(f"reconciliation: {args.reconcile_rows:,}-row snapshot against a {args.reconcile_rows:,}-row state")
            reconciliation = measure_reconcile(spark, args.work, args.reconcile_rows)
    spark.stop()

    print()
    if results:
        print(render(results))
    if reconciliation:
        print(render_reconcile(reconciliation))
    document = {
        "measured_at": datetime.now(UTC).isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "master": args.master,
        "reference_events_per_s": REFERENCE_EVENTS_PER_S,
        "results": results,
        "reconciliation": reconciliation,
    }
    result_path = args.result or args.work / f"result-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    result_path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    print(f"result: {result_path}")
    return 0


def _with_spark_stages(spark, result: dict, wanted: bool, night: str | None = None) -> None:
    """With ``--spark-stages``: the run's Spark stages into ``result`` (a full rebuild's, or one ``night``'s: the
    stages submitted while it ran), the slowest printed."""
    if not wanted:
        return
    from cdcreplay_lab.benchmark_stages import completed_stages, driver_only_seconds, render_stages, stages_of_run

    until = result["started_at"] + result["seconds"] if night else None
    result["spark_stages"] = stages_of_run(completed_stages(spark), result["started_at"], result["stages_s"], until)
    result["driver_only_s"] = driver_only_seconds(result["spark_stages"], result["stages_s"])
    if night:
        print(f"  {night}'s Spark stages:", flush=True)
    print(render_stages(result["spark_stages"]), flush=True)
    driver_only = ", ".join(f"{stage} {seconds:.1f}" for stage, seconds in result["driver_only_s"].items())
    print(f"  seconds without a Spark stage running (the driver's own work): {driver_only}", flush=True)


def _keyed_defaults(parser, args) -> None:
    """Check the options that go with --state-keys and fill in what it implies (format, events, nightly records)."""
    if not args.incremental:
        parser.error("--state-keys sets up the nightly run's state: add --incremental")
    if args.full_rebuild_from:
        parser.error("--state-keys runs the full rebuild of its own archive: leave out --full-rebuild-from")
    if args.formats not in (None, KEYED_FORMAT):
        parser.error(f"--state-keys writes a {KEYED_FORMAT} archive: leave out --formats (or give {KEYED_FORMAT})")
    if args.events is not None:
        parser.error("--events does not go with --state-keys: its archive is the state's keys plus the night's changes")
    nightly = KEYED_NIGHTLY_EVENTS if args.nightly_events is None else args.nightly_events
    if args.state_keys < max(1, nightly):
        parser.error(
            f"--state-keys must be at least --nightly-events ({nightly:,}): each night record changes a key of its own"
        )
    if not 1 <= args.nights <= args.state_keys // max(1, nightly):
        parser.error(
            f"--nights must be from 1 to --state-keys // --nightly-events ({args.state_keys // max(1, nightly):,}): "
            "no two nights change the same key"
        )
    args.formats, args.nightly_events = KEYED_FORMAT, nightly
    args.events = args.state_keys + nightly * args.nights


if __name__ == "__main__":
    raise SystemExit(main())
