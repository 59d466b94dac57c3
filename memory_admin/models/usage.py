"""How much agents use the memory: reads per tenant, day and kind (the overview's usage chart)."""

from __future__ import annotations

from django.db import models

from memory_admin.models.tenancy import Tenant


class UsageDay(models.Model):
    """One row per tenant, day (UTC) and kind of read, its count added to by the access-count flush
    (services.access_counts: one upsert per flush, never a write per request). No memory user and no
    content: counts only, so erasing a user has nothing here to erase."""

    class Kind(models.TextChoices):
        SEARCH = "search"
        CONTEXT = "context"
        FACT = "fact"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    count = models.BigIntegerField(default=0)

    class Meta:
        db_table = "memory_admin_usage_day"
        constraints = [models.UniqueConstraint(fields=["tenant", "day", "kind"], name="usage_day_unique")]

    def __str__(self) -> str:
        return f"{self.kind} on {self.day}: {self.count}"
