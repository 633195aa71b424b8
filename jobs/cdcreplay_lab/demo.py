"""The quick start: simulate an archive per pipeline, run the nightly DAG once with real Airflow, check the result.

cdcreplay demo [--config config/pipelines.yaml] [--events 5000] [--drift 0]

1. For every pipeline of the config, the simulator writes a Parquet archive in the pipeline's format (same seed, so
   every format encodes the same DML history) and the true final state it must produce.
2. `airflow db migrate` on SQLite under var/airflow, then `airflow dags test cdc_replay_nightly` as a full rebuild:
   the real DAG, the real SparkSubmitOperator, Spark `local[*]` through the `spark_default` connection.
3. The run's report (tables, rows, quarantine, reconciliation verdict, where the diff and the report are), then
   every published table compared with the simulator's truth, and the verdict with what the simulator expects.

`--drift N` makes the source lose N changes before the resync snapshot (as if written without a binlog event):
reconciliation must then FAIL and name exactly those rows, and the DAG run fails, as it would in production.
Exit code: 0 when everything matches the simulator's truth (including an expected FAIL verdict), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from cdcreplay import progress
from cdcreplay.config import LoadedConfig, load_config
from cdcreplay_lab.airflow_env import DAG_ID, REPO, embedded_env, venv_bin

DEFAULT_CONFIG = REPO / "config" / "pipelines.yaml"
DEFAULT_WORK = REPO / "var"
SEED = 20260101
# What the progress bar says while a task of the DAG run starts (`airflow dags test` logs these lines).
DAG_TASK_NOTES = {
    f"[DAG TEST] starting task_id={task}": f"{task}: {what}"
    for task, what in {
        "validate_run": "checking the config and parameters",
        "replay": "spark-submit jobs/replay.py (starting Spark)",
        "reconcile": "spark-submit jobs/reconcile.py (reconciling snapshots)",
        "report": "writing the run's report",
    }.items()
}


def _say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def prepare_archives(config: LoadedConfig, work: Path, events: int, drift: int, days: int) -> dict:
    """Write each pipeline's archive and truth; return what the simulator expects of the run."""
    from cdcreplay_lab.simulator import build_sample_archive, write_truth

    expected = {}
    for pipeline in config.project.pipelines:
        archive = Path(config.archive_path(pipeline))
        shutil.rmtree(archive, ignore_errors=True)
        began = time.monotonic()
        history = build_sample_archive(
            archive, pipeline.format, events=events, seed=SEED, drift=drift, days=days, layout=pipeline.archive.layout
        )
        truth = work / "demo" / "truth" / f"{pipeline.name}.jsonl"
        rows = write_truth(history, truth)
        drifted: dict[str, int] = {}
        for row in history.drift_rows:
            drifted[row.table_id] = drifted.get(row.table_id, 0) + 1
        expected[pipeline.name] = {"truth": str(truth), "truth_rows": rows, "drifted_rows": drifted}
        _say(
            f"{pipeline.name}: simulated {history.event_count} row events ({pipeline.format}) -> "
            f"{history.archive['records']} Kafka records under {archive} in {time.monotonic() - began:.1f}s"
        )
    return expected


def run_airflow(config: LoadedConfig, work: Path) -> tuple[int, Path]:
    """`airflow db migrate` then `airflow dags test` (full rebuild); returns the exit code and the log file."""
    home, logs = work / "airflow", work / "demo" / "logs"
    env = embedded_env(home, config.path)
    airflow = str(venv_bin() / "airflow")
    logs.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    migrate_log = logs / "airflow-db-migrate.log"
    with migrate_log.open("w") as out:
        code = subprocess.call([airflow, "db", "migrate"], env=env, stdout=out, stderr=subprocess.STDOUT)
    if code:
        return code, migrate_log
    logical_date = datetime.now(UTC).replace(microsecond=0).isoformat()
    conf = json.dumps({"config": str(config.path), "full_rebuild": True})
    _say(f"airflow dags test {DAG_ID} {logical_date} --conf '{conf}'  (log: {logs / 'airflow-dags-test.log'})")
    dags_log = logs / "airflow-dags-test.log"
    with dags_log.open("w") as out:
        process = subprocess.Popen(
            [airflow, "dags", "test", DAG_ID, logical_date, "--conf", conf],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=home,
        )
        # The replay job's stage lines in the log drive a progress bar (plain lines when stdout is not a terminal).
        console = progress.ConsoleProgress("[demo]", units=len(config.project.pipelines) + 1)  # + reconcile
        code = progress.follow(process, dags_log, console, notes=DAG_TASK_NOTES)
    return code, dags_log


