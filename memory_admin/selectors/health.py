"""Health: is the database reachable, and is the background work (beat's sweep, a worker) alive?

Each background activity is in one of four states:

* `ok`: it ran within HEALTH_STALE_SECONDS.
* `starting`: it has never been recorded on this database (a fresh install whose worker and beat
  are still coming up), or this web process started less than HEALTH_STARTUP_GRACE_SECONDS ago
  (the whole stack restarting after a stop: its rows are old, the first sweep is seconds away).
  Ready: answering 503 before the first sweep would fail every start.
* `stale`: it ran once but not within HEALTH_STALE_SECONDS: beat or every worker is dead, or stuck.
  Not ready.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection

from memory_admin.services.heartbeats import SWEEP, WORKER

_PROCESS_STARTED = time.monotonic()
COMPONENTS = (SWEEP, WORKER)
_STALE_REASONS = {
    SWEEP: "no extraction sweep for {age:.0f} s (beat is not scheduling, or no worker runs its tasks)",
    WORKER: "no worker heartbeat for {age:.0f} s (no worker is consuming tasks from the broker)",
}


def database_reachable() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure to reach Postgres is "down"
        return False
    return True


def heartbeat_ages() -> dict[str, float]:
    """Seconds since each background component (sweep, worker) last recorded that it ran, by the
    database's clock; a component never recorded is absent. Raises when the database is down."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, greatest(0, extract(epoch FROM now() - last_at))::float8 FROM ops_heartbeat "
            "WHERE name = ANY(%s)",
            [list(COMPONENTS)],
        )
        return dict(cursor.fetchall())


def background_status() -> tuple[dict[str, dict], list[str]]:
    """Each component's state and age in seconds (None if never recorded), and the reasons it is
    not ready (empty when ready). Ages come from the database's clock, as heartbeats are written."""
    ages = heartbeat_ages()
    in_grace = time.monotonic() - _PROCESS_STARTED < settings.HEALTH_STARTUP_GRACE_SECONDS
    status, reasons = {}, []
    for name in COMPONENTS:
        age = ages.get(name)
        if age is not None and age <= settings.HEALTH_STALE_SECONDS:
            state = "ok"
        elif age is None or in_grace:
            state = "starting"
        else:
            state = "stale"
            reasons.append(_STALE_REASONS[name].format(age=age))
        status[name] = {"status": state, "age_seconds": None if age is None else round(age, 1)}
    return status, reasons
