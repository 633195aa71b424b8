"""The HTTP layer of the reconciliation view: a FastAPI app the plugin mounts at /cdcreplay on Airflow's api-server.

Thin: every route reads through ``runs_index.Warehouse`` and renders with ``pages``. Airflow does not authenticate
plugin apps, so every route here does: the caller must be logged in to Airflow (its JWT in the ``_token`` cookie the
UI uses, or an ``Authorization: Bearer`` header) and allowed to read the runs of the ``cdc_replay_nightly`` DAG. A
browser that is not logged in is sent to Airflow's login page and back.

All links in the pages are relative, so the view works under any ``[api] base_url`` and inside the UI's iframe.
The view never starts Spark in its own process: a key's story (``cdcreplay explain``) runs as a subprocess whose JSON
is cached in the run folder (``stories``). Only a POST starts it; every GET only reads.
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, FastAPI, Form, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response

from cdcreplay.config import ConfigError
from cdcreplay.storage import Location
from cdcreplay_ui import pages, stories
from cdcreplay_ui.runs_index import DEFAULT_DIFF_STATUSES, RUN_FILES, NotFound, Refused, RunInfo, Warehouse

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "cdc_replay_nightly"
RECENT_RUNS = 10
SAMPLE_ROWS = 20
_HTML = {"response_class": HTMLResponse}
# A story's page answers 202 while it is being worked out and 500 when that failed; not asked for yet is a page too.
STORY_STATUS = {stories.READY: 200, stories.PENDING: 202, stories.FAILED: 500, stories.NOT_ASKED: 200}


def config_path() -> str:
    """The pipelines file, found as the DAG finds it: $CDCREPLAY_CONFIG, else <repo>/config/pipelines.yaml."""
    return os.environ.get("CDCREPLAY_CONFIG") or str(REPO / "config" / "pipelines.yaml")


def open_warehouse() -> tuple[Warehouse, str]:
    """The configured warehouse, read again on every request (a config change shows without a restart)."""
    from cdcreplay.config import load_config

    config = load_config(config_path())
    return Warehouse.from_config(config), str(config.path)


def _relative_root(request: Request) -> str:
    """The relative path from the requested page back to the app's root ("./", "../../../", ...)."""
    path, mount = request.url.path, request.scope.get("root_path", "")
    inner = path[len(mount) :] if mount and path.startswith(mount) else path
    depth = max(inner.count("/") - 1, 0)
    return "../" * depth or "./"


def file_response(target: Location, media_type: str) -> Response:
    """A run's file: streamed from a local disk as before; an S3 object is read whole (reports and Data Docs pages
    are small) and sent as bytes with the same content type."""
    if target.is_local:
        return FileResponse(str(target), media_type=media_type)
    return Response(target.read_bytes(), media_type=media_type)


async def require_reader(request: Request) -> None:
    """Airflow's own user resolution (cookie or bearer token), then: may this user read the DAG's runs?"""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials

    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    bearer = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if scheme and token else None
    user = await get_user(request, None, bearer)
    allowed = get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.RUN, details=DagDetails(id=DAG_ID), user=user
    )
    if not allowed:
        raise HTTPException(403, f"user {user.get_name()!r} may not read the runs of the DAG {DAG_ID}")


def _after_login(request: Request) -> str:
    """Where a browser that was not logged in goes back to from Airflow's login page: the page it asked for; after a
    POST (a key's story asked for), whose form no redirect carries, the page of this view it was sent from, else the
    run's page."""
    if request.method == "GET":
        return str(request.url)
    view_root, _, run_path = request.url.path.partition("/runs/")
    referer = urlsplit(request.headers.get("referer", ""))
    if referer.netloc == request.url.netloc and referer.path.startswith(f"{view_root}/"):
        return referer.geturl()
    return str(request.url.replace(path=f"{view_root}/runs/{run_path.rsplit('/', 1)[0]}/", query=""))


def _story_request(
    pipeline: str, run_id: str, table: str | None, key: str | None
) -> tuple[Warehouse, RunInfo, stories.StoryKey]:
    """The checks a key's story passes before anything is read or started, for the page and for the request alike:
    NotFound (404) for an unknown run or table, Refused (400) for a key that does not parse."""
    warehouse, _ = open_warehouse()
    run = warehouse.run(pipeline, run_id)
    return warehouse, run, stories.story_key(warehouse, pipeline, run_id, table, key)


