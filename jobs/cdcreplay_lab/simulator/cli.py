"""Command line: simulate a history, write it as an archive in one format, optionally write the true final state.

python -m cdcreplay_lab.simulator --format debezium-json --events 2000 --seed 7 --out var/archive --truth truth.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from cdcreplay_lab.simulator.archive_writer import LAYOUTS, build_sample_archive
from cdcreplay_lab.simulator.encoders import FORMATS
from cdcreplay_lab.simulator.truth import write_truth


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cdcreplay-simulate",
        description="Write a simulated CDC archive (Spark Kafka-source columns) whose true final state is known.",
    )
    parser.add_argument("--format", required=True, choices=FORMATS, help="change format to encode")
    parser.add_argument("--events", type=int, default=2000, help="row events in the history (default 2000)")
    parser.add_argument("--seed", type=int, default=7, help="random seed; the same seed gives the same archive")
    parser.add_argument("--out", required=True, type=Path, help="archive folder (topic=<topic>/part-NNNNN.*)")
    parser.add_argument("--layout", choices=LAYOUTS, default="parquet", help="archive layout (default parquet)")
    parser.add_argument("--no-schemas", action="store_true", help="debezium-json: JsonConverter schemas.enable=false")
    parser.add_argument("--drift", type=int, default=0, help="resync snapshot rows that disagree with the stream")
    parser.add_argument("--days", type=int, default=3, help="days the streaming changes span (default 3)")
    parser.add_argument("--rows-per-file", type=int, default=200_000, help="records per archive file")
    parser.add_argument("--truth", type=Path, help="also write the true final state here as JSON lines")
    args = parser.parse_args(argv)
    if args.events < 30:
        parser.error("--events must be at least 30")
    if args.drift < 0:
        parser.error("--drift must be 0 or more")
    if args.no_schemas and args.format != "debezium-json":
        parser.error("--no-schemas applies to --format debezium-json only")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    history = build_sample_archive(
        args.out,
        args.format,
        events=args.events,
        seed=args.seed,
        layout=args.layout,
        schemas=not args.no_schemas,
        drift=args.drift,
        rows_per_file=args.rows_per_file,
        days=args.days,
    )
    archive = history.archive or {}
    truth = ""
    if args.truth:
        rows = write_truth(history, args.truth)
        truth = f"; truth: {rows} rows in {args.truth}"
    print(
        f"{args.format} {args.layout}: {history.event_count} events -> {archive.get('records', 0)} records in "
        f"{len(archive.get('files', []))} files under {args.out} ({time.perf_counter() - began:.1f}s){truth}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
