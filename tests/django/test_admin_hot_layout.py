"""The "Hot locks" page in real Chromium on the running Django: at 1400, 800 and 390 px wide,
light and dark, the window choices and the kinds are in the toolbar, the most contended name
is the first row with its figures inside the window (at 390 px the table scrolls sideways in
its box, as the admin's own lists do, while the name and its first figures stay in view), and
the page is reached from the live list. Screenshots: ``hot-<theme>-<width>.png``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_redis_locks import Lock, Semaphore
from tests.django.browser import CHROMIUM, shoot
from tests.django.test_admin_layout import LIST, THEMES, assert_inside, box, new_page
from tests.django.test_admin_layout import browser as browser  # noqa: PLC0414 (a fixture)
from tests.django.test_admin_layout import operator as operator  # noqa: PLC0414 (a fixture)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs Chromium (Debian package 'chromium', installed by .ci/run)"
    ),
    pytest.mark.urls("tests.django.admin_urls"),
]

WIDTHS = [1400, 800, 390]


@pytest.fixture
def contended(operator: User) -> None:
    """Three names contended as a busy site's would be: refused tries, waits, a give-up."""
    holder = Lock("orders:2026-11-28:charge-customer-42", timeout=30)
    assert holder.acquire()
    for _ in range(4):
        assert not Lock("orders:2026-11-28:charge-customer-42", timeout=30).acquire(blocking=False)
    waiter = threading.Thread(
        target=lambda: Lock("orders:2026-11-28:charge-customer-42", timeout=30).acquire(timeout=10)
    )
    waiter.start()
    waiter.join(0.3)
    holder.release()
    waiter.join(10)
    with Semaphore("exports", 1, timeout=30):
        assert not Semaphore("exports", 1, timeout=30).acquire(timeout=0.2)
    with Lock("reports:nightly", timeout=30):
        assert not Lock("reports:nightly", timeout=30).acquire(blocking=False)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", THEMES)
def test_the_hot_page_shows_the_most_contended_first_where_it_is_seen(
    contended: None, browser: Any, live_server: Any, theme: str, width: int
) -> None:
    page = new_page(browser, live_server, theme, width)
    page.goto(f"{live_server.url}{LIST}")
    page.click("a.drl-hot-link")
    page.wait_for_selector("#result_list.drl-hot")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 3
    first = rows.first
    assert first.get_attribute("data-name") == "orders:2026-11-28:charge-customer-42"
    assert first.locator("td.field-refused").inner_text() == "4"
    assert first.locator("td.field-queued").inner_text() == "1"
    name = assert_inside(page, "#result_list tbody tr th.field-name", width)
    refused = assert_inside(page, "#result_list tbody tr td.field-refused", width)
    assert refused["x"] >= name["x"] + name["width"] - 0.5  # the figures follow the name
    windows = assert_inside(page, "nav.drl-windows", width)
    kinds = assert_inside(page, "#toolbar nav.drl-kinds:not(.drl-windows)", width)
    table = box(page, "#result_list")
    assert windows["y"] < table["y"] and kinds["y"] < table["y"]
    assert "Hot locks" in page.inner_text('#toolbar a[aria-current="page"]:not(nav.drl-windows a)')
    if width >= 800:
        for column in ("left", "wait", "longest-wait", "holds", "hold", "longest-hold"):
            assert_inside(page, f"#result_list tbody tr td.field-{column}", width)
    else:
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"the page is {scroll} px wide in a {width} px window"
    assert_inside(page, ".changelist-footer", width)
    shoot(page, f"hot-{theme}-{width}")
    page.click("nav.drl-windows >> text=Last 60 minutes")
    page.wait_for_url("**window=60m**")
    assert page.locator("#result_list tbody tr").count() == 3
    page.context.close()
