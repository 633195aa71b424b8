"""`cdcreplay explain`: the whole story of one key -- every archived event of it in compaction order, the one that
won and why, the snapshot reads and their epochs, the reconciliation's verdict on it and the changes the archive
lost, quarantined records naming it, its tombstone, and its published row with provenance.

``request`` checks the arguments without Spark; ``gather`` reads the warehouse; ``analysis`` works out the story
from the key's few rows; ``story`` is the data (``--json``), ``render`` the words.

Only ``gather`` needs Spark, and it is loaded when first used (``explain_key``, ``main``): the reconciliation view
imports ``request`` and ``story`` in Airflow's api-server, which must not load pyspark.
"""

from __future__ import annotations

import argparse
import json
import sys

from cdcreplay.explain.render import render_explanation
from cdcreplay.explain.request import ExplainRequest, resolve_request
from cdcreplay.explain.story import EXPLAIN_FORMAT, Explanation

__all__ = ["EXPLAIN_FORMAT", "ExplainRequest", "Explanation", "explain_key", "main", "render_explanation"]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdcreplay explain", description="The whole story of one key: events, winner, snapshots, quarantine."
    )
    parser.add_argument("--config", required=True, help="pipelines file")
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--table", required=True, help="table id, e.g. shop.orders")
    parser.add_argument("--key", required=True, help="the key as a JSON object of its columns, e.g. '{\"id\": 42}'")
    parser.add_argument("--run-id", help="tell the story as of this run (default: the published run)")
    parser.add_argument("--json", action="store_true", help="print the story as JSON (see docs/how-it-works.md)")
    return parser


def main(argv: list[str], out=None) -> int:
    """Check the arguments (ConfigError, before any Spark work), gather the story, print it to ``out`` (standard
    output by default); 0."""
    from cdcreplay.explain.gather import explain_key
    from cdcreplay.spark import build_session

    out = out or sys.stdout
    args = parser().parse_args(argv)
    request = resolve_request(args.config, args.pipeline, args.table, args.key, args.run_id)
    spark = build_session(f"cdcreplay-explain-{request.pipeline.name}")
    story = explain_key(spark, request)
    if args.json:
        out.write(json.dumps(story.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(render_explanation(story) + "\n")
    return 0


def __getattr__(name: str):
    """``explain_key`` is gather's, loaded with pyspark on first use."""
    if name == "explain_key":
        from cdcreplay.explain.gather import explain_key

        return explain_key
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
