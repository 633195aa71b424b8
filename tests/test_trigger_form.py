"""A manual run from the Airflow UI's trigger form, done as a person does it, in headless Debian Chromium.

The test starts a real api-server, scheduler and dag-processor (LocalExecutor on SQLite, see stack_settings) on
127.0.0.1 over two small simulated archives, logs in, opens the DAG's Trigger form and checks what a person sees:
every parameter with its title and help text, the defaults, the date-time pickers, the offsets editor and the two
switches. Then it fills the form in and presses Trigger, and follows each run through the REST API to its end:

- a date range picked in a browser whose time zone is Asia/Kolkata (UTC+05:30, so a time-zone slip shows) and one
  pipeline: the run's stored conf is what was picked, in UTC; only that pipeline is replayed, over that range; the
  reconciliation view lists the run;
- offsets pasted into the JSON editor with both switches on: a dry run that reads exactly those offsets;
- an end before the start, and a table the pipeline does not have: the form cannot compare two fields or know the
  tables, so the run is created and validate_run refuses it, naming the parameter and the fix, before any Spark job;
  the test reads the message where a person does, in the task's log.

Screenshots: var/screenshots/trigger-form.png (the filled-in form) and trigger-refused.png (the refusal).
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from airflow_helpers import (
    EVENTS,
    HISTORY_DAYS,
    HISTORY_START,
    PIPELINES,
    SEED,
    AirflowStack,
    airflow,
    archive_window,
    free_local_port,
    stack_settings,
    write_config,
)
from airflow_ui import SCREENSHOTS, logged_in_page, ui_env

from cdcreplay_lab.airflow_env import DAG_ID

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1800)]

CHOSEN, OTHER = "demo_canal", "demo_debezium"
# UTC+05:30: a picker that sent local time as UTC, or dropped the offset, would be off by hours and half an hour.
TIME_ZONE = "Asia/Kolkata"
# What a person picks (local date and time in TIME_ZONE) and the UTC instant the run must get: the first simulated
# day, so the second day's records are in the archive but outside the range.
PICKED_START, PICKED_END = ("2026/01/01", "05:30"), ("2026/01/02", "05:30")
START_UTC, END_UTC = "2026-01-01T00:00:00.000Z", "2026-01-02T00:00:00.000Z"
PARAM_TITLES = [
    "Pipelines config",
    "Pipelines",
    "Tables",
    "Start (inclusive)",
    "End (exclusive)",
    "Offset ranges",
    "Dry run",
    "Full rebuild",
]
FORM_SCREENSHOT = SCREENSHOTS / "trigger-form.png"
REFUSED_SCREENSHOT = SCREENSHOTS / "trigger-refused.png"


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """Archives of both demo pipelines, and Airflow serving and running the DAG."""
    from cdcreplay_lab.simulator import build_sample_archive

    root = tmp_path_factory.mktemp("trigger_form")
    for name, fmt in PIPELINES.items():
        build_sample_archive(
            root / "archive" / name, fmt, events=EVENTS, seed=SEED, start=HISTORY_START, days=HISTORY_DAYS
        )
    config = write_config(root / "pipelines.yaml", root / "warehouse", root / "archive")
    port, password = free_local_port(), secrets.token_urlsafe(12)
    env = ui_env(root / "home", config, password, **stack_settings(port))
    airflow(env, "dags", "reserialize")  # parse now, so the DAG exists before the dag-processor's first pass
    airflow(env, "dags", "unpause", DAG_ID)  # a paused DAG's triggered runs would wait forever
    stack = AirflowStack(env, root / "logs")
    try:
        stack.start()
        stack.wait_for_port(port)
        yield SimpleNamespace(
            url=f"http://127.0.0.1:{port}",
            password=password,
            config=config,
            archive=root / "archive",
            warehouse=root / "warehouse",
            stack=stack,
        )
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def page(ui):
    # Pasting into the offsets editor goes through the clipboard, as a person's paste does.
    with logged_in_page(
        ui.url,
        ui.password,
        f"/dags/{DAG_ID}",
        timezone_id=TIME_ZONE,
        permissions=["clipboard-read", "clipboard-write"],
    ) as page:
        yield page


# --- what a person does in the form --------------------------------------------------------------------------------


def open_trigger_form(ui, page):
    page.goto(f"{ui.url}/dags/{DAG_ID}")
    page.get_by_role("button", name="Trigger").first.click()
    # The modal itself: a date picker's popover is a "dialog" too, and stays in the page a moment after it closes.
    dialog = page.locator("[data-scope=dialog][data-part=content]")
    dialog.get_by_text("Run Parameters").wait_for()
    return dialog


def form_rows(dialog) -> dict:
    """The form's fields by the title a person reads in their label (without the required marker)."""
    rows = {}
    for row in dialog.locator("[data-scope=field][data-part=root]").all():
        label = row.locator("[data-part=label]").first
        rows[label.inner_text().removesuffix("*").strip()] = row
    return rows


