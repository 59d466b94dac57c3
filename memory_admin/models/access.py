"""The access log: which key read which fact, how and when (services.access_counts writes it off the
request path; the beat prunes it past ACCESS_LOG_RETENTION_DAYS)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from memory_admin.models.memory import Fact
from memory_admin.models.tenancy import ApiKey, MemoryUser, Tenant


class ReadVia(models.TextChoices):
    """The door a read came through."""

    SEARCH = "search", "search hit"
    CONTEXT = "context", "context block"
    MCP_SEARCH = "mcp_search", "MCP search"
    MCP_CONTEXT = "mcp_context", "MCP context"


class FactRead(models.Model):
    """A key read a fact `reads` times through one door, the latest at `read_at`. Reads of the same fact
    by the same key and door within one flush of the accumulator (about a second) are one row. The
    fact's owner is copied in, so that a user's log is one index range; erasing the user (or the fact)
    removes its rows."""

    Via = ReadVia
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    fact = models.ForeignKey(Fact, on_delete=models.CASCADE, related_name="reads")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="reads")
    via = models.CharField(max_length=12, choices=Via.choices)
    reads = models.IntegerField(default=1)
    read_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["fact", "-read_at"], name="fact_read_by_fact"),
            models.Index(fields=["api_key", "-read_at"], name="fact_read_by_key"),
            models.Index(fields=["memory_user", "-read_at"], name="fact_read_by_user"),
            models.Index(fields=["tenant", "-read_at"], name="fact_read_by_tenant"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(via__in=ReadVia.values), name="fact_read_via_valid"),
            models.CheckConstraint(condition=Q(reads__gte=1), name="fact_read_reads_positive"),
        ]

    def __str__(self) -> str:
        return f"key {self.api_key_id} read {self.fact_id} ({self.via})"
