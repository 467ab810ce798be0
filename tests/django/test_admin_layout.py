"""The admin page as people see it, on the running Django, in real Chromium: where things are.

Each state of the page (the locks tab with holders, the semaphores tab, the empty list, Redis
out of reach, the force-release confirmation) is shown in the light and the dark theme at
1400 and 800 px wide. For each, the layout is asserted, not only the text: the table lies
under the toolbar and inside the window, every column header and the Release link are
visible, the footer comes after the rows. Screenshots go to
``$DRL_ARTIFACTS/admin/django-<version>/<theme>-<width>-<state>.png``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_redis_locks import Lock, Semaphore
from tests.django.browser import CHROMIUM, PASSWORD, chromium, log_in, shoot

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs Chromium (Debian package 'chromium', installed by .ci/run)"
    ),
    pytest.mark.urls("tests.django.admin_urls"),
]

WIDTHS = [1400, 800]
THEMES = ["light", "dark"]
LIST = "/admin/django_redis_locks/livelock/"
ZONED_TIME = r"\d\d:\d\d:\d\d (CST|CDT|UTC)"


@pytest.fixture
def operator(settings: Any, namespace: str) -> User:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    return User.objects.create_superuser("operator", "operator@example.com", PASSWORD)


@pytest.fixture
def holds(operator: User) -> Iterator[None]:
    """A lock and a semaphore with two holders, with the metadata real callers record."""
    lock = Lock(
        "orders:2026-11-24:charge-customer-42",
        timeout=60,
        auto_renew=True,
        metadata={"label": "shop.views.charge", "request": "POST /orders/42/charge/"},
    )
    semaphores = [
        Semaphore("nightly-import", 2, timeout=60, metadata={"label": "manage.py import"})
        for _ in range(2)
    ]
    assert lock.acquire()
    import threading

    threading.Thread(target=semaphores[1].acquire).start()  # a second owner
    assert semaphores[0].acquire()
    yield
    lock.release()
    semaphores[0].release()


@pytest.fixture
def browser(operator: User) -> Iterator[Any]:
    """Started after the database work of the fixtures: Playwright runs an event loop in this
    thread, and Django refuses database calls from a thread with a running loop."""
    with chromium() as browser:
        yield browser


def box(page: Any, selector: str) -> dict[str, float]:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, f"{selector} is not shown"
    return dict(found)


def assert_inside(page: Any, selector: str, width: int) -> dict[str, float]:
    """``selector`` is visible and lies within the window's width."""
    element = page.locator(selector).first
    assert element.is_visible(), f"{selector} is not visible"
    found = box(page, selector)
    assert found["x"] >= 0 and found["x"] + found["width"] <= width + 0.5, (selector, found)
    return found


def assert_list_layout(page: Any, width: int, *, table: bool) -> None:
    toolbar = assert_inside(page, "#toolbar", width)
    footer = assert_inside(page, ".changelist-footer", width)
    below = toolbar["y"] + toolbar["height"] - 0.5
    if table:
        results = assert_inside(page, "#result_list", width)
        assert results["y"] >= below, "the table is not under the toolbar"
        headers = page.locator("#result_list thead th")
        assert headers.count() >= 5
        for index in range(headers.count()):
            header = headers.nth(index)
            assert header.is_visible()
            found = header.bounding_box()
            assert found is not None
            assert found["x"] >= 0 and found["x"] + found["width"] <= width + 0.5, (
                header.inner_text(),
                found,
            )
        assert_inside(page, "#result_list a.deletelink", width)
        for selector in ("#result_list .drl-holder-id", "#result_list .drl-fence"):
            for element in page.locator(selector).all():  # (semaphores have no fence)
                assert element.evaluate("e => e.getClientRects().length === 1"), (
                    f"{selector} is broken over lines"
                )
        assert footer["y"] >= results["y"] + results["height"] - 0.5
    else:
        assert footer["y"] >= below


def new_page(browser: Any, live_server: Any, theme: str, width: int) -> Any:
    context = browser.new_context(
        viewport={"width": width, "height": 900}, color_scheme=theme, locale="en-GB"
    )
    page = context.new_page()
    log_in(page, live_server.url)
    return page


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", THEMES)
def test_the_lists_and_the_confirmation_are_laid_out_right(
    holds: None, browser: Any, live_server: Any, theme: str, width: int
) -> None:
    page = new_page(browser, live_server, theme, width)
    page.goto(f"{live_server.url}{LIST}")
    page.wait_for_selector("#result_list tr[data-name]")
    assert_list_layout(page, width, table=True)
    # Times say their zone (the site's TIME_ZONE: America/Chicago in the tests).
    assert re.search(ZONED_TIME, page.inner_text("#result_list td.field-acquired"))
    shoot(page, f"{theme}-{width}-locks")

    page.click(".drl-kinds >> text=Semaphores")
    page.wait_for_selector('#result_list tr[data-name="nightly-import"]')
    assert_list_layout(page, width, table=True)
    assert "2 / 2" in page.inner_text("#result_list")
    shoot(page, f"{theme}-{width}-semaphores")

    page.goto(f"{live_server.url}{LIST}?q=no-such-")
    page.wait_for_selector("p.drl-empty")
    assert_list_layout(page, width, table=False)
    shoot(page, f"{theme}-{width}-empty")

    page.goto(f"{live_server.url}{LIST}")
    page.locator("#result_list a.deletelink").first.click()
    page.wait_for_selector("text=Are you sure you want to force-release the lock")
    assert_inside(page, "input[value='Yes, release it']", width)
    assert_inside(page, "a.cancel-link", width)
    assert_inside(page, "ul.drl-hold", width)
    assert re.search(ZONED_TIME, page.inner_text("ul.drl-hold"))
    shoot(page, f"{theme}-{width}-confirm")
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", THEMES)
def test_redis_out_of_reach_is_said_not_zero_locks(
    browser: Any,
    live_server: Any,
    operator: User,
    settings: Any,
    make_server: Any,
    theme: str,
    width: int,
) -> None:
    server = make_server()
    url = server.url
    server.stop()
    settings.CACHES = {**settings.CACHES, "locks": {**settings.CACHES["locks"], "LOCATION": url}}
    page = new_page(browser, live_server, theme, width)
    page.goto(f"{live_server.url}{LIST}")
    note = page.wait_for_selector("p.drl-redis-error")
    assert note is not None and "Redis could not be reached" in note.inner_text()
    assert_list_layout(page, width, table=False)
    assert "on this page" not in page.inner_text(".changelist-footer")  # no "0 locks"
    assert page.locator("p.drl-empty").count() == 0
    shoot(page, f"{theme}-{width}-redis-down")
    page.context.close()