def is_marked_required(row) -> bool:
    return row.locator("[data-part=label] .chakra-field__requiredIndicator").count() == 1


def help_text(row) -> str:
    return row.locator("[data-part=helper-text]").inner_text()


def pick(page, row, date: str, time_of_day: str) -> None:
    """The date-time picker: open it, type the date (YYYY/MM/DD) and the time (HH:mm) it asks for, close it."""
    row.get_by_test_id("datetime-input").click()
    picker = page.locator("[data-scope=popover][data-part=content][data-state=open]")
    picker.get_by_placeholder("YYYY/MM/DD").fill(date)
    picker.get_by_placeholder("HH:mm").fill(time_of_day)
    page.keyboard.press("Escape")
    picker.wait_for(state="detached")


def paste(page, editor, text: str, timeout: float = 10) -> str:
    """Replace what the JSON editor holds by pasting ``text``; what it shows then. Typed key by key, the form
    reformats the editor whenever the text so far happens to be valid JSON (which its auto-closed brackets make it),
    under the cursor."""
    page.evaluate("text => navigator.clipboard.writeText(text)", text)
    editor.locator(".view-lines").click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Control+V")
    deadline = time.monotonic() + timeout
    while (shown := editor_text(editor)) == "{}" and time.monotonic() < deadline:
        time.sleep(0.2)  # the editor shows a paste on its next render
    return shown


def editor_text(editor) -> str:
    return editor.locator(".view-lines").inner_text().replace("\xa0", " ")


def press_trigger(page, dialog) -> tuple[dict, dict]:
    """Press Trigger; what the form sent and the run the api-server created."""
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith(f"/dags/{DAG_ID}/dagRuns")) as r:
        dialog.get_by_role("button", name="Trigger").click()
    response = r.value
    assert response.status == 200, response.text()
    return response.request.post_data_json, response.json()


# --- what the run did, from the REST API (the browser's login) and the warehouse ------------------------------------


def api(ui, page, path: str) -> dict:
    response = page.request.get(f"{ui.url}/api/v2/dags/{DAG_ID}{path}")
    assert response.ok, (path, response.status, response.text())
    return response.json()


def wait_for_run(ui, page, run_id: str, timeout: float = 900) -> dict:
    """Poll until the run ends; the scheduler's log tail when it does not."""
    deadline = time.monotonic() + timeout
    run = {}
    while time.monotonic() < deadline:
        ui.stack.assert_alive()
        run = api(ui, page, f"/dagRuns/{quote(run_id, safe='')}")
        if run["state"] in ("success", "failed"):
            return run
        time.sleep(3)
    pytest.fail(f"run {run_id} did not end within {timeout} s; last seen {run}\n{ui.stack.log_tail('scheduler')}")


def task_states(ui, page, run_id: str) -> dict[str, str]:
    instances = api(ui, page, f"/dagRuns/{quote(run_id, safe='')}/taskInstances")["task_instances"]
    return {ti["task_id"]: ti["state"] for ti in instances}


