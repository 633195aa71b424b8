"""HTML of the reconciliation view: Jinja templates (autoescaped) and the filters they use. No web framework here."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from cdcreplay.contracts import STATUS_MATCH
from cdcreplay_ui.runs_index import DEFAULT_DIFF_STATUSES, FAILING_STATUSES, STATUS_COLUMNS, STATUSES

TEMPLATES = Path(__file__).resolve().parent / "templates"
STATUS_LABELS = dict(STATUS_COLUMNS)
LONG_VALUE = 120


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "—"


def _number(value) -> str:
    return f"{int(value or 0):,}"


def _show_value(value) -> str:
    """A canonical text value as the diff stores it (a published row's typed value as JSON writes it); NULL shown as
    such, very long values cut."""
    if value is None:
        return "NULL"
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    return value if len(value) <= LONG_VALUE else value[:LONG_VALUE] + "…"


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _seconds_since(epoch_seconds: float | None) -> str:
    return "—" if epoch_seconds is None else f"{max(0, time.time() - float(epoch_seconds)):.0f}"


def explain_query(table_id: str, key: str) -> str:
    """The query string of a key's story page (the diff's key text as it is)."""
    return urlencode([("table", table_id), ("key", key)])


def differing_columns(story: dict) -> set[str]:
    """The columns any reconciliation of the story found different: the page marks them wherever they show."""
    return {d["column"] for row in story.get("reconciliation") or () for d in row.get("differing_columns") or ()}


def diff_query(statuses, table_id: str | None) -> str:
    """The query string of a diff page (repeatable ``status``, optional ``table``)."""
    pairs = [("status", s) for s in statuses]
    if table_id:
        pairs.append(("table", table_id))
    return urlencode(pairs)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=_when,
        number=_number,
        show_value=_show_value,
        status_label=lambda status: STATUS_LABELS.get(status, status),
        urlquote=lambda text: quote(str(text), safe=""),
        urlpath=lambda text: quote(str(text), safe="/"),
        compact=_compact,
        seconds_since=_seconds_since,
    )
    env.globals.update(
        status_columns=STATUS_COLUMNS,
        failing=FAILING_STATUSES,
        default_statuses=tuple(DEFAULT_DIFF_STATUSES),
        all_statuses=STATUSES,
        query=diff_query,
        explain_query=explain_query,
        differing_columns=differing_columns,
        matched=STATUS_MATCH,
    )
    return env


ENVIRONMENT = _environment()


def render(template: str, **context) -> str:
    return ENVIRONMENT.get_template(template).render(**context)
