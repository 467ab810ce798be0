"""Headless Chromium for the admin's browser tests (Playwright driving the system's browser),
and where their screenshots go (``$DRL_ARTIFACTS/admin/django-<version>/``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import django

from tests.harness.figures import ARTIFACTS

SCREENSHOTS = ARTIFACTS / "admin" / f"django-{django.get_version()}"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Without the background-networking flags, Chromium keeps trying hosts this machine's
#: closed network refuses.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "a-long-password"


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def log_in(page: Any, base_url: str, username: str = "operator") -> None:
    page.goto(f"{base_url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#content")


def shoot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
