"""The deployments under test, one at a time (module scope: started once for its checks),
and their figures.

When a deployment stops, one JSON object with its figures (runs, concurrency, contention
answers, renewal, kill-to-free seconds, wall time, each check's outcome) is appended to
``$DRL_ARTIFACTS/deploy-figures.json`` (default ``test-artifacts/``) and shown in the terminal
summary.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.deploy import web, workers
from tests.deploy.deployment import Deployment, new_namespace
from tests.harness.figures import FiguresFile

D = TypeVar("D", bound=Deployment)
# ("server" is the deployment's server there: gunicorn, celery...)
FIGURES = FiguresFile("deploy", server_key="redis")

DEPLOYMENTS = [
    ("gunicorn", "sync"),
    ("gunicorn", "gthread"),
    ("gunicorn", "gevent"),
    ("gunicorn", "uvicorn"),
    ("celery", "prefork"),
    ("celery", "threads"),
    ("celery", "gevent"),
    ("django-tasks", "db_worker"),
]


def _make(server: str, pool: str, redis_url: str, workdir: Path) -> Deployment:
    namespace = new_namespace()
    if server == "gunicorn":
        lacking = web.missing(pool)
        if lacking:
            pytest.skip(lacking)
        return web.WebDeployment(pool, redis_url, workdir, namespace)
    lacking = workers.missing(server, pool)
    if lacking:
        pytest.skip(lacking)
    if server == "celery":
        return workers.CeleryDeployment(pool, redis_url, workdir, namespace)
    return workers.DbWorkerDeployment(redis_url, workdir, namespace)


@pytest.fixture(scope="module", params=DEPLOYMENTS, ids=[f"{s}-{p}" for s, p in DEPLOYMENTS])
def deployment(
    request: pytest.FixtureRequest, redis_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A running deployment of the test project, stopped (for sure) after its checks."""
    server, pool = request.param
    workdir = tmp_path_factory.mktemp(f"{server}-{pool}")
    yield from running(_make(server, pool, redis_server.url, workdir))


def running(started: D) -> Iterator[D]:
    """Start ``started``, yield it, then stop it for sure and record its figures (the body of
    a deployment fixture)."""
    try:
        started.start()
        yield started
    finally:
        started.close()
        FIGURES.append(started.figures)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    found = getattr(item, "funcargs", {}).get("deployment")
    if isinstance(found, Deployment) and (report.when == "call" or report.failed):
        outcomes = found.figures.setdefault("outcomes", {})
        outcomes[getattr(item, "originalname", item.name)] = report.outcome
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES.written:
        return
    terminalreporter.section("deployment figures")
    keys = (
        "runs",
        "max_concurrency",
        "control_max_concurrency",
        "contention_answers",
        "retry_after",
        "renewal_held_s",
        "renewal_refusals",
        "kill_to_free_s",
    )
    skipped = {"server", "pool", "outcomes", "run", "finished_at", "redis", "python", "cpus"}
    for record in FIGURES.written:
        if record.get("tasks") == "unique":  # figures of their own (tests/deploy/unique.py)
            shown = {k: v for k, v in record.items() if k not in skipped and k != "tasks"}
        else:
            shown = {key: record.get(key) for key in (*keys, "wall_s")}
        terminalreporter.write_line(
            f"{record['server']}-{record['pool']}: "
            + ", ".join(f"{key}={value}" for key, value in shown.items())
            + f"  {record.get('outcomes', {})}"
        )
    terminalreporter.write_line(f"(appended to {FIGURES.path})")
