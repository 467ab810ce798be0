"""The live pages answer an operator's questions, through Django's test client: who waits,
how long a hold has been held, whether it is renewed, which task holds it; sorting, the
total, filters by host, pid and caller that stay across refreshes, pages and releases; and
the release of every hold of one (dead) process, confirmed and audited like a single one.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.test import Client

from django_redis_locks import Lock, LockLost, Semaphore
from django_redis_locks.admin import LiveLockAdmin
from django_redis_locks.inspection import get_lock
from tests.django.test_admin import LIST, RELEASE, hid, staff
from tests.harness.servers import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.django.admin_urls")]

PROCESS = "/admin/django_redis_locks/livelock/release/process/"
#: Metadata that makes a hold look like another process's (the caller's keys win).
WEB_1 = {"host": "web-1", "pid": 4242, "label": "shop.views.charge"}
WEB_2 = {"host": "web-2", "pid": 77, "label": "shop.tasks.refund"}


@pytest.fixture(autouse=True)
def _namespace(settings: Any, namespace: str) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}


@pytest.fixture
def releaser() -> Client:
    return staff("releaser", "view_livelock", "force_release_livelock")


@pytest.fixture
def viewer() -> Client:
    return staff("viewer", "view_livelock")


@pytest.fixture
def holds() -> Iterator[list[Lock | Semaphore]]:
    made: list[Lock | Semaphore] = []
    yield made
    for primitive in made:
        if primitive.holder_id is not None:
            with contextlib.suppress(LockLost):
                primitive.release()


def hold(made: list[Lock | Semaphore], primitive: Lock | Semaphore) -> Any:
    assert primitive.acquire()
    made.append(primitive)
    return primitive


def names(page: str) -> list[str]:
    """The names of the list's entries, in order, once each."""
    return re.findall(r'<th class="field-name" scope="row"[^>]*>([^<]+)', page)


def row(page: str, name: str) -> str:
    found = re.findall(rf'<tr data-name="{re.escape(name)}".*?</tr>', page, re.S)
    assert found, name
    return "".join(found)


def link(page: str, css: str) -> str:
    found = re.search(rf'<a href="([^"]+)" class="{css}"', page)
    assert found, css
    return found.group(1).replace("&amp;", "&")


def waiting(name: str) -> int:
    info = get_lock(name)
    return -1 if info is None else info.waiting


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


# -- who waits, held for, renewed, tasks ------------------------------------------------------
def test_waiters_are_shown_as_holder_rows_with_how_long_they_waited(
    viewer: Client, holds: list[Lock | Semaphore]
) -> None:
    hold(holds, Lock("report", timeout=60, metadata={"label": "cron.report"}))
    waiter = Lock("report", timeout=60, metadata={"label": "queued.job"})
    stop = threading.Event()

    def wait() -> None:
        if waiter.acquire(timeout=20):
            stop.wait(20)
            waiter.release()

    thread = threading.Thread(target=wait, name="queued-thread", daemon=True)
    thread.start()
    try:
        wait_until(lambda: waiting("report") == 1, timeout=5, what="a waiter")
        info = get_lock("report")
        assert info is not None
        page = viewer.get(LIST).content.decode()
        cells = row(page, "report")
        queued = re.search(
            rf'<tr data-name="report" data-waiter="{info.waiters[0].holder_id}" '
            r'class="drl-waiter">.*?</tr>',
            cells,
            re.S,
        )
        assert queued is not None, cells
        line = queued.group(0)
        for shown in ("waiting", "queued.job", "queued-thread", "pid ", "since", "in the queue"):
            assert shown in line, shown
        assert "Release" not in line  # a waiter holds nothing to release
        assert re.search(r'<td class="field-waiting" rowspan="2">1</td>', cells)
    finally:
        stop.set()
        holds[0].release()
        thread.join(25)


