"""Operations: when each piece of background work last proved it runs (read by /health/ready)."""

from __future__ import annotations

from django.db import models


class Heartbeat(models.Model):
    """One row per background activity, overwritten each time it runs: `sweep` (the extraction
    sweeper that beat schedules, written when a worker finished a sweep) and `worker` (a heartbeat
    task each worker publishes to the broker every WORKER_HEARTBEAT_SECONDS and some worker then
    consumes: proof that tasks go through the broker and get executed). No tenant: it is about the
    installation, and holds only names, times, a host name and a pid."""

    name = models.CharField(primary_key=True, max_length=40)
    last_at = models.DateTimeField()
    detail = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "ops_heartbeat"

    def __str__(self) -> str:
        return f"{self.name} at {self.last_at:%Y-%m-%d %H:%M:%S}"
