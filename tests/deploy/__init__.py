"""The deployment tier (``pytest -m deploy``): ``@redis_lock`` under the servers Django
projects deploy with, as separate processes on the test's own Redis server.

- Celery workers with the prefork, threads and gevent pools;
- gunicorn with sync, gthread and gevent workers, and uvicorn workers serving async views
  through Django's ASGI application;
- Django's task framework with a database worker (``db_worker``) on an SQLite file.

Each runs the small project in :mod:`tests.deploy.project`; the checks are in
:mod:`tests.deploy.scenarios`, the figures go to ``$DRL_ARTIFACTS/deploy-figures.json``.
"""
