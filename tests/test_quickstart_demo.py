"""The quick start's `cdcreplay demo` (what scripts/quickstart.sh runs): a full run with `airflow dags test` on an
embedded Airflow, checked against the simulator's truth, and with lost changes that the reconciliation names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from airflow_helpers import (
    EVENTS,
    PIPELINES,
    VENV_BIN,
    assert_published,
    tail,
    write_config,
)

pytestmark = pytest.mark.airflow


# --- (b) the quick start: a full run with `airflow dags test`, checked against the simulator's truth ---------------


def run_demo(tmp_path: Path, *options: str, pipelines: dict[str, str] = PIPELINES) -> tuple[int, str]:
    """`cdcreplay demo` (what scripts/quickstart.sh runs) on a config and work folder of the test's own."""
    config = write_config(tmp_path / "pipelines.yaml", tmp_path / "warehouse", tmp_path / "archive", pipelines)
    command = [str(VENV_BIN / "cdcreplay"), "demo", "--config", str(config), "--work", str(tmp_path / "work")]
    result = subprocess.run(
        [*command, "--events", str(EVENTS), *options], capture_output=True, text=True, timeout=1200, check=False
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.timeout(1500)
def test_quickstart_demo_publishes_the_true_state_and_passes_reconciliation(tmp_path):
    code, output = run_demo(tmp_path)
    assert code == 0, tail(output, 200)
    for pipeline in PIPELINES:
        assert f"reconciliation of {pipeline}: PASS" in output
    assert output.count("EQUAL to the truth") == 3 * len(PIPELINES), output
    assert output.count("-> AS EXPECTED") == len(PIPELINES), output
    assert "everything matches the simulator's truth" in output
    assert_published(tmp_path / "warehouse")
    for pipeline in PIPELINES:
        summaries = list((tmp_path / "warehouse" / pipeline / "runs").glob("*/summary.json"))
        assert len(summaries) == 1, f"{pipeline}: expected one run summary, found {summaries}"


@pytest.mark.timeout(1500)
def test_quickstart_demo_with_lost_changes_fails_reconciliation_naming_them(tmp_path):
    # The lost changes are the simulator's, the same whatever the format: one pipeline (the demo's run above has both).
    pipelines = {"demo_canal": PIPELINES["demo_canal"]}
    code, output = run_demo(tmp_path, "--drift", "3", pipelines=pipelines)
    assert code == 0, tail(output, 200)  # the demo exits 0: the FAIL verdict is what the simulator expects
    for pipeline in pipelines:
        assert f"reconciliation of {pipeline}: FAIL" in output
        assert "the simulator expects FAIL" in output
    assert output.count("-> AS EXPECTED") == len(pipelines), output
    assert output.count("EQUAL to the truth") == 3 * len(pipelines), output
