"""``@redis_lock`` under each deployment of :mod:`tests.deploy.conftest` (gunicorn's sync,
gthread, gevent and uvicorn workers; Celery's prefork, threads and gevent pools; Django's
``db_worker``), as separate processes: mutual exclusion, the documented contention answers,
renewal past the TTL, and a SIGKILLed holder freeing the name within its TTL.

The SIGKILL check comes last: with Celery's threads and gevent pools it kills the worker.
"""

from __future__ import annotations

import pytest

from tests.deploy import scenarios
from tests.deploy.deployment import Deployment

pytestmark = pytest.mark.deploy


@pytest.mark.timeout(150)  # the first check of a deployment also starts it
def test_concurrent_calls_never_overlap_and_the_same_load_unlocked_does(
    deployment: Deployment,
) -> None:
    scenarios.no_overlap(deployment)


@pytest.mark.timeout(90)
def test_a_taken_lock_is_refused_as_documented_and_a_blocking_call_waits_then_runs(
    deployment: Deployment,
) -> None:
    scenarios.contention(deployment)


@pytest.mark.timeout(90)
def test_a_renewed_hold_outlives_its_ttl_and_refuses_every_other_caller(
    deployment: Deployment,
) -> None:
    scenarios.renewal(deployment)


@pytest.mark.timeout(90)
def test_a_sigkilled_holder_frees_the_name_within_its_ttl(deployment: Deployment) -> None:
    scenarios.sigkill(deployment)