def test_held_for_beside_expires_in_and_a_renewed_hold_does_not_count_down(
    viewer: Client, holds: list[Lock | Semaphore]
) -> None:
    hold(holds, Lock("renewed", timeout=6, auto_renew=True))
    hold(holds, Lock("plain", timeout=60))
    time.sleep(0.3)
    page = viewer.get(LIST).content.decode()
    renewed, plain = row(page, "renewed"), row(page, "plain")
    for cells in (renewed, plain):
        held = re.search(r'class="drl-held" data-held-ms="(\d+)">([\d.]+) s<', cells)
        assert held is not None and int(held.group(1)) >= 300
    assert 'class="drl-renewed"' in renewed and "every 2 s" in renewed
    assert "drl-countdown" not in renewed  # no countdown to zero for a renewed hold
    assert 'class="drl-countdown" data-ttl-ms="' in plain and "drl-renewed" not in plain


def test_the_holder_names_the_celery_or_django_task(
    viewer: Client, holds: list[Lock | Semaphore]
) -> None:
    celery = {"celery_task": "shop.tasks.refund", "celery_task_id": "5f0c-celery-id"}
    django_task = {"django_task": "shop.tasks.export", "django_task_id": "9a1b-django-id"}
    hold(holds, Lock("refund", timeout=60, metadata=celery))
    hold(holds, Lock("export", timeout=60, metadata=django_task))
    page = viewer.get(LIST).content.decode()
    refund = re.search(r'<td class="field-holder">.*?</td>', row(page, "refund"), re.S)
    export = re.search(r'<td class="field-holder">.*?</td>', row(page, "export"), re.S)
    assert refund is not None and export is not None
    assert "Celery task shop.tasks.refund" in refund.group(0)
    assert "5f0c-celery-id" in refund.group(0)
    assert "Django task shop.tasks.export" in export.group(0)
    assert "9a1b-django-id" in export.group(0)


def test_a_queued_unique_task_shows_its_task_id(viewer: Client) -> None:
    """Its hold was taken before the task had an id: the id comes from its ticket record."""
    from tests.django import unique_tasks

    queued = unique_tasks.rebuild.enqueue(77)
    try:
        page = viewer.get(LIST).content.decode()
        cell = re.search(r'<td class="field-holder">.*?</td>', row(page, "rebuild:77"), re.S)
        assert cell is not None
        assert "Django task tests.django.unique_tasks.rebuild" in cell.group(0)
        assert str(queued.id) in cell.group(0)
    finally:
        unique_tasks.proceed.set()
        unique_tasks.run_as_worker(queued)
    assert get_lock("rebuild:77") is None


# -- sorting and the total --------------------------------------------------------------------
def test_sorting_by_name_age_expiry_and_waiters(
    viewer: Client, holds: list[Lock | Semaphore]
) -> None:
    hold(holds, Lock("sort:b-oldest", timeout=50))
    time.sleep(0.05)
    hold(holds, Lock("sort:c-renewed", timeout=10, auto_renew=True))
    time.sleep(0.05)
    hold(holds, Lock("sort:a-newest", timeout=30))
    waiter = Lock("sort:a-newest", timeout=30)
    thread = threading.Thread(target=lambda: waiter.acquire(timeout=3), daemon=True)
    thread.start()
    wait_until(lambda: waiting("sort:a-newest") == 1, timeout=5, what="queued")
    orders = {
        "": ["sort:a-newest", "sort:b-oldest", "sort:c-renewed"],  # by name, by default
        "name": ["sort:a-newest", "sort:b-oldest", "sort:c-renewed"],
        "-name": ["sort:c-renewed", "sort:b-oldest", "sort:a-newest"],
        "age": ["sort:b-oldest", "sort:c-renewed", "sort:a-newest"],  # held longest first
        "-age": ["sort:a-newest", "sort:c-renewed", "sort:b-oldest"],
        "expiry": ["sort:a-newest", "sort:b-oldest", "sort:c-renewed"],  # renewed: last
        "waiters": ["sort:a-newest", "sort:b-oldest", "sort:c-renewed"],  # then by name
        "-waiters": ["sort:b-oldest", "sort:c-renewed", "sort:a-newest"],
    }
    for order, expected in orders.items():
        shown = viewer.get(LIST, {"q": "sort:", "o": order} if order else {"q": "sort:"})
        assert names(shown.content.decode()) == expected, order
    page = viewer.get(LIST, {"q": "sort:", "o": "age"}).content.decode()
    assert re.search(
        r'class="column-acquired sortable sorted ascending" aria-sort="descending"', page
    )
    header = re.search(r'<th scope="col" class="column-acquired[^"]*".*?</th>', page, re.S)
    assert header is not None and "o=-age" in header.group(0)  # a second click reverses it
    thread.join(5)
    if waiter.holder_id is not None:
        waiter.release()


