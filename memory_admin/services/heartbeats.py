"""Heartbeats: background work records that it ran (one upsert, timed by the database's clock)."""

from __future__ import annotations

from django.db import connection

SWEEP = "sweep"
WORKER = "worker"


def heartbeat_record(name: str, detail: str = "") -> None:
    """Mark `name` as having run now. One statement; the database's clock, so that ages read by any
    web server (selectors.health) do not depend on the hosts' clocks agreeing."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ops_heartbeat (name, last_at, detail) VALUES (%s, now(), %s) "
            "ON CONFLICT (name) DO UPDATE SET last_at = EXCLUDED.last_at, detail = EXCLUDED.detail",
            [name, detail[:200]],
        )
