"""The operator's questions, answered where people look, in real Chromium on the running Django.

A renewed hold, a hold of another process taken inside a Celery task with a caller waiting
for it, and a semaphore with a holder and a waiter: at 1400, 800 and 390 px wide, light and
dark, the waiter's line, "held for", "renewed" and the filters are visible and inside the
window; a sort header sorts; the process filter keeps its rows across the live refresh and
offers the release of all of that process's holds, whose confirmation lists them and whose
release comes back to the filtered list. At 390 px the Release link lies inside the window,
and the page itself does not scroll sideways. Screenshots: ``operator-<theme>-<width>-*.png``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_redis_locks import Lock, LockLost, LockNotOwned, Semaphore
from django_redis_locks.inspection import get_lock, get_semaphore
from tests.django.browser import CHROMIUM, shoot
from tests.django.test_admin_layout import LIST, THEMES, assert_inside, box, new_page
from tests.django.test_admin_layout import browser as browser  # noqa: PLC0414 (a fixture)
from tests.django.test_admin_layout import operator as operator  # noqa: PLC0414 (a fixture)
from tests.harness.servers import wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs Chromium (Debian package 'chromium', installed by .ci/run)"
    ),
    pytest.mark.urls("tests.django.admin_urls"),
]

WIDTHS = [1400, 800, 390]
WEB_1 = {
    "host": "web-1",
    "pid": 4242,
    "label": "reports.tasks.nightly",
    "celery_task": "reports.tasks.nightly",
    "celery_task_id": "0b7c2a4e-5d1f-4e8a-9c3b-2f6d8e1a7b90",
}


@pytest.fixture
def scene(operator: User) -> Iterator[None]:
    """What an operator meets: a renewed hold, another process's task hold with a waiter, a
    full semaphore with a waiter."""
    renewed = Lock(
        "orders:charge-42",
        timeout=60,
        auto_renew=True,
        metadata={"label": "shop.views.charge", "request": "POST /orders/42/charge/"},
    )
    nightly = Lock("reports:nightly", timeout=60, metadata=WEB_1)
    pool = Semaphore("exports", 1, timeout=60, metadata={"label": "exports.run"})
    assert renewed.acquire() and nightly.acquire() and pool.acquire()
    stop = threading.Event()
    waiters = [
        Lock("reports:nightly", timeout=60, metadata={"label": "reports.retry"}),
        Semaphore("exports", 1, timeout=60, metadata={"label": "exports.queued"}),
    ]

    def wait(primitive: Lock | Semaphore) -> None:
        if primitive.acquire(timeout=120):
            stop.wait(120)
            primitive.release()

    threads = [threading.Thread(target=wait, args=(w,), daemon=True) for w in waiters]
    for thread in threads:
        thread.start()
    wait_until(
        lambda: (
            (get_lock("reports:nightly") or renewed_none()).waiting == 1
            and (get_semaphore("exports") or renewed_none()).waiting == 1
        ),
        timeout=5,
        what="the waiters",
    )
    yield
    stop.set()
    for primitive in (renewed, nightly, pool):
        with contextlib.suppress(LockLost, LockNotOwned):  # (released from the page)
            primitive.release()
    for thread in threads:
        thread.join(10)


def renewed_none() -> Any:
    class Nobody:
        waiting = -1

    return Nobody()


def assert_unclipped(page: Any, selector: str) -> None:
    """``selector`` lies within the table's scrolling box: seen without scrolling it."""
    shown, results = box(page, selector), box(page, "#changelist .results")
    assert results["x"] - 0.5 <= shown["x"], (selector, shown, results)
    assert shown["x"] + shown["width"] <= results["x"] + results["width"] + 0.5, (
        selector,
        shown,
        results,
    )


