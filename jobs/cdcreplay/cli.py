"""`cdcreplay` command: small tools around the Spark jobs.

cdcreplay validate   --config FILE                       check the pipelines file, print what it declares
cdcreplay run        --config FILE [run options]         replay + reconcile in this process (no Airflow)
cdcreplay show-table --config FILE --pipeline P --table T [--limit N]   published rows as JSON lines
cdcreplay report     --config FILE [--run-id ID]         the summary of a run (default: the latest)
cdcreplay explain    --config FILE --pipeline P --table T --key '{"id": 42}' [--run-id ID] [--json]
                                                          one key's whole story: events, winner, snapshots, quarantine
cdcreplay archive    --config FILE --pipeline P [--end T]  copy a Kafka pipeline's topics into archive.copy_to
cdcreplay simulate   ...                                  write a simulated archive (see --help)
cdcreplay demo       [--events N] [--drift N]             the quick start: simulate, run the DAG in Airflow, check
cdcreplay benchmark  ...                                  events/s per format (see --help)
cdcreplay package    [--out FILE]                         zip of the cdcreplay package for spark-submit --py-files
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cdcreplay.config import ConfigError, load_config


def _json_default(value):
    if isinstance(value, bytes | bytearray):
        import base64

        return base64.b64encode(value).decode("ascii")
    return str(value)


def show_table(config_path: str, pipeline: str, table_id: str, limit: int | None, out=sys.stdout) -> int:
    """Print a published table's rows as JSON lines, columns in table order, rows sorted by key."""
    from cdcreplay.warehouse import PipelinePaths, published_rows, read_current

    config = load_config(config_path)
    config.project.pipeline(pipeline)
    paths = PipelinePaths(config.warehouse, pipeline)
    rows = published_rows(paths, table_id).to_pylist()
    key_columns = read_current(paths)["tables"][table_id].get("key_columns", [])
    rows.sort(key=lambda row: tuple((row[c] is None, row[c]) for c in key_columns))
    for row in rows[:limit] if limit else rows:
        out.write(json.dumps(row, default=_json_default, ensure_ascii=False) + "\n")
    return 0


# Where `cdcreplay package` writes by default; the DAG ships it when CDCREPLAY_PY_FILES names it.
DEFAULT_PACKAGE = Path(__file__).resolve().parents[2] / "var" / "dist" / "cdcreplay-jobs.zip"


def build_package(out: Path) -> int:
    """Zip the cdcreplay package (its .py files) for spark-submit --py-files; return the number of modules. The lab
    (``cdcreplay_lab``: simulator, benchmarks, demo) is a package of its own and stays out: the jobs never import it.

    The executors import the jobs' code from this file, so it must be rebuilt whenever jobs/cdcreplay changes.
    Entries are sorted and carry a fixed timestamp (the same code gives the same bytes), and the file is replaced in
    one step, so a submission running meanwhile reads the old archive or the new one, never half of one.
    """
    import os
    import tempfile
    import zipfile

    package = Path(__file__).resolve().parent
    modules = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(handle)
    try:
        with zipfile.ZipFile(temp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for module in modules:
                entry = zipfile.ZipInfo(str(module.relative_to(package.parent)), date_time=(1980, 1, 1, 0, 0, 0))
                entry.compress_type = zipfile.ZIP_DEFLATED
                entry.external_attr = 0o644 << 16
                archive.writestr(entry, module.read_bytes())
        os.chmod(temp, 0o644)
        os.replace(temp, out)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return len(modules)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    try:
        if command == "simulate":
            from cdcreplay_lab.simulator.cli import main as simulate_main

            return simulate_main(rest)
        if command == "demo":
            from cdcreplay_lab.demo import main as demo_main

            return demo_main(rest)
        if command == "benchmark":
            from cdcreplay_lab.benchmark import main as benchmark_main

            return benchmark_main(rest)
        if command == "package":
            parser = argparse.ArgumentParser(
                prog="cdcreplay package",
                description="Zip the cdcreplay package for spark-submit --py-files; rebuild it when jobs/ changes.",
            )
            parser.add_argument("--out", type=Path, default=DEFAULT_PACKAGE, help=f"default {DEFAULT_PACKAGE}")
            out = parser.parse_args(rest).out.resolve()
            print(f"{out}: {build_package(out)} modules of cdcreplay; ship it with CDCREPLAY_PY_FILES={out}")
            return 0
        if command == "explain":
            from cdcreplay.explain import main as explain_main

            return explain_main(rest)
        if command == "archive":
            from cdcreplay.entrypoints import archive_main

            return archive_main(rest)
        if command == "run":
            from cdcreplay.entrypoints import reconcile_main, replay_main

            code = replay_main(rest)
            return code if code else reconcile_main(rest)
        parser = argparse.ArgumentParser(prog=f"cdcreplay {command}")
        parser.add_argument("--config", required=True)
        if command == "validate":
            from cdcreplay.formats import check_config

            config = load_config(parser.parse_args(rest).config)
            for p in config.project.pipelines:
                check_config(p)  # what only the format knows: declared keys, writer schemas, zones
                print(f"{p.name}: {p.format} from {config.archive_path(p)} ({p.archive.layout})")
            print(f"warehouse: {config.warehouse}")
            return 0
        if command == "show-table":
            parser.add_argument("--pipeline", required=True)
            parser.add_argument("--table", required=True)
            parser.add_argument("--limit", type=int)
            args = parser.parse_args(rest)
            return show_table(args.config, args.pipeline, args.table, args.limit)
        if command == "report":
            parser.add_argument("--run-id")
            args = parser.parse_args(rest)
            from cdcreplay.report import render_runs

            print(render_runs(args.config, args.run_id))
            return 0
    except (ConfigError, FileNotFoundError, KeyError) as exc:
        print(f"cdcreplay {command}: {exc}", file=sys.stderr)
        return 2
    print(f"cdcreplay: unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
