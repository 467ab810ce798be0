"""The Django project the deployment tier serves: settings from the environment, views,
Celery tasks, Django tasks, WSGI and ASGI entry points, and a task client.

Every decorated function runs :func:`tests.deploy.project.section.run`, which appends one JSON
line per run to ``$DRL_DEPLOY_LOG``.
"""
