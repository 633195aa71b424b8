"""spark-submit entry point: replay, decode, compact and publish every pipeline of a run spec.

spark-submit jobs/replay.py --run-spec '<json from cdcreplay.run_spec.build_run_spec>'
spark-submit jobs/replay.py --config config/pipelines.yaml --run-id manual_1 [--start ... --end ...]
"""

from cdcreplay.entrypoints import replay_main

if __name__ == "__main__":
    raise SystemExit(replay_main())
