"""URLs of the example project."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="index"),
    path("admin/", admin.site.urls),
    path("orders/<int:order_id>/charge/", views.charge, name="charge"),
    path("orders/<int:order_id>/acharge/", views.acharge, name="acharge"),
]
