"""`keep_decoded_runs`: a run that publishes removes the decoded changelog of older runs and nothing else; the
tables it publishes are the ones a warehouse that keeps every changelog publishes, and a reconciliation of a run
whose changelog is gone says so, where it would otherwise call the run one without changes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from archive_helpers import pipeline_config
from pyspark.testing import assertDataFrameEqual

from cdcreplay.contracts import RunSummary
from cdcreplay.entrypoints import EXIT_BAD_INPUT, EXIT_OK, reconcile_main, replay_main
from cdcreplay.warehouse import PipelinePaths, read_current, read_json, read_table
from cdcreplay_lab.simulator import build_sample_archive

CHANGELOG = "decoded/record_kind=changelog"


def files_of(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


def summary(paths: PipelinePaths, run_id: str) -> RunSummary:
    return RunSummary.from_json(read_json(paths.run_file(run_id, "summary.json")))


def test_a_published_run_removes_older_changelogs_and_nothing_else(spark, tmp_path, capsys):
    history = build_sample_archive(tmp_path / "archive", "debezium-json", events=600, seed=9, days=2)
    first_night_end = (history.start + timedelta(days=1)).isoformat()
    warehouses, n1_files = {}, {}
    for keep in ("all", "one"):
        root = tmp_path / keep
        root.mkdir()
        config = pipeline_config(root, "sim", "debezium-json", tmp_path / "archive")
        if keep == "one":
            config.write_text("keep_decoded_runs: 1\n" + config.read_text())
        paths = PipelinePaths(str(root / "warehouse"), "sim")
        assert replay_main(["--config", str(config), "--run-id", "n1", "--end", first_night_end]) == EXIT_OK
        n1_files[keep] = files_of(Path(str(paths.run_dir("n1"))))
        assert replay_main(["--config", str(config), "--run-id", "n2", "--start", first_night_end]) == EXIT_OK
        warehouses[keep] = (config, paths)
    (_, kept), (config, pruned) = warehouses["all"], warehouses["one"]

    # Night 2 removed night 1's changelog and nothing else of its folder; its own stays for its reconciliation.
    assert any(name.startswith(CHANGELOG) for name in n1_files["one"])
    assert files_of(Path(str(kept.run_dir("n1")))) == n1_files["all"]
    assert files_of(Path(str(pruned.run_dir("n1")))) == {n for n in n1_files["one"] if not n.startswith(CHANGELOG)}
    assert any(name.startswith(CHANGELOG) for name in files_of(Path(str(pruned.run_dir("n2")))))
    assert [summary(pruned, run).changelogs_removed for run in ("n1", "n2")] == [[], ["n1"]]
    assert [summary(kept, run).changelogs_removed for run in ("n1", "n2")] == [[], []]

    # The published tables are the same as where every changelog is kept.
    tables = sorted(read_current(kept)["tables"])
    assert tables == sorted(read_current(pruned)["tables"]) == sorted(history.tables)
    for table_id in tables:
        assertDataFrameEqual(
            read_table(spark, pruned.warehouse, "sim", table_id), read_table(spark, kept.warehouse, "sim", table_id)
        )

    capsys.readouterr()
    assert reconcile_main(["--config", str(config), "--run-id", "n2"]) == EXIT_OK
    assert reconcile_main(["--config", str(config), "--run-id", "n1"]) == EXIT_BAD_INPUT
    changes = summary(pruned, "n1").decoded["changelog_rows"]
    assert capsys.readouterr().err.strip() == (
        f"cdcreplay: pipeline sim: run n1 decoded {changes} row changes, but its changelog "
        f"{pruned.run_dir('n1') / CHANGELOG} is gone (the project's keep_decoded_runs removes older runs' "
        "changelogs); reconcile a newer run, or replay this run's range again and reconcile that run"
    )
