"""URLs for the admin tests: Django's default admin site and a custom one side by side."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from django_redis_locks.admin import LiveLockAdmin
from django_redis_locks.models import LiveLock

custom_site = admin.AdminSite(name="custom_admin")
custom_site.register(LiveLock, LiveLockAdmin)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("custom-admin/", custom_site.urls),
]