def run_dir(ui, pipeline: str, run_id: str) -> Path:
    from cdcreplay.run_spec import safe_run_id

    return ui.warehouse / pipeline / "runs" / safe_run_id(run_id)


def published_tables(ui, pipeline: str) -> dict:
    return json.loads((ui.warehouse / pipeline / "_CURRENT.json").read_text(encoding="utf-8"))


def fill_range_and_pipeline(page, rows, start, end) -> None:
    """Pick ``start`` and ``end`` in the date fields and type the chosen pipeline, as a person fills the form."""
    pick(page, rows["Start (inclusive)"], *start)
    pick(page, rows["End (exclusive)"], *end)
    rows["Pipelines"].locator("textarea").fill(CHOSEN)


@pytest.fixture(scope="module")
def triggered(ui, page):
    """A date range picked in the form and one pipeline, triggered, and the run finished."""
    dialog = open_trigger_form(ui, page)
    rows = form_rows(dialog)
    fill_range_and_pipeline(page, rows, PICKED_START, PICKED_END)
    # The whole dialog in one picture: a viewport taller than the form, for the moment of the screenshot.
    page.set_viewport_size({"width": 1440, "height": 2400})
    FORM_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    dialog.screenshot(path=str(FORM_SCREENSHOT))
    page.set_viewport_size({"width": 1440, "height": 900})
    print(f"screenshot of the trigger form: {FORM_SCREENSHOT}")
    posted, run = press_trigger(page, dialog)
    page.wait_for_url(f"**/dags/{DAG_ID}/runs/**")  # the form hands over to the new run's page
    began = time.monotonic()
    finished = wait_for_run(ui, page, run["dag_run_id"])
    print(f"the run triggered from the form took {time.monotonic() - began:.1f} s")
    return SimpleNamespace(posted=posted["conf"], run=finished)


# --- the tests -----------------------------------------------------------------------------------------------------


def test_the_form_shows_every_parameter_with_its_title_help_and_default(ui, page):
    dialog = open_trigger_form(ui, page)
    rows = form_rows(dialog)
    assert [title for title in rows if title in PARAM_TITLES] == PARAM_TITLES
    # Each field's help is the DAG's own description of the parameter, as the api-server serves it.
    declared = api(ui, page, "/details")["params"]
    assert {p["schema"]["title"]: p["description"] for p in declared.values()} == {
        title: help_text(rows[title]) for title in PARAM_TITLES
    }
    # Only fields that always hold a value are marked required: the config path, and the two switches.
    assert {t for t in PARAM_TITLES if is_marked_required(rows[t])} == {"Pipelines config", "Dry run", "Full rebuild"}

    # Defaults: the config the api-server was started with, the lists and dates empty (everything, the run's data
    # interval), no offsets, both switches off.
    assert rows["Pipelines config"].locator("input").input_value() == str(ui.config)
    for title in ("Pipelines", "Tables"):
        textarea = rows[title].locator("textarea")
        assert (textarea.input_value(), textarea.get_attribute("placeholder")) == (
            "",
            "Enter each string on a new line",
        )
    for title in ("Start (inclusive)", "End (exclusive)"):
        assert rows[title].get_by_test_id("datetime-input").inner_text() == "Select date and time"
    assert editor_text(rows["Offset ranges"].locator("#element_offsets")) == "{}"
    for name in ("dry_run", "full_rebuild"):
        assert dialog.locator(f"[id='switch:element_{name}']").get_attribute("data-state") == "unchecked"

    # The picker says which time zone it reads the date and time in: the browser's (the UI's default).
    rows["Start (inclusive)"].get_by_test_id("datetime-input").click()
    picker = page.locator("[data-scope=popover][data-part=content][data-state=open]")
    assert picker.get_by_placeholder("YYYY/MM/DD").is_visible() and picker.get_by_placeholder("HH:mm").is_visible()
    assert picker.inner_text().split("\n")[0] in (TIME_ZONE, "Asia/Calcutta")  # Chromium's ICU has the old name
    page.keyboard.press("Escape")

    # A list typed in and cleared again means "every pipeline" again, and Trigger stays available.
    pipelines = rows["Pipelines"].locator("textarea")
    pipelines.fill(CHOSEN)
    pipelines.fill("")
    pipelines.blur()
    assert "This field is required" not in rows["Pipelines"].inner_text()
    assert dialog.get_by_role("button", name="Trigger").is_enabled()
    page.keyboard.press("Escape")  # closes the form, triggering nothing


