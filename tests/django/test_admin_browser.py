"""The admin page in a real browser: headless Chromium driven by Playwright.

An operator logs in, sees a lock held by another process, force-releases it through the
confirmation page and sees it gone; the holder process learns it lost the lock. Screenshots
of each step are saved to ``$DRL_ARTIFACTS/admin/django-<version>/`` for CI to keep.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.django.browser import CHROMIUM, PASSWORD, chromium, log_in, shoot

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="needs Chromium (Debian package 'chromium', installed by .ci/run)",
    ),
]


@pytest.fixture
def operator(settings, namespace: str) -> User:
    """A superuser, made before the browser starts (Playwright runs an event loop, and
    Django refuses database calls from a thread with a running loop)."""
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    return User.objects.create_superuser("operator", "operator@example.com", PASSWORD)


@pytest.fixture
def browser(operator: User) -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@pytest.fixture
def holder(redis_server, namespace: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock ``nightly-report`` with auto-renewal."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.core.workers",
            "hold-renewed",
            redis_server.url,
            namespace,
            "nightly-report",
            "lock",
            "2",
        ],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first, process.stderr.read() if process.stderr else ""
    process.held = json.loads(first)  # type: ignore[attr-defined]
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


@pytest.mark.urls("tests.django.admin_urls")
def test_operator_force_releases_a_lock_held_by_another_process(
    operator, live_server, holder, browser
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    log_in(page, live_server.url)
    page.click("text=Live locks and semaphores")
    row = page.locator('tr[data-name="nightly-report"]')
    row.wait_for()
    assert f"pid {holder.held['pid']}" in row.inner_text()
    assert holder.held["holder_id"] in row.inner_text()
    shoot(page, "release-1-list")
    row.locator("td.field-release >> text=Release").click()
    page.wait_for_selector("text=Are you sure you want to force-release the lock")
    shoot(page, "release-2-confirm")
    page.click("input[value='Yes, release it']")
    page.wait_for_selector("ul.messagelist li.success")
    assert "Released the lock 'nightly-report'" in page.inner_text("ul.messagelist")
    assert page.locator('tr[data-name="nightly-report"]').count() == 0
    shoot(page, "release-3-released")
    # The holder process finds out at its next renewal.
    assert holder.stdout is not None
    line = json.loads(holder.stdout.readline())
    assert line["lost"]