def create_app() -> FastAPI:
    app = FastAPI(title="cdcreplay reconciliation view", docs_url=None, redoc_url=None, openapi_url=None)

    def error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
        body = pages.render("error.html", title=title, message=message, root=_relative_root(request))
        return HTMLResponse(body, status_code=status)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound):
        return error_page(request, 404, "Not found", str(exc))

    @app.exception_handler(Refused)
    async def _refused(request: Request, exc: Refused):
        return error_page(request, 400, "Refused", str(exc))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        if exc.status_code == 401:
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=_after_login(request)), status_code=303)
        return error_page(request, exc.status_code, "Not allowed" if exc.status_code == 403 else "Error", exc.detail)

    @app.exception_handler(ConfigError)
    async def _config(request: Request, exc: ConfigError):
        return error_page(request, 500, "The pipelines config cannot be read", str(exc))

    router = APIRouter(dependencies=[Depends(require_reader)])

    @router.get("/", **_HTML)
    def index(request: Request):
        warehouse, path = open_warehouse()
        listing = [(name, fmt, warehouse.recent_runs(name, RECENT_RUNS)) for name, fmt in warehouse.pipelines.items()]
        return pages.render("index.html", pipelines=listing, warehouse=warehouse.root, config_path=path)

    @router.get("/runs/{pipeline}/{run_id}/", **_HTML)
    def run_page(request: Request, pipeline: str, run_id: str):
        warehouse, _ = open_warehouse()
        run = warehouse.run(pipeline, run_id)
        sample = warehouse.diff(pipeline, run_id, limit=SAMPLE_ROWS) if "diff" in run.files else None
        suite = warehouse.suite(pipeline, run_id)
        return pages.render("run.html", run=run, sample=sample, suite=suite, root=_relative_root(request))

    @router.get("/runs/{pipeline}/{run_id}/diff", **_HTML)
    def diff_page(
        request: Request,
        pipeline: str,
        run_id: str,
        status: Annotated[list[str] | None, Query()] = None,
        table: str | None = None,
        limit: int = 200,
    ):
        warehouse, _ = open_warehouse()
        run = warehouse.run(pipeline, run_id)
        page = warehouse.diff(pipeline, run_id, tuple(status or DEFAULT_DIFF_STATUSES), table or None, limit)
        return pages.render("diff.html", run=run, page=page, limit=limit, root=_relative_root(request))

    @router.get("/runs/{pipeline}/{run_id}/explain", **_HTML)
    def explain_page(request: Request, pipeline: str, run_id: str, table: str | None = None, key: str | None = None):
        """A key's story (``cdcreplay explain``) as far as it got: cached, being worked out (the page refreshes
        itself), failed, or not asked for yet (a button asks). A GET starts nothing (see ``stories``)."""
        warehouse, run, asked = _story_request(pipeline, run_id, table, key)
        state = stories.story_state(warehouse, asked)
        body = pages.render(
            "explain.html",
            run=run,
            asked=asked,
            state=state,
            command=stories.shell_command(config_path(), asked),
            refresh=stories.REFRESH_SECONDS if state.status == stories.PENDING else None,
            root=_relative_root(request),
        )
        return HTMLResponse(body, status_code=STORY_STATUS[state.status])

    @router.post("/runs/{pipeline}/{run_id}/explain")
    def ask_for_explain(
        pipeline: str,
        run_id: str,
        table: Annotated[str | None, Form()] = None,
        key: Annotated[str | None, Form()] = None,
        retry: Annotated[str, Form()] = "",
    ):
        """Work out a key's story in the background, then send the browser to its page (Post/Redirect/Get: a reload
        of that page asks nothing again)."""
        warehouse, _, asked = _story_request(pipeline, run_id, table, key)
        stories.ask_for_story(warehouse, asked, config_path(), retry=bool(retry))
        return RedirectResponse(f"explain?{pages.explain_query(asked.table_id, asked.key_text)}", status_code=303)

    @router.get("/runs/{pipeline}/{run_id}/manifest.json")
    def manifest(pipeline: str, run_id: str):
        warehouse, _ = open_warehouse()
        return file_response(warehouse.run_file(pipeline, run_id, RUN_FILES["manifest"]), "application/json")

    @router.get("/runs/{pipeline}/{run_id}/report.md")
    def report(pipeline: str, run_id: str):
        warehouse, _ = open_warehouse()
        text = warehouse.run_file(pipeline, run_id, RUN_FILES["report"]).read_text(encoding="utf-8")
        return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")

    @router.get("/runs/{pipeline}/{run_id}/data_docs/{path:path}")
    def data_docs(pipeline: str, run_id: str, path: str) -> Response:
        warehouse, _ = open_warehouse()
        target = warehouse.run_file(pipeline, run_id, f"reconcile/data_docs/{path}" if path else "")
        media_type = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return file_response(target, media_type)

    @router.get("/dag-runs/{dag_run_id}/", **_HTML)
    def dag_run(request: Request, dag_run_id: str):
        """Where the reconcile task's extra link points: every pipeline's run of one Airflow DAG run."""
        from cdcreplay.run_spec import safe_run_id

        warehouse, _ = open_warehouse()
        try:
            folder = safe_run_id(dag_run_id)
        except ConfigError as exc:
            raise NotFound(str(exc)) from exc
        runs = warehouse.runs_of_airflow_run(dag_run_id)
        return pages.render(
            "dag_run.html", runs=runs, dag_run_id=dag_run_id, dag_id=DAG_ID, folder=folder, root=_relative_root(request)
        )

    app.include_router(router)
    return app