def test_a_run_triggered_from_the_form_replays_the_range_and_the_pipeline_typed(ui, page, triggered):
    import jsonschema

    assert triggered.posted == {
        "config": str(ui.config),
        "pipelines": [CHOSEN],
        "tables": [],
        "start": START_UTC,
        "end": END_UTC,
        "offsets": None,
        "dry_run": False,
        "full_rebuild": False,
    }
    # What the picker sends passes the DAG's own schema (its pattern, not only its `format`).
    declared = api(ui, page, "/details")["params"]
    for name in ("start", "end"):
        jsonschema.validate(triggered.posted[name], declared[name]["schema"])
    run = triggered.run
    assert (run["state"], run["run_type"], run["triggered_by"], run["conf"]) == (
        "success",
        "manual",
        "ui",
        triggered.posted,
    )
    assert task_states(ui, page, run["dag_run_id"]) == {
        "validate_run": "success",
        "replay": "success",
        "skip_reconcile_on_dry_run": "success",
        "reconcile": "success",
        "skip_archive_without_copy_to": "success",
        "archive": "skipped",  # no Kafka pipeline with archive.copy_to
        "report": "success",
        "fail_run_if_a_task_failed": "skipped",  # only a failed task would run it
    }

    # Only the chosen pipeline was replayed and reconciled; the other has no folder in the warehouse at all.
    assert not (ui.warehouse / OTHER).exists()
    folder = run_dir(ui, CHOSEN, run["dag_run_id"])
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["reconciliation"]["verdict"] == "pass"
    assert published_tables(ui, CHOSEN)["run_id"] == folder.name
    # Over exactly the picked range: the archive goes on past its end, the records read stop before it.
    assert (manifest["selection"]["start"], manifest["selection"]["end"]) == (
        "2026-01-01T00:00:00+00:00",
        "2026-01-02T00:00:00+00:00",
    )
    assert archive_window(ui.archive / CHOSEN)[1].isoformat() > manifest["selection"]["end"]
    assert manifest["distinct_records"] > 0
    assert all(p["min_timestamp"] >= "2026-01-01" and p["max_timestamp"] < "2026-01-02" for p in manifest["partitions"])

    # The reconciliation view lists the run under its pipeline, and nothing under the other.
    page.goto(f"{ui.url}/cdcreplay/")
    section = page.locator(f"section[data-pipeline='{CHOSEN}']")
    assert [r.get_attribute("data-run") for r in section.locator("tbody.run").all()] == [folder.name]
    assert section.locator(f"tbody[data-run='{folder.name}'] td").nth(2).inner_text() == "PASS"
    assert page.locator(f"section[data-pipeline='{OTHER}'] tbody.run").count() == 0