def test_the_total_counts_every_live_entry_or_says_at_least(
    viewer: Client, holds: list[Lock | Semaphore], monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(7):
        hold(holds, Lock(f"total:{index}", timeout=60))
    page = viewer.get(LIST, {"q": "total:"}).content.decode()
    assert "7 locks live" in page
    monkeypatch.setattr(LiveLockAdmin, "scan_limit", 5)
    monkeypatch.setattr(LiveLockAdmin, "list_per_page", 2)
    page = viewer.get(LIST, {"q": "total:"}).content.decode()
    assert "At least 5 locks live" in page and "page 1 of 3" in page
    seen = names(page)
    url: str | None = link(page, "drl-next")
    while url is not None:  # the pages of the window, then the next window
        page = viewer.get(url).content.decode()
        seen.extend(names(page))
        found = re.search(r'<a href="([^"]+)" class="drl-(next|window)"', page)
        url = found.group(1).replace("&amp;", "&") if found else None
    assert sorted(seen) == [f"total:{index}" for index in range(7)]


# -- filters ----------------------------------------------------------------------------------
def test_filters_by_host_pid_and_caller_stay_across_refreshes_pages_and_releases(
    releaser: Client, holds: list[Lock | Semaphore], monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(3):
        hold(holds, Lock(f"f:web1-{index}", timeout=60, metadata=WEB_1))
    hold(holds, Lock("f:web2", timeout=60, metadata=WEB_2))
    hold(holds, Lock("f:here", timeout=60, metadata={"label": "shop.views.charge"}))
    monkeypatch.setattr(LiveLockAdmin, "list_per_page", 2)
    filters = {"q": "f:", "host": "web-1", "pid": "4242", "o": "-name"}
    page = releaser.get(LIST, filters).content.decode()
    assert names(page) == ["f:web1-2", "f:web1-1"]
    assert "3 locks match (5 live)" in page
    for url in (
        re.search(r'data-refresh-url="([^"]+)"', page).group(1),  # type: ignore[union-attr]
        link(page, "drl-next"),
    ):
        kept = query(url.replace("&amp;", "&"))
        assert {k: kept[k] for k in filters} == {k: [v] for k, v in filters.items()}, url
    page = releaser.get(link(page, "drl-next")).content.decode()
    assert names(page) == ["f:web1-0"]
    assert names(releaser.get(LIST, {"q": "f:", "pid": "77"}).content.decode()) == ["f:web2"]
    by_label = releaser.get(LIST, {"q": "f:", "label": "views.CHARGE"}).content.decode()
    assert names(by_label) == ["f:here", "f:web1-0"]  # a part of the caller, any case
    sidebar = re.search(r'id="changelist-filter".*?</(nav|search)>', page, re.S)
    assert sidebar is not None
    for choice in ("web-1 (3)", "web-2 (1)", "web-1 4242 (3)", "shop.tasks.refund (1)"):
        assert choice in sidebar.group(0), choice

    release = re.search(r'href="([^"]+)" title="Force-release', page)
    assert release is not None
    url = release.group(1).replace("&amp;", "&")
    listed = query(url)["list"][0]
    response = releaser.post(url.split("?")[0], {**_flat(query(url)), "list": listed})
    assert response.status_code == 302
    back = query(response["Location"])
    assert back["host"] == ["web-1"] and back["pid"] == ["4242"] and back["o"] == ["-name"]
    assert urlsplit(response["Location"]).path == LIST


def _flat(found: dict[str, list[str]]) -> dict[str, str]:
    return {key: values[0] for key, values in found.items()}


# -- releasing every hold of one process ------------------------------------------------------
def test_every_hold_of_one_process_is_released_as_confirmed_and_audited(
    releaser: Client, holds: list[Lock | Semaphore]
) -> None:
    locks = [hold(holds, Lock(f"dead:{index}", timeout=60, metadata=WEB_1)) for index in (1, 2)]
    slot = hold(holds, Semaphore("dead:pool", 3, timeout=60, metadata=WEB_1))
    other = hold(holds, Lock("alive", timeout=60, metadata=WEB_2))
    page = releaser.get(LIST, {"host": "web-1", "pid": "4242"}).content.decode()
    bulk = link(page, "deletelink")
    assert urlsplit(bulk).path == PROCESS
    confirm = releaser.get(bulk).content.decode()
    shown = re.findall(
        r'<li class="drl-hold-item" data-name="([^"]+)" data-holder="(\w+)"', confirm
    )
    assert sorted(shown) == sorted(
        [("dead:1", hid(locks[0])), ("dead:2", hid(locks[1])), ("dead:pool", hid(slot))]
    )
    assert "Yes, release 3 holds" in confirm and "alive" not in confirm
    posted = re.findall(r'<input type="hidden" name="hold" value="([^"]+)">', confirm)
    first_id = hid(locks[0])
    # Between the page and the POST, dead:2 is released and taken by another holder.
    locks[1].release()
    newer = hold(holds, Lock("dead:2", timeout=60, metadata=WEB_1))
    form = {**_flat(query(bulk)), "hold": posted}
    response = releaser.post(PROCESS, form, follow=True)
    page = response.content.decode()
    assert "Released 2 holds of web-1 pid 4242" in page
    assert "1 of the holds shown was no longer held" in page
    assert response.redirect_chain[-1][0] == f"{LIST}?host=web-1&pid=4242"
    with pytest.raises(LockLost):
        locks[0].ensure_held()
    with pytest.raises(LockLost):
        slot.refresh()
    assert newer.owned() and other.owned()  # the newer holder and the other process stay
    entries = LogEntry.objects.order_by("object_id")
    assert [e.object_id for e in entries] == ["lock:dead:1", "semaphore:dead:pool"]
    assert all(e.action_flag == DELETION and e.user.username == "releaser" for e in entries)
    assert entries[0].change_message == (
        f"Force-released the lock 'dead:1' held by {first_id} (web-1 pid 4242, shop.views.charge)."
    )


def test_the_release_of_a_process_needs_the_force_release_permission(
    viewer: Client, releaser: Client, holds: list[Lock | Semaphore]
) -> None:
    lock = hold(holds, Lock("guarded", timeout=60, metadata=WEB_1))
    page = viewer.get(LIST, {"host": "web-1", "pid": "4242"}).content.decode()
    assert "Release all holds" not in page
    assert viewer.get(PROCESS, {"host": "web-1", "pid": "4242"}).status_code == 403
    form = {"host": "web-1", "pid": "4242", "hold": f"lock {hid(lock)} guarded"}
    assert viewer.post(PROCESS, form).status_code == 403
    assert lock.owned()
    nothing = releaser.get(PROCESS, {"host": "web-9", "pid": "1"}, follow=True)
    assert "Nothing to release: web-9 pid 1 holds nothing now." in nothing.content.decode()
    assert releaser.get(RELEASE).status_code == 302  # (the single release is unchanged)
