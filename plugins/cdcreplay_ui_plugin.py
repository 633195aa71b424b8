"""Airflow plugin: the reconciliation view of cdcreplay, an entry "Reconciliation" in the UI's Browse menu.

It mounts the FastAPI app of ``cdcreplay_ui`` at ``/cdcreplay`` on the api-server (runs per pipeline and table
with verdicts and counts, the run reports, diff rows, Data Docs and manifests) and shows it inside the Airflow UI
at ``/plugin/reconciliation``. The ``reconcile`` task's "Reconciliation report" button (an extra link the DAG
declares) opens ``/cdcreplay/dag-runs/<run id>/``.
"""

from __future__ import annotations

from typing import ClassVar

from airflow.plugins_manager import AirflowPlugin
from cdcreplay_ui.app import create_app


class CdcReplayReconciliationView(AirflowPlugin):
    name = "cdcreplay_reconciliation_view"
    fastapi_apps: ClassVar[list[dict]] = [
        {"app": create_app(), "url_prefix": "/cdcreplay", "name": "cdcreplay reconciliation view"}
    ]
    # Relative href: the UI resolves it against its base URL and shows the page in an iframe under url_route.
    external_views: ClassVar[list[dict]] = [
        {
            "name": "Reconciliation",
            "href": "cdcreplay/",
            "url_route": "reconciliation",
            "destination": "nav",
            "category": "browse",
        }
    ]