def test_offsets_pasted_with_both_switches_on_make_a_dry_run_of_exactly_those(ui, page, triggered):
    topic = next((ui.archive / CHOSEN).glob("topic=*")).name.removeprefix("topic=")
    offsets = {topic: {"0": {"start": 0, "until": 10}}}
    before = published_tables(ui, CHOSEN)
    dialog = open_trigger_form(ui, page)
    rows = form_rows(dialog)
    rows["Pipelines"].locator("textarea").fill(CHOSEN)
    editor = rows["Offset ranges"].locator("#element_offsets")
    assert json.loads(paste(page, editor, json.dumps(offsets))) == offsets
    for name in ("dry_run", "full_rebuild"):
        switch = dialog.locator(f"[id='switch:element_{name}']")
        switch.click()
        assert switch.get_attribute("data-state") == "checked"
    posted, run = press_trigger(page, dialog)
    assert {k: posted["conf"][k] for k in ("offsets", "dry_run", "full_rebuild")} == {
        "offsets": offsets,
        "dry_run": True,
        "full_rebuild": True,
    }
    run = wait_for_run(ui, page, run["dag_run_id"])
    assert (run["state"], run["conf"]) == ("success", posted["conf"])
    states = task_states(ui, page, run["dag_run_id"])
    assert (states["replay"], states["reconcile"]) == ("success", "skipped")
    folder = run_dir(ui, CHOSEN, run["dag_run_id"])
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["selection"]["offsets"] == [{"topic": topic, "partition": 0, "start": 0, "until": 10}]
    assert manifest["distinct_records"] == 10
    assert json.loads((folder / "summary.json").read_text(encoding="utf-8"))["dry_run"] is True
    assert published_tables(ui, CHOSEN) == before  # a dry run publishes nothing


def assert_refused_before_spark(ui, page, run_id: str, message: str) -> None:
    """The run failed in validate_run, no Spark job ran, and the task's log shows ``message`` to a person."""
    run = wait_for_run(ui, page, run_id)
    assert run["state"] == "failed"
    states = task_states(ui, page, run_id)
    assert {task: states[task] for task in ("validate_run", "replay", "reconcile")} == {
        "validate_run": "failed",
        "replay": "upstream_failed",
        "reconcile": "upstream_failed",
    }
    for pipeline in PIPELINES:
        assert not run_dir(ui, pipeline, run_id).exists()
    # Where a person looks: the failed task of the run, whose log opens on its error.
    page.goto(f"{ui.url}/dags/{DAG_ID}/runs/{quote(run_id)}/tasks/validate_run")
    page.get_by_text(f"AirflowFailException: {message}").first.wait_for()


def test_an_end_before_the_start_is_refused_naming_both_before_any_spark_job(ui, page):
    dialog = open_trigger_form(ui, page)
    rows = form_rows(dialog)
    fill_range_and_pipeline(page, rows, PICKED_END, PICKED_START)
    posted, run = press_trigger(page, dialog)
    assert (posted["conf"]["start"], posted["conf"]["end"]) == (END_UTC, START_UTC)
    assert_refused_before_spark(
        ui,
        page,
        run["dag_run_id"],
        "parameters start/end: start 2026-01-02T00:00:00+00:00 must be before end 2026-01-01T00:00:00+00:00 "
        "(end is exclusive)",
    )
    REFUSED_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1920, "height": 1100})  # the message's whole line and the log's first lines
    page.screenshot(path=str(REFUSED_SCREENSHOT))
    page.set_viewport_size({"width": 1440, "height": 900})
    print(f"screenshot of the refusal: {REFUSED_SCREENSHOT}")


def test_a_table_the_pipeline_does_not_have_is_refused_before_any_spark_job(ui, page, triggered):
    known = sorted(published_tables(ui, CHOSEN)["tables"])
    dialog = open_trigger_form(ui, page)
    rows = form_rows(dialog)
    rows["Pipelines"].locator("textarea").fill(CHOSEN)
    rows["Tables"].locator("textarea").fill("shop.orders\nshop.ordres")
    posted, run = press_trigger(page, dialog)
    assert (posted["conf"]["pipelines"], posted["conf"]["tables"]) == ([CHOSEN], ["shop.orders", "shop.ordres"])
    assert_refused_before_spark(
        ui,
        page,
        run["dag_run_id"],
        f"parameter tables: 'shop.ordres' is not a table of the selected pipelines ({CHOSEN}: {', '.join(known)}); "
        "fix the name, leave tables empty to build every table, or, for a table new to the archive, declare it "
        f"under the pipeline's `tables:` in {ui.config} (`shop.ordres: {{}}` is enough)",
    )
