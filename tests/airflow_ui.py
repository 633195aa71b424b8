"""What the real-browser tests of the Airflow UI share: an Airflow home with a login, and a logged-in Chromium page.

The browser is Debian's chromium (scripts/setup-browser.sh) driven by Playwright for Python through executable_path;
`playwright install`, which downloads a browser build of its own, is never used.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from airflow_helpers import migrated_home

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "var" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def ui_env(home: Path, config: Path, password: str, **extra: str) -> dict[str, str]:
    """The embedded setup (airflow_env) with a login: user admin, its password in a file of the test's own."""
    passwords = home / "passwords.json"
    home.mkdir(parents=True, exist_ok=True)
    passwords.write_text(json.dumps({"admin": password}), encoding="utf-8")
    return migrated_home(
        home,
        config,
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(16),
        AIRFLOW__API__SECRET_KEY=secrets.token_hex(16),
        **extra,
    )


@contextmanager
def logged_in_page(url: str, password: str, path: str, **context_options) -> Iterator:
    """Headless Chromium with a new empty profile, logged in to Airflow through its login page, left at ``path``.

    Only requests to the api-server leave the browser (GX Data Docs name CDN stylesheets: they are refused).
    ``context_options`` go to the browser context (a time zone, permissions).
    """
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run scripts/setup-browser.sh"
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 900},
            **context_options,
        )
        local = url + "/"
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(local) else route.abort())
        page = context.new_page()
        page.set_default_timeout(30_000)
        try:
            # Not logged in: Airflow sends the browser to its login page (the UI's pages from their script, a
            # plugin's view by a redirect), which comes back to `path` after the login.
            page.goto(url + path)
            page.wait_for_url(url + "/auth/login?next=**")
            page.get_by_label("Username").fill("admin")
            page.get_by_label("Password").fill(password)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(url + path)
            yield page
        finally:
            context.close()
