"""The resource of the fencing scenario: the ``Account`` model of docs/guarantees.md.

Only the scenario's worker processes install this app (with a SQLite file they share); the
test settings do not, so it needs no migrations (``migrate --run-syncdb`` creates its table).
"""
