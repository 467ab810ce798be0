"""``/sync/<kind>/<name>/`` (WSGI workers) and ``/async/<kind>/<name>/`` (ASGI workers), for
the kinds of :mod:`tests.deploy.project.section`, and ``ping/`` to see the workers."""

from __future__ import annotations

from django.urls import path

from tests.deploy.project import views

urlpatterns = [
    path("sync/ping/", views.ping),
    path("sync/locked/<str:name>/", views.locked),
    path("sync/bare/<str:name>/", views.bare),
    path("sync/attempt/<str:name>/", views.attempt),
    path("sync/renewed/<str:name>/", views.renewed),
    path("async/ping/", views.aping),
    path("async/locked/<str:name>/", views.alocked),
    path("async/bare/<str:name>/", views.abare),
    path("async/attempt/<str:name>/", views.aattempt),
    path("async/renewed/<str:name>/", views.arenewed),
]
