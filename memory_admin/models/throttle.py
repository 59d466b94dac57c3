"""Rate-limit counters shared by every server process (one fixed window per bucket)."""

from __future__ import annotations

from django.db import models


class ThrottleWindow(models.Model):
    """Hits of one bucket (an API key, a login account, a client address) in one fixed window.

    The table is UNLOGGED (see its migration): counters are worth nothing after a crash, and skipping
    the write-ahead log keeps the one upsert per request cheap. Old windows are swept as hits arrive."""

    pk = models.CompositePrimaryKey("bucket", "window_start")
    bucket = models.CharField(max_length=80)
    window_start = models.BigIntegerField()  # unix seconds, a multiple of the window length
    hits = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["window_start"], name="throttle_window_start")]

    def __str__(self) -> str:
        return f"{self.bucket}@{self.window_start}: {self.hits}"
