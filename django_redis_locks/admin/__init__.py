"""The admin page of live locks and semaphore holders, with a guarded force-release.

It hangs off the unmanaged :class:`~django_redis_locks.models.LiveLock` model, so it appears
in the admin index under the app and uses real permissions (``view_livelock`` to see it,
``force_release_livelock`` to release). Every view checks its own permission; URLs and
context come from ``self.admin_site``, so it works on custom admin sites too. Everything it
shows comes from :mod:`django_redis_locks.inspection`, a page at a time.
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, path

from django_redis_locks.models import LiveLock

from .hot import HotList
from .live import LiveList
from .release import Release

__all__ = ["LiveLockAdmin"]


@admin.register(LiveLock)
class LiveLockAdmin(LiveList, HotList, Release):
    """Lists live locks and semaphores from Redis, and the most contended names;
    force-releases one hold, or every hold of one process."""

    # -- URLs ----------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "",
                self.admin_site.admin_view(self.live_view),
                name="{}_{}_changelist".format(*info),
            ),
            path(
                "release/",
                self.admin_site.admin_view(self.release_view),
                name="{}_{}_release".format(*info),
            ),
            path(
                "release/process/",
                self.admin_site.admin_view(self.release_process_view),
                name="{}_{}_release_process".format(*info),
            ),
            path(
                "hot/",
                self.admin_site.admin_view(self.hot_view),
                name="{}_{}_hot".format(*info),
            ),
        ]
