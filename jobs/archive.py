"""spark-submit entry point: copy the Kafka pipelines of a run spec into their archives (``archive.copy_to``).

spark-submit jobs/archive.py --run-spec '<json from cdcreplay.run_spec.build_run_spec>'
spark-submit jobs/archive.py --config config/pipelines.yaml --pipeline P [--start ... --end ...]
"""

from cdcreplay.entrypoints import archive_main

if __name__ == "__main__":
    raise SystemExit(archive_main())
