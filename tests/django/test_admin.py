"""The admin page of live locks and semaphores, through Django's test client.

Permissions per view, CSRF on release, the audit entry, escaping, pagination, search, the
kind filter, custom admin sites, and the breadcrumb markup of the running Django version.
"""

from __future__ import annotations

import re
from typing import Any

import django
import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client

from django_redis_locks import Lock, LockLost, Semaphore
from django_redis_locks.signals import hold_force_released

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.django.admin_urls")]

LIST = "/admin/django_redis_locks/livelock/"
RELEASE = "/admin/django_redis_locks/livelock/release/"


@pytest.fixture(autouse=True)
def _namespace(settings, namespace: str) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}


def staff(username: str, *permissions: str) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer() -> Client:
    return staff("viewer", "view_livelock")


@pytest.fixture
def releaser() -> Client:
    return staff("releaser", "view_livelock", "force_release_livelock")


@pytest.fixture
def held() -> Any:
    lock = Lock("order:17", timeout=60, metadata={"label": "shop.views.charge"})
    assert lock.acquire()
    yield lock
    if lock.holder_id is not None and lock.owned():
        lock.release()


def hid(primitive: Lock | Semaphore) -> str:
    """The holder id of the calling thread's hold (it holds one)."""
    holder_id = primitive.holder_id
    assert holder_id is not None
    return holder_id


def release_url(lock: Lock, kind: str = "lock") -> str:
    return f"{RELEASE}?kind={kind}&name={lock.name}&holder={hid(lock)}"


# -- the index and the list -------------------------------------------------------------------
def test_the_page_appears_in_the_admin_index_under_the_app(admin_client: Client) -> None:
    page = admin_client.get("/admin/").content.decode()
    assert "Redis locks" in page
    assert f'href="{LIST}"' in page and "Live locks and semaphores" in page


def test_the_list_shows_each_hold_with_who_where_and_when(releaser: Client, held: Lock) -> None:
    response = releaser.get(LIST)
    assert response.status_code == 200
    page = response.content.decode()
    row = re.search(r'<tr data-name="order:17".*?</tr>', page, re.S)
    assert row is not None
    cells = row.group(0)
    hold = held._current_hold()
    assert hold is not None
    for shown in (
        "order:17",
        "shop.views.charge",
        hid(held),
        f"pid {hold.pid}",
        str(held.fence),
        "Release",
        'class="drl-countdown" data-ttl-ms="',
    ):
        assert shown in cells, shown
    assert hold.token not in page  # tokens are never shown


def test_semaphores_show_limit_count_waiting_and_each_holder(releaser: Client) -> None:
    first = Semaphore("imports", 3, timeout=60, metadata={"label": "cron.import"})
    second = Semaphore("imports", 3, timeout=60)
    assert first.acquire() and second.acquire()
    page = releaser.get(LIST, {"kind": "semaphore"}).content.decode()
    assert "2 / 3" in page
    assert page.count('data-name="imports"') == 2
    assert hid(first) in page and hid(second) in page and "cron.import" in page
    first.release()
    second.release()


def test_search_by_name_prefix_and_filter_by_kind(viewer: Client) -> None:
    locks = [Lock(name, timeout=60) for name in ("order:1", "order:2", "invoice:1")]
    semaphore = Semaphore("order:pool", 2, timeout=60)
    primitives: list[Lock | Semaphore] = [*locks, semaphore]
    for primitive in primitives:
        assert primitive.acquire()
    page = viewer.get(LIST, {"q": "order:"}).content.decode()
    names = re.findall(r'<tr data-name="([^"]+)"', page)
    assert sorted(names) == ["order:1", "order:2"]
    page = viewer.get(LIST, {"q": "order:", "kind": "semaphore"}).content.decode()
    assert re.findall(r'<tr data-name="([^"]+)"', page) == ["order:pool"]
    empty = viewer.get(LIST, {"q": "nothing"}).content.decode()
    assert "No locks whose name starts with “nothing” are held right now." in empty
    for primitive in primitives:
        primitive.release()


