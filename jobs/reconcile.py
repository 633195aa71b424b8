"""spark-submit entry point: reconcile snapshot epochs of a run against the incremental state; exit 1 on "fail".

spark-submit jobs/reconcile.py --run-spec '<json from cdcreplay.run_spec.build_run_spec>'
"""

from cdcreplay.entrypoints import reconcile_main

if __name__ == "__main__":
    raise SystemExit(reconcile_main())
