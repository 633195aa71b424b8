"""Set-up's class archive for driver JVMs (``cdcreplay.jvm`` says what it is and who uses it).

python -m cdcreplay_lab.class_archive      (scripts/setup.sh runs it after fetching the jars)

A JVM writes the archive when it exits (``-XX:ArchiveClassesAtExit``) with the classes it loaded, so a driver is
started with that option and runs what a run runs: a small simulated Debezium JSON archive replayed as a full rebuild
and then as a night onto its state (decode, compaction, the Delta writes and the MERGE, the audit's reads). Then a
new driver is started with the archive, and the archive is kept only when that driver maps it: a JVM that cannot
use an archive ignores it without a word, so this check is what says it works here.

The archive is written again when the JDK, pyspark or the jars change (the facts it was made from are kept beside it,
``driver-classes.json``); otherwise a rerun of set-up leaves it as it is.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from cdcreplay.jars import installed_jars, jars_dir
from cdcreplay.jvm import class_archive, with_archive

# Bump when the workload changes, so that set-up writes the archive again.
WORKLOAD = 1
# A child that takes longer is stopped (a busy two-core machine wrote the archive in 9 minutes).
CHILD_TIMEOUT_S = 1800


def made_from() -> dict:
    """What an archive is valid for: the JDK, pyspark, the jars on a driver's class path, and the workload."""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr.strip()
    jars = {Path(jar).name: Path(jar).stat().st_size for jar in installed_jars()}
    return {"java": java, "pyspark": pyspark.__version__, "jars": jars, "workload": WORKLOAD}


def _session(java_options: str):
    from cdcreplay.spark import DRIVER_JAVA_OPTIONS, build_session

    return build_session("cdcreplay-class-archive", "local[2]", extra={DRIVER_JAVA_OPTIONS: java_options})


def _stop_and_wait(spark) -> None:
    """Stop the session and wait for its JVM to exit (it writes the archive on its way out)."""
    jvm = spark.sparkContext._gateway.proc  # spark-submit execs the JVM: this process is the JVM
    spark.stop()
    jvm.stdin.close()  # the JVM exits when its Python's stdin closes
    jvm.wait(timeout=600)


def write_archive(target: Path) -> None:
    """In this process: a driver that writes ``target`` when it exits, running a small full rebuild and a night."""
    from cdcreplay.config import load_config
    from cdcreplay.pipeline import run
    from cdcreplay.run_spec import RunSpec
    from cdcreplay_lab.simulator import build_sample_archive

    spark = _session(with_archive("ArchiveClassesAtExit", target))
    with tempfile.TemporaryDirectory(prefix="cdcreplay-class-archive-") as folder:
        work = Path(folder)
        build_sample_archive(work / "archive", "debezium-json", events=300, seed=1, days=2)
        config_file = work / "pipelines.yaml"
        config_file.write_text(
            f"warehouse: {work / 'warehouse'}\npipelines:\n  - name: sample\n    format: debezium-json\n"
            f"    archive: {{path: {work / 'archive'}, layout: parquet}}\n",
            encoding="utf-8",
        )
        config = load_config(config_file)
        for run_id, full_rebuild in (("rebuild", True), ("night", False)):
            run(spark, config, RunSpec(config=str(config_file), run_id=run_id, full_rebuild=full_rebuild))
        _stop_and_wait(spark)


def maps_archive(archive: Path) -> bool:
    """In this process: whether a new driver started with ``archive`` maps it (the JVM's memory maps name it)."""
    spark = _session(with_archive("SharedArchiveFile", archive))
    mapped = driver_maps(spark, archive)
    _stop_and_wait(spark)
    return mapped


def driver_maps(spark, archive: Path) -> bool:
    """Whether the session's driver JVM has ``archive`` mapped in its memory (Linux: its ``/proc/<pid>/maps``)."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    return str(archive) in Path(f"/proc/{pid}/maps").read_text(encoding="utf-8")


def _in_child(*args: str) -> subprocess.CompletedProcess:
    """This module's ``args`` in a new Python (its driver JVM must be the first of its process), at most
    CHILD_TIMEOUT_S; a child that takes longer is stopped and counts as failed."""
    command = [sys.executable, "-m", "cdcreplay_lab.class_archive", *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else expired.stderr
        return subprocess.CompletedProcess(command, -1, "", f"{stderr or ''}\nstopped after {CHILD_TIMEOUT_S} s")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--write"]:
        write_archive(Path(args[1]))
        return 0
    if args[:1] == ["--check"]:
        return 0 if maps_archive(Path(args[1])) else 1
    archive = class_archive(jars_dir())
    facts_file = archive.with_suffix(".json")
    facts = made_from()
    if archive.is_file() and facts_file.is_file() and json.loads(facts_file.read_text(encoding="utf-8")) == facts:
        print(f"class archive: {archive} is up to date")
        return 0
    archive.unlink(missing_ok=True)
    facts_file.unlink(missing_ok=True)
    partial = archive.with_suffix(".part")
    partial.unlink(missing_ok=True)
    written = _in_child("--write", str(partial))
    if written.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        print(f"class archive: not written, drivers start without one:\n{written.stderr[-3000:]}", file=sys.stderr)
        return 0  # the archive only saves start-up time
    partial.replace(archive)
    checked = _in_child("--check", str(archive))
    if checked.returncode != 0:
        archive.unlink(missing_ok=True)
        print(f"class archive: a new driver did not map it, removed:\n{checked.stderr[-3000:]}", file=sys.stderr)
        return 0
    facts_file.write_text(json.dumps(facts, indent=1, sort_keys=True), encoding="utf-8")
    print(f"class archive: {archive} ({archive.stat().st_size // 2**20} MB), mapped by a new driver")
    return 0


if __name__ == "__main__":
    sys.exit(main())
