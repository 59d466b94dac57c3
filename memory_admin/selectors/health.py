"""Health: is the database reachable, is the background work (beat's sweep, the workers) moving, and
how much work waits in the broker's queues?

Each background activity is in one of three states:

* `ok`: it ran within HEALTH_STALE_SECONDS. For `worker` that is a heartbeat task run OR any task
  started or finished by any worker (services.heartbeats): a worker working through a long backlog
  is alive, however long the next heartbeat waits in the queue.
* `starting`: it has never been recorded on this database (a fresh install whose worker and beat
  are still coming up), or this web process started less than HEALTH_STARTUP_GRACE_SECONDS ago
  (the whole stack restarting after a stop: its rows are old, the first sweep is seconds away).
  Ready: answering 503 before the first sweep would fail every start.
* `stale`: it ran once but not within HEALTH_STALE_SECONDS: beat or every worker is dead, or stuck.
  Not ready.

The queues are a separate, softer signal: a queue whose oldest message has waited longer than
HEALTH_BACKLOG_SECONDS makes readiness `degraded` (still 200: the web tier serves, the background
is behind but moving). Only a background that does not move at all is a 503.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from extraction.broker import queue_stats
from memory_admin.services.heartbeats import PROGRESS, SWEEP, WORKER

_PROCESS_STARTED = time.monotonic()
COMPONENTS = (SWEEP, WORKER)
_STALE_REASONS = {
    SWEEP: "no extraction sweep for {age:.0f} s (beat is not scheduling, or no worker runs its tasks)",
    WORKER: "no worker heartbeat and no task finished for {age:.0f} s (no worker is consuming tasks from the broker)",
}


def database_reachable() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure to reach Postgres is "down"
        return False
    return True


def heartbeat_ages() -> dict[str, float]:
    """Seconds since each row of ops_heartbeat was last written, by the database's clock: `sweep`,
    `worker` and one `progress:<node>` per worker that ever ran a task; a row never written is
    absent. Raises when the database is down."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, greatest(0, extract(epoch FROM now() - last_at))::float8 FROM ops_heartbeat "
            "WHERE name = ANY(%s) OR name LIKE %s",
            [list(COMPONENTS), PROGRESS + "%"],
        )
        return dict(cursor.fetchall())


def worker_age(ages: dict[str, float]) -> float | None:
    """Seconds since any worker last proved it moves: a heartbeat run, or a task started or finished."""
    moved = [age for name, age in ages.items() if name == WORKER or name.startswith(PROGRESS)]
    return min(moved) if moved else None


def background_status() -> tuple[dict[str, dict], list[str]]:
    """Each component's state and age in seconds (None if never recorded), and the reasons it is
    not ready (empty when ready). Ages come from the database's clock, as heartbeats are written."""
    ages = heartbeat_ages()
    ages_by_component = {SWEEP: ages.get(SWEEP), WORKER: worker_age(ages)}
    in_grace = time.monotonic() - _PROCESS_STARTED < settings.HEALTH_STARTUP_GRACE_SECONDS
    status, reasons = {}, []
    for name in COMPONENTS:
        age = ages_by_component[name]
        if age is not None and age <= settings.HEALTH_STALE_SECONDS:
            state = "ok"
        elif age is None or in_grace:
            state = "starting"
        else:
            state = "stale"
            reasons.append(_STALE_REASONS[name].format(age=age))
        status[name] = {"status": state, "age_seconds": None if age is None else round(age, 1)}
    return status, reasons


@dataclass(frozen=True)
class QueueBacklog:
    name: str
    depth: int
    oldest_age_seconds: float | None

    @property
    def behind(self) -> bool:
        """Its oldest message has waited longer than HEALTH_BACKLOG_SECONDS."""
        age = self.oldest_age_seconds
        return age is not None and age > settings.HEALTH_BACKLOG_SECONDS

    def describe(self) -> str:
        age = "" if self.oldest_age_seconds is None else f", the oldest for {self.oldest_age_seconds:.0f} s"
        return f"queue {self.name}: {self.depth} waiting{age}"


def queue_backlogs() -> list[QueueBacklog] | None:
    """Depth and oldest-message age of each of the broker's queues (extraction.broker.queue_stats),
    by name; None when the broker cannot be read (an outage: the heartbeats say what matters)."""
    try:
        stats = queue_stats()  # the broker's own module knows how to ask it
    except Exception:  # noqa: BLE001 - the broker down is not this answer's failure
        logging.getLogger(__name__).warning("health: the broker's queues could not be read", exc_info=True)
        return None
    if not stats:  # queue_stats' answer when it cannot read the broker (or knows no such broker)
        return None
    return [
        QueueBacklog(
            name,
            int(row.get("depth") or 0),
            None if row.get("oldest_age_seconds") is None else round(float(row["oldest_age_seconds"]), 1),
        )
        for name, row in sorted(stats.items())
    ]


def queues_status() -> tuple[dict[str, dict] | None, list[str]]:
    """The queues as readiness shows them ({name: {depth, oldest_age_seconds}}, None when the broker
    could not be read) and the reasons readiness is `degraded` (a queue behind), empty when none."""
    backlogs = queue_backlogs()
    if backlogs is None:
        return None, []
    shown = {q.name: {"depth": q.depth, "oldest_age_seconds": q.oldest_age_seconds} for q in backlogs}
    return shown, [q.describe() for q in backlogs if q.behind]
