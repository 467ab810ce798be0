"""The admin's "Hot locks" page, through Django's test client: the most contended names first,
with the figures the scripts counted, for the last 5 or 60 minutes; only with view_livelock."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from django.test import Client

from django_redis_locks import Lock, Semaphore
from tests.django.test_admin import LIST, staff

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.django.admin_urls")]

HOT = f"{LIST}hot/"


@pytest.fixture(autouse=True)
def _namespace(settings: Any, namespace: str) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}


@pytest.fixture
def viewer() -> Client:
    return staff("viewer", "view_livelock")


def contend() -> None:
    """``invoice:1``: 2 refused tries and a 0.2 s wait; ``exports``: a waiter that gave up."""
    holder = Lock("invoice:1", timeout=30)
    assert holder.acquire()
    for _ in range(2):
        assert not Lock("invoice:1", timeout=30).acquire(blocking=False)
    waiter = threading.Thread(target=lambda: Lock("invoice:1", timeout=30).acquire(timeout=10))
    waiter.start()
    waiter.join(0.2)
    holder.release()
    waiter.join(10)
    with Semaphore("exports", 1, timeout=30):
        assert not Semaphore("exports", 1, timeout=30).acquire(timeout=0.1)


def cells(page: str, name: str) -> dict[str, str]:
    row = re.search(rf'<tr data-name="{re.escape(name)}".*?</tr>', page, re.S)
    assert row, name
    found = re.findall(r'<td class="field-([\w-]+)">(.*?)</td>', row.group(0), re.S)
    return {key: re.sub(r"<[^>]+>", "", value).strip() for key, value in found}


def test_the_most_contended_names_come_first_with_their_figures(viewer: Client) -> None:
    contend()
    page = viewer.get(HOT).content.decode()
    assert "<title>Hot locks" in page
    rows = re.findall(r'<tr data-name="([^"]+)" data-kind="(\w+)"', page)
    assert rows == [("invoice:1", "lock"), ("exports", "semaphore")]
    invoice = cells(page, "invoice:1")
    assert (invoice["refused"], invoice["queued"], invoice["left"], invoice["holds"]) == (
        "2",
        "1",
        "0",
        "1",
    )
    assert float(invoice["wait"].removesuffix(" s")) >= 0.15
    exports = cells(page, "exports")
    assert (exports["queued"], exports["left"], exports["wait"]) == ("1", "1", "\N{EN DASH}")
    # Each name links to who holds and waits now.
    assert f'href="{LIST}?kind=semaphore&amp;q=exports"' in page
    assert "2 contended names in the last 5 minutes" in page


def test_the_last_60_minutes_and_the_refresh_rows(viewer: Client) -> None:
    contend()
    page = viewer.get(HOT, {"window": "60m"}).content.decode()
    assert 'aria-current="page">Last 60 minutes</a>' in page
    rows = viewer.get(HOT, {"window": "60m", "rows": "1"})
    assert rows["X-DRL-Rows"] == "1" and "<html" not in rows.content.decode()
    assert 'data-name="invoice:1"' in rows.content.decode()
    # An unknown window is the default one.
    assert (
        'aria-current="page">Last 5 minutes</a>'
        in viewer.get(HOT, {"window": "1d"}).content.decode()
    )


def test_nothing_contended_says_so_and_the_list_links_here(viewer: Client) -> None:
    with Lock("calm", timeout=30):
        pass
    page = viewer.get(HOT).content.decode()
    assert "Nothing was contended in the last 5 minutes." in page
    assert f'href="{HOT}" class="drl-hot-link"' in viewer.get(LIST).content.decode()


def test_the_page_needs_view_livelock() -> None:
    assert staff("nobody").get(HOT).status_code == 403