def test_pages_follow_the_cursor_and_never_load_everything(viewer: Client) -> None:
    locks = [Lock(f"page:{index:03d}", timeout=60) for index in range(120)]
    for lock in locks:
        assert lock.acquire()
    seen: list[str] = []
    url: str | None = f"{LIST}?q=page:"
    sizes = []
    while url is not None:
        page = viewer.get(url).content.decode()
        names = re.findall(r'<tr data-name="([^"]+)"', page)
        sizes.append(len(names))
        seen.extend(names)
        found = re.search(r'<a href="([^"]+)" class="drl-next">', page)
        url = found.group(1).replace("&amp;", "&") if found else None
        if url is not None:
            assert "First page" not in page or len(sizes) > 1
    assert sizes == [50, 50, 20]
    assert sorted(seen) == sorted(lock.name for lock in locks)
    for lock in locks:
        lock.release()


def test_holder_metadata_and_names_are_escaped(releaser: Client) -> None:
    lock = Lock(
        "<script>alert('name')</script>",
        timeout=60,
        metadata={"label": "<script>alert('label')</script>", "request": "<b>GET</b>"},
    )
    assert lock.acquire()
    page = releaser.get(LIST).content.decode()
    assert "<script>alert(" not in page and "<b>GET</b>" not in page
    assert "&lt;script&gt;alert(&#x27;label&#x27;)&lt;/script&gt;" in page
    confirm = releaser.get(release_url(lock).replace("<", "%3C").replace(">", "%3E"))
    assert "<script>alert(" not in confirm.content.decode()
    lock.release()


def test_breadcrumbs_use_the_markup_of_the_running_django(viewer: Client) -> None:
    page = viewer.get(LIST).content.decode()
    if django.VERSION >= (6, 1):
        assert '<ol class="breadcrumbs">' in page and 'aria-current="page"' in page
    else:
        assert '<div class="breadcrumbs">' in page and "&rsaquo;" in page
    assert 'href="/admin/"' in page and 'href="/admin/django_redis_locks/"' in page


def test_a_custom_admin_site_links_within_itself(held: Lock) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get("/custom-admin/django_redis_locks/livelock/").content.decode()
    assert "order:17" in page
    assert 'href="/custom-admin/"' in page
    assert "/custom-admin/django_redis_locks/livelock/release/?" in page
    assert 'href="/admin/' not in page.split('<div id="content"')[-1].split("</form>")[0]


def test_redis_failure_shows_an_error_not_a_crash(viewer: Client, settings, make_server) -> None:
    server = make_server()
    url = server.url
    server.stop()
    settings.CACHES = {**settings.CACHES, "locks": {**settings.CACHES["locks"], "LOCATION": url}}
    response = viewer.get(LIST)
    assert response.status_code == 200
    assert "Redis could not be reached" in response.content.decode()


# -- permissions ------------------------------------------------------------------------------
def test_anonymous_users_are_sent_to_the_login_page(held: Lock) -> None:
    for url in (LIST, release_url(held)):
        response = Client().get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    response = Client().post(RELEASE, {"kind": "lock", "name": held.name, "holder": hid(held)})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert held.owned()


def test_staff_without_the_view_permission_get_403_even_by_direct_url(held: Lock) -> None:
    client = staff("nobody")
    assert client.get(LIST).status_code == 403
    assert client.get(release_url(held)).status_code == 403
    assert f'href="{LIST}"' not in client.get("/admin/").content.decode()


def test_viewers_see_no_release_link_and_cannot_release(viewer: Client, held: Lock) -> None:
    page = viewer.get(LIST).content.decode()
    assert "order:17" in page and "Force-release this hold" not in page
    assert viewer.get(release_url(held)).status_code == 403
    data = {"kind": "lock", "name": held.name, "holder": hid(held)}
    assert viewer.post(RELEASE, data).status_code == 403
    assert held.owned()


# -- force release ----------------------------------------------------------------------------
def test_release_asks_for_confirmation_first(releaser: Client, held: Lock) -> None:
    response = releaser.get(release_url(held))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Are you sure you want to force-release the lock “order:17”" in page
    assert hid(held) in page and "shop.views.charge" in page
    assert 'type="submit" value="Yes, release it"' in page and "No, take me back" in page
    # What the holder does (not a view's hold: LockLost when it returns).
    assert "raises <code>LockLost</code> when it returns" in page
    assert held.owned()  # a GET changes nothing


