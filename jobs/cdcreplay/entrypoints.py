"""The Spark jobs' command lines: parse arguments, validate, run, print a summary, exit with a meaningful code.

Exit codes: 0 done; 1 the reconciliation verdict is "fail"; 2 a configuration, parameter or archive problem (the
message names the field and the fix); 3 any other failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from cdcreplay.config import ConfigError, load_config
from cdcreplay.contracts import VERDICT_FAIL, VERDICT_SKIPPED, ReconciliationResult
from cdcreplay.run_spec import RunSpec, archived_pipelines, build_run_spec

EXIT_OK, EXIT_VERDICT_FAIL, EXIT_BAD_INPUT, EXIT_ERROR = 0, 1, 2, 3


def _parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--run-spec", help="the whole run as JSON (what the Airflow DAG passes)")
    parser.add_argument("--config", help="pipelines file (when not using --run-spec)")
    parser.add_argument("--run-id", default="manual", help="names the run's folder under runs/")
    parser.add_argument("--pipelines", default="", help="comma-separated pipeline names (default: all)")
    parser.add_argument("--tables", default="", help="comma-separated table ids (default: all)")
    parser.add_argument("--start", help="ISO-8601 UTC, inclusive")
    parser.add_argument("--end", help="ISO-8601 UTC, exclusive")
    parser.add_argument("--offsets", help='JSON: {"topic": {"0": {"start": 0, "until": 100}}}')
    parser.add_argument("--dry-run", action="store_true", help="list what would be read; decode nothing")
    parser.add_argument("--full-rebuild", action="store_true", help="ignore the published state and rebuild")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="Kafka pipelines: go on from the offsets the published state has read up to (start/end bound only the "
        "first such run)",
    )
    return parser


def parse_spec(argv: list[str] | None, description: str) -> RunSpec:
    args = _parser(description).parse_args(argv)
    if args.run_spec:
        return RunSpec.from_json(args.run_spec)
    if not args.config:
        raise ConfigError("give --run-spec '<json>' or --config <pipelines file>")
    return build_run_spec(
        load_config(args.config),
        run_id=args.run_id,
        pipelines=args.pipelines,
        tables=args.tables,
        start=args.start,
        end=args.end,
        offsets=args.offsets,
        dry_run=args.dry_run,
        full_rebuild=args.full_rebuild,
        resume=args.resume,
    )


def _guarded(body) -> int:
    from cdcreplay.archive import ArchiveError
    from cdcreplay.pipeline import AccountingError, QualityGateError
    from cdcreplay.warehouse import PipelineBusyError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return body()
    except (ConfigError, ArchiveError) as exc:
        print(f"cdcreplay: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (QualityGateError, AccountingError, PipelineBusyError) as exc:
        # The run refused to publish what it built; the message says why and what stays published.
        print(f"cdcreplay: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception:  # anything else is a failure of the run, kept apart from a failed verdict (exit 1)
        logging.getLogger("cdcreplay").exception("run failed")
        return EXIT_ERROR


def replay_main(argv: list[str] | None = None) -> int:
    def body() -> int:
        spec = parse_spec(argv, "Replay archived CDC topics into latest-state tables.")
        config = load_config(spec.config)
        from cdcreplay.pipeline import run
        from cdcreplay.report import render_replay
        from cdcreplay.spark import build_session

        spark = build_session(f"cdcreplay-replay-{spec.run_id}")
        summaries = run(spark, config, spec)
        print(render_replay(summaries))
        return EXIT_OK

    return _guarded(body)


def reconcile_main(argv: list[str] | None = None) -> int:
    def body() -> int:
        spec = parse_spec(argv, "Reconcile snapshot epochs against the incremental state.")
        config = load_config(spec.config)
        from cdcreplay.progress import watch_spark
        from cdcreplay.report import render_reconciliation
        from cdcreplay.spark import build_session

        if spec.dry_run:
            print("dry run: nothing was decoded, so there is nothing to reconcile")
            return EXIT_OK
        spark = build_session(f"cdcreplay-reconcile-{spec.run_id}")
        watch_spark(spark)  # the reconcile task's log shows the Spark stages it is waiting on
        results = reconcile_pipelines(spark, config, spec)
        print(render_reconciliation(results))
        return EXIT_VERDICT_FAIL if any(r.verdict == VERDICT_FAIL for r in results) else EXIT_OK

    return _guarded(body)


def archive_main(argv: list[str] | None = None) -> int:
    """`cdcreplay archive` and the DAG's archive task: copy Kafka pipelines' topics into their ``archive.copy_to``
    (cdcreplay.archiver). ``--config --pipeline`` archives one pipeline; ``--run-spec`` every pipeline of the run
    that has a ``copy_to`` (none: nothing to do, and Spark is not started)."""

    def body() -> int:
        parser = argparse.ArgumentParser(
            prog="cdcreplay archive",
            description="Copy a Kafka pipeline's topics from the brokers into a Parquet archive (archive.copy_to), "
            "going on from what it already holds.",
        )
        parser.add_argument("--run-spec", help="the whole run as JSON (what the Airflow DAG passes)")
        parser.add_argument("--config", help="pipelines file (with --pipeline)")
        parser.add_argument("--pipeline", help="a pipeline with archive.layout kafka and copy_to")
        parser.add_argument("--start", help="ISO-8601 UTC: where an empty archive starts (default: the log's start)")
        parser.add_argument("--end", help="ISO-8601 UTC, exclusive: archive records before it (default: all)")
        parser.add_argument(
            "--offsets", help='JSON, where an empty archive starts: {"topic": {"0": {"start": 0, ...}}}'
        )
        args = parser.parse_args(argv)
        if args.run_spec:
            spec = RunSpec.from_json(args.run_spec)
            config = load_config(spec.config)
            pipelines = archived_pipelines(config, spec)
            if spec.dry_run or not pipelines:
                print("dry run: nothing archived" if spec.dry_run else "no pipeline of this run archives its topics")
                return EXIT_OK
        elif args.config and args.pipeline:
            config = load_config(args.config)
            spec = build_run_spec(
                config, run_id="archive", pipelines=[args.pipeline], start=args.start, end=args.end,
                offsets=args.offsets,
            )  # fmt: skip
            pipelines = [config.project.pipeline(args.pipeline)]
        else:
            raise ConfigError("give --config <pipelines file> --pipeline <name>, or --run-spec '<json>'")
        from cdcreplay.archiver import archive_target, archive_topics, render_archive
        from cdcreplay.spark import build_session

        for pipeline in pipelines:
            archive_target(config, pipeline)  # a pipeline that cannot be archived fails before Spark starts
        spark = build_session(f"cdcreplay-archive-{spec.run_id if args.run_spec else pipelines[0].name}")
        for pipeline in pipelines:
            print(render_archive(archive_topics(spark, config, pipeline, spec)))
        return EXIT_OK

    return _guarded(body)


def reconcile_pipelines(spark, config, spec: RunSpec) -> list[ReconciliationResult]:
    """Reconcile each pipeline of the run; the result is also stored in the run's summary.json."""
    from cdcreplay.pipeline import load_summary, save_summary, summary_path
    from cdcreplay.reconcile import run_reconciliation
    from cdcreplay.storage import Location

    results = []
    names = spec.pipelines or tuple(p.name for p in config.project.pipelines)
    for name in names:
        summary = load_summary(config, name, spec.run_id)
        if summary is None:
            raise ConfigError(f"pipeline {name}: run {spec.run_id} has no summary; run the replay job first")
        changelog = summary.changelog_path
        if not changelog or not Location(changelog).is_dir():
            if (summary.decoded or {}).get("changelog_rows"):
                raise ConfigError(
                    f"pipeline {name}: run {spec.run_id} decoded {summary.decoded['changelog_rows']} row changes, "
                    f"but its changelog {changelog} is gone (the project's keep_decoded_runs removes older runs' "
                    "changelogs); reconcile a newer run, or replay this run's range again and reconcile that run"
                )
            result = ReconciliationResult(VERDICT_SKIPPED, pipeline=name, reason="no changes in this run")
        else:
            run_dir = summary_path(config, name, spec.run_id).parent
            result = run_reconciliation(spark, run_dir, changelog, summary.base_state, pipeline=name)
        summary.reconciliation = result
        save_summary(config, summary)
        results.append(result)
    return results


def print_json(document) -> None:
    print(json.dumps(document, indent=2, sort_keys=True, default=str))
