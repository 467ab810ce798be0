"""The fault-injection suite (issue 7): ``pytest -m chaos`` (bounded, in CI), ``pytest -m slow``.

Every scenario runs on redis-server processes the tests start themselves, with real worker
processes, and logs its figures to ``$DRL_ARTIFACTS/chaos-figures.json`` (see conftest).
"""
