"""The admin page is live: it refreshes its rows by itself, without a reload.

New holders appear and released ones go within a refresh period; an auto-renewed hold with a
1 s TTL, watched for three TTLs, never shows "expired"; refreshing pauses while the operator's
pointer is on the rows (about to click Release) and goes on when it leaves.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_redis_locks import Lock
from tests.django.browser import CHROMIUM, PASSWORD, chromium, log_in, shoot

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs Chromium (Debian package 'chromium', installed by .ci/run)"
    ),
    pytest.mark.urls("tests.django.admin_urls"),
]

LIST = "/admin/django_redis_locks/livelock/"
REFRESH = 3.0  # LiveLockAdmin.refresh_seconds
TTL = 1.0


@pytest.fixture
def browser(settings: Any, namespace: str) -> Iterator[Any]:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    with chromium() as browser:  # after the database work (Playwright runs an event loop)
        yield browser


def row_text(page: Any, name: str) -> str:
    row = page.locator(f'tr[data-name="{name}"]')
    return row.inner_text() if row.count() else ""


def test_holders_come_and_go_without_a_reload_and_a_renewed_hold_never_shows_expired(
    browser: Any, live_server: Any
) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{LIST}")
    page.wait_for_selector("p.drl-empty")
    page.evaluate("window.drlNotReloaded = true")
    page.mouse.move(5, 5)  # (the pointer away from the rows)

    lock = Lock("renewed-report", timeout=TTL, auto_renew=True, metadata={"label": "cron"})
    assert lock.acquire()
    held_at = time.monotonic()
    page.wait_for_selector('tr[data-name="renewed-report"]', timeout=(REFRESH + 2) * 1000)
    appeared_after = time.monotonic() - held_at
    seen: list[str] = []
    while time.monotonic() - held_at < appeared_after + 3 * TTL:  # three TTLs, watched
        seen.append(row_text(page, "renewed-report"))
        page.wait_for_timeout(100)
    shoot(page, "live-renewed")
    assert seen and all(seen), "the renewed hold's row went away while it was held"
    assert not [text for text in seen if "expired" in text], "a live hold showed 'expired'"

    lock.release()
    released_at = time.monotonic()
    page.wait_for_selector(
        'tr[data-name="renewed-report"]', state="detached", timeout=(REFRESH + 2) * 1000
    )
    gone_after = time.monotonic() - released_at
    assert page.evaluate("window.drlNotReloaded === true"), "the page was reloaded"
    print(
        f"live admin: appeared {appeared_after:.2f} s after the acquire, gone "
        f"{gone_after:.2f} s after the release (refresh every {REFRESH:g} s)"
    )
    assert appeared_after < REFRESH + 1.5 and gone_after < REFRESH + 1.5


def test_refreshing_pauses_while_the_pointer_is_on_the_rows(browser: Any, live_server: Any) -> None:
    lock = Lock("about-to-release", timeout=60)
    assert lock.acquire()
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{LIST}")
    page.hover('tr[data-name="about-to-release"] a.deletelink')  # about to click Release
    lock.release()
    page.wait_for_timeout((REFRESH + 1) * 1000)  # a refresh period goes by...
    assert page.locator('tr[data-name="about-to-release"]').count() == 1  # ...the row stays
    page.mouse.move(5, 5)  # the pointer leaves: the next refresh removes the row
    page.wait_for_selector(
        'tr[data-name="about-to-release"]', state="detached", timeout=(REFRESH + 2) * 1000
    )