def test_the_confirmation_says_what_a_views_holder_answers(releaser: Client, settings: Any) -> None:
    lock = Lock(
        "order:18", timeout=60, metadata={"label": "shop.views.charge", "request": "POST /pay/18/"}
    )
    assert lock.acquire()
    try:
        page = releaser.get(release_url(lock)).content.decode()
        assert "This is the hold of a view (POST /pay/18/)" in page
        assert "still answers its own response, and logs the loss" in page
        settings.DJANGO_REDIS_LOCKS = {**settings.DJANGO_REDIS_LOCKS, "VIEW_ON_LOCK_LOST": "raise"}
        page = releaser.get(release_url(lock)).content.decode()
        assert "answers HTTP 500" in page
    finally:
        lock.release()


def test_release_needs_a_csrf_token(held: Lock) -> None:
    client = Client(enforce_csrf_checks=True)
    user = User.objects.create_user("csrf", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__endswith="livelock"))
    client.force_login(user)
    data = {"kind": "lock", "name": held.name, "holder": hid(held)}
    assert client.post(RELEASE, data).status_code == 403  # no token
    assert held.owned()
    confirm = client.get(release_url(held)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', confirm)
    assert token is not None
    response = client.post(RELEASE, {**data, "csrfmiddlewaretoken": token.group(1)})
    assert response.status_code == 302
    assert not held.locked()


def test_release_evicts_exactly_the_shown_hold_audits_and_tells_the_holder(
    releaser: Client, held: Lock
) -> None:
    received: list[dict[str, Any]] = []

    def receive(sender: Any, **kwargs: Any) -> None:
        received.append(kwargs)

    hold_force_released.connect(receive)
    try:
        data = {"kind": "lock", "name": held.name, "holder": hid(held)}
        response = releaser.post(RELEASE, data, follow=True)
    finally:
        hold_force_released.disconnect(receive)
    assert response.redirect_chain[-1][0].startswith(LIST)
    page = response.content.decode()
    assert f"Released the lock &#x27;order:17&#x27; held by {data['holder']}" in page
    assert not held.locked()
    with pytest.raises(LockLost):
        held.ensure_held()
    entry = LogEntry.objects.get()
    assert entry.user.username == "releaser" and entry.action_flag == DELETION
    assert "order:17" in entry.object_repr and data["holder"] in entry.change_message
    assert received == [
        {
            "signal": hold_force_released,
            "kind": "lock",
            "name": "order:17",
            "holder_id": data["holder"],
            "fence": None,
            "label": None,
            "reason": None,
            "retry_after": None,
            "by": "admin:releaser",
            "waited": None,
            "held": None,  # (the forcing process knows neither)
            "metric_name": None,
            "handed_over": None,
        }
    ]


def test_a_newer_holder_is_never_evicted_by_a_stale_page(releaser: Client) -> None:
    old = Lock("stale", timeout=60)
    assert old.acquire()
    shown = {"kind": "lock", "name": "stale", "holder": hid(old)}
    old.release()
    new = Lock("stale", timeout=60)
    assert new.acquire()
    response = releaser.post(RELEASE, shown, follow=True)
    assert "is no longer held by" in response.content.decode()
    assert new.owned()
    assert not LogEntry.objects.exists()
    new.release()


def test_semaphore_holder_release_leaves_the_others(releaser: Client) -> None:
    first = Semaphore("pool", 2, timeout=60)
    second = Semaphore("pool", 2, timeout=60)
    assert first.acquire() and second.acquire()
    data = {"kind": "semaphore", "name": "pool", "holder": hid(first)}
    assert "Force-release the semaphore" in releaser.get(RELEASE, data).content.decode()
    assert releaser.post(RELEASE, data).status_code == 302
    with pytest.raises(LockLost):
        first.refresh()
    assert second.held() and second.count() == 1
    second.release()


@pytest.mark.parametrize(
    "query",
    [
        {"kind": "lock", "name": "", "holder": "0123456789abcdef"},
        {"kind": "lock", "name": "x", "holder": "not-an-id"},
        {"kind": "table", "name": "x", "holder": "0123456789abcdef"},
    ],
)
def test_bad_release_requests_are_refused_with_a_message(releaser: Client, query) -> None:
    response = releaser.get(RELEASE, query, follow=True)
    assert response.redirect_chain and response.status_code == 200
    page = response.content.decode()
    assert 'class="error"' in page and ("Cannot release" in page or "Unknown kind" in page)
