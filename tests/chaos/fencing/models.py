"""The model of docs/guarantees.md: a balance written only with a larger fence."""

from __future__ import annotations

from django.db import models


class Account(models.Model):
    balance = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    fence = models.BigIntegerField(default=0)  # fences fit in 64 bits

    # Declared, since the app is not in the test settings that mypy's Django plugin reads.
    objects: models.Manager[Account] = models.Manager()

    class Meta:
        app_label = "chaos_fencing"