def assert_no_sideways_scroll(page: Any, width: int) -> None:
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"the page is {scroll} px wide in a {width} px window"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", THEMES)
def test_waiters_held_for_renewed_filters_and_sorting_are_where_they_are_seen(
    scene: None, browser: Any, live_server: Any, theme: str, width: int
) -> None:
    page = new_page(browser, live_server, theme, width)
    page.goto(f"{live_server.url}{LIST}")
    page.wait_for_selector("#result_list tr.drl-waiter")
    narrow = width < 768
    inside = (lambda s: box(page, s)) if narrow else (lambda s: assert_inside(page, s, width))
    waiter = '#result_list tr.drl-waiter[data-name="reports:nightly"]'
    assert "reports.retry" in page.inner_text(waiter)
    assert_inside(page, f"{waiter} .drl-waiting-tag", width)
    assert_inside(page, f"{waiter} td.field-holder", width)
    holder = page.locator('#result_list tr[data-holder][data-name="reports:nightly"]')
    assert "Celery task reports.tasks.nightly" in holder.locator("td.field-holder").inner_text()
    renewed = inside('#result_list tr[data-name="orders:charge-42"] .drl-renewed')
    held = inside('#result_list tr[data-name="orders:charge-42"] .drl-held')
    # side by side: on one line, "renewed" to the right of "held for"
    assert (
        renewed["y"] < held["y"] + held["height"] and held["y"] < renewed["y"] + renewed["height"]
    )
    assert renewed["x"] > held["x"] + held["width"]
    if not narrow:  # (at 390 px the table scrolls sideways in its box, as the admin's own)
        assert_inside(page, '#result_list tr[data-name="orders:charge-42"] .drl-held', width)
        assert_inside(page, '#result_list tr[data-name="orders:charge-42"] .drl-renewed', width)
    filters = assert_inside(page, "#changelist-filter", width)
    table = box(page, "#result_list")
    if width >= 1100:
        assert filters["x"] >= table["x"] + table["width"] - 0.5  # the sidebar, to the right
    else:
        assert filters["y"] >= table["y"] + table["height"]  # under the rows
    if narrow:
        assert_inside(page, "#result_list a.drl-release-inline", width)
        assert_unclipped(page, "#result_list a.drl-release-inline")
        assert page.locator("#result_list td.field-release").first.is_hidden()
        assert_no_sideways_scroll(page, width)
    else:
        assert_inside(page, "#result_list td.field-release a.deletelink", width)
        assert_unclipped(page, "#result_list td.field-release a.deletelink")
        assert_unclipped(page, '#result_list tr[data-name="orders:charge-42"] .drl-renewed')
    shoot(page, f"operator-{theme}-{width}-list")

    header = page.locator("#result_list th.column-acquired a")
    header.click()
    page.wait_for_url("**o=age**")
    sorted_header = page.locator("#result_list th.column-acquired")
    assert "sorted" in (sorted_header.get_attribute("class") or "")
    names = page.locator("#result_list th.field-name").all_inner_texts()
    assert next(n.splitlines()[0] for n in names) in ("orders:charge-42", "reports:nightly")
    shoot(page, f"operator-{theme}-{width}-sorted")
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", THEMES)
def test_a_process_is_filtered_then_all_its_holds_released_from_one_confirmation(
    scene: None, browser: Any, live_server: Any, theme: str, width: int
) -> None:
    page = new_page(browser, live_server, theme, width)
    page.goto(f"{live_server.url}{LIST}?o=-name")
    page.click("#changelist-filter >> text=web-1 4242 (1)")
    page.wait_for_url("**pid=4242**")
    rows = page.locator("#result_list th.field-name")
    assert rows.count() == 1 and "reports:nightly" in rows.first.inner_text()
    assert "1 lock matches (2 live)" in page.inner_text(".changelist-footer")
    selected = page.locator("#changelist-filter li.selected")
    assert "web-1 4242" in " ".join(selected.all_inner_texts())
    page.evaluate("window.drlNotReloaded = true")
    page.mouse.move(1, 1)
    page.wait_for_function(  # a live refresh came and went: still the one process's rows
        "document.querySelector('#drl-live').dataset.refreshUrl.includes('pid=4242')"
        " && window.drlNotReloaded"
    )
    page.wait_for_timeout(3500)
    assert page.locator("#result_list th.field-name").count() == 1
    bulk = assert_inside(page, "p.drl-bulk a.deletelink", width)
    assert bulk["y"] < box(page, "#result_list")["y"]
    assert_no_sideways_scroll(page, width) if width < 768 else None
    shoot(page, f"operator-{theme}-{width}-filtered")

    page.click("p.drl-bulk a.deletelink")
    page.wait_for_selector("ul.drl-holds")
    items = page.locator("ul.drl-holds li.drl-hold-item")
    assert items.count() == 1 and "reports:nightly" in items.first.inner_text()
    assert "Celery task reports.tasks.nightly" in items.first.inner_text()
    assert_inside(page, "ul.drl-holds", width)
    assert_inside(page, "input[value='Yes, release 1 hold']", width)
    assert_inside(page, "a.cancel-link", width)
    shoot(page, f"operator-{theme}-{width}-release-process")
    page.click("input[value='Yes, release 1 hold']")
    page.wait_for_selector("ul.messagelist")
    assert "Released 1 hold of web-1 pid 4242" in page.inner_text("ul.messagelist")
    assert "host=web-1" in page.url and "pid=4242" in page.url and "o=-name" in page.url
    shoot(page, f"operator-{theme}-{width}-released")
    page.context.close()
