"""The reconciliation view of cdcreplay in the Airflow UI (mounted by ``plugins/cdcreplay_ui_plugin.py``).

- ``runs_index``: reads runs, verdicts, counts and files from the warehouse (no web framework, testable alone);
- ``pages``: the HTML (Jinja templates under ``templates/``);
- ``app``: the FastAPI routes, authenticated with Airflow's auth manager.
"""
