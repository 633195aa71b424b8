"""The lab: what makes archives, measures and demonstrates the jobs, but never runs in them.

- ``simulator``: deterministic source histories, each vendor's encoder, the true final state (the tests' oracle);
- ``benchmark`` (with ``benchmark_keyed``, ``benchmark_reconcile``, ``benchmark_reference``): ``cdcreplay benchmark``;
- ``demo`` and ``airflow_env``: the quick start, run through an embedded Airflow.

It imports ``cdcreplay``; ``cdcreplay`` imports it only from the ``simulate``, ``demo`` and ``benchmark`` commands, so
the package the cluster receives (``cdcreplay package``) leaves it out.
"""
