"""Hypothesis profiles for the property tests: bounded, and derandomized in CI.

``dev`` (the default) draws new examples on each run; a failure prints the seed and the
``@reproduce_failure`` blob to replay it. ``ci`` (when ``CI`` or ``DRL_TEST_DERANDOMIZE`` is
set) draws the same examples on every run, so CI never fails by chance. Neither keeps an
example database (no ``.hypothesis/`` in the checkout).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: Examples per property: the whole file runs in a few seconds.
MAX_EXAMPLES = 200

settings.register_profile(
    "dev",
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("ci", settings.get_profile("dev"), derandomize=True)
settings.load_profile(
    "ci" if os.environ.get("CI") or os.environ.get("DRL_TEST_DERANDOMIZE") else "dev"
)