def published_lines(config: LoadedConfig, pipeline: str) -> dict[str, list[str]]:
    """Every published table of a pipeline as truth lines (provenance columns left out)."""
    from cdcreplay.warehouse import PipelinePaths, published_rows, read_current
    from cdcreplay_lab.simulator import json_row

    paths = PipelinePaths(config.warehouse, pipeline)
    current = read_current(paths) or {"tables": {}}
    tables = {}
    for table_id, info in current["tables"].items():
        types = {name: spark_type for name, spark_type in info.get("columns", [])}
        rows = published_rows(paths, table_id).to_pylist()
        tables[table_id] = sorted(
            _comparable(json_row(table_id, {k: v for k, v in row.items() if not k.startswith("_")}, types))
            for row in rows
        )
    return tables


def _comparable(line: str) -> str:
    """A truth line with its columns in name order: published tables put key columns first."""
    return json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False)


def check_against_truth(config: LoadedConfig, expected: dict) -> bool:
    """Print, per pipeline and table, whether the published rows and the verdict are what the simulator says."""
    from cdcreplay.pipeline import load_summary
    from cdcreplay.warehouse import PipelinePaths, latest_run_id

    all_good = True
    for pipeline in config.project.pipelines:
        want = expected[pipeline.name]
        truth: dict[str, list[str]] = {}
        for line in Path(want["truth"]).read_text(encoding="utf-8").splitlines():
            truth.setdefault(json.loads(line)["table_id"], []).append(_comparable(line))
        published = published_lines(config, pipeline.name)
        print(f"\n{pipeline.name}: published tables against the simulator's true final state")
        for table_id in sorted(set(truth) | set(published)):
            got, true_rows = published.get(table_id, []), sorted(truth.get(table_id, []))
            if got == true_rows:
                print(f"  {table_id:24} {len(got):>8} rows   EQUAL to the truth")
                continue
            all_good = False
            missing, extra = len(set(true_rows) - set(got)), len(set(got) - set(true_rows))
            print(f"  {table_id:24} {len(got):>8} rows   DIFFERENT: {missing} true rows missing, {extra} rows not true")

        run_id = latest_run_id(PipelinePaths(config.warehouse, pipeline.name))
        summary = load_summary(config, pipeline.name, run_id) if run_id else None
        reconciliation = summary.reconciliation if summary else None
        verdict = reconciliation.verdict if reconciliation else "missing"
        drifted = want["drifted_rows"]
        want_verdict = "fail" if drifted else "pass"
        mismatches = {}
        for table in reconciliation.tables if reconciliation else []:
            if table.get("kind") == "reconciled":
                mismatches[table["table_id"]] = mismatches.get(table["table_id"], 0) + table["mismatch"]
        found = {t: n for t, n in mismatches.items() if n}
        verdict_ok = verdict == want_verdict and found == drifted
        all_good &= verdict_ok
        lost = ", ".join(f"{t}: {n}" for t, n in sorted(drifted.items())) or "none"
        print(
            f"  reconciliation verdict {verdict.upper()}; the simulator expects {want_verdict.upper()} "
            f"(changes lost before the resync snapshot: {lost}) -> {'AS EXPECTED' if verdict_ok else 'UNEXPECTED'}"
        )
    return all_good


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cdcreplay demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="pipelines file (default: the demo's)")
    parser.add_argument("--events", type=int, default=5000, help="row events per simulated history (default 5000)")
    parser.add_argument("--days", type=int, default=2, help="days the streaming changes span (default 2)")
    parser.add_argument("--drift", type=int, default=0, help="changes lost before the resync snapshot (default 0)")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="Airflow home, truth and logs (default var/)")
    args = parser.parse_args(argv)
    if args.events < 30 or args.drift < 0 or args.days < 1:
        parser.error("need --events >= 30, --drift >= 0 and --days >= 1")

    config = load_config(args.config)
    work = args.work.resolve()
    expected = prepare_archives(config, work, args.events, args.drift, args.days)
    code, log = run_airflow(config, work)
    # With --drift the reconcile task fails on purpose (and with it the DAG run); the check below says if as expected.
    if code and not args.drift:
        print(log.read_text(errors="replace")[-6000:], file=sys.stderr)
        _say(f"airflow exited {code}; the whole log is {log}")
        return 1

    from cdcreplay.report import render_runs

    print()
    print(render_runs(str(config.path)))
    good = check_against_truth(config, expected)
    print()
    _say(f"Airflow log: {log}")
    _say(
        "everything matches the simulator's truth"
        if good
        else "the result does NOT match the simulator's truth (see above)"
    )
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
