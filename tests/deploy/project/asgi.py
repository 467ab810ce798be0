"""The ASGI application uvicorn workers serve (the async views run in its event loop)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.deploy.project.settings")
application = get_asgi_application()
