"""Heartbeats: background work records that it ran (one upsert, timed by the database's clock).

Three kinds of row, all in ops_heartbeat:

* `sweep`: beat's extraction sweep completed (some worker ran it).
* `worker`: some worker ran a `worker_heartbeat` task (they travel on the `control` queue).
* `progress:<worker node name>`: that worker started or finished a task. Written by the worker's
  own processes through Celery's task_prerun / task_postrun signals, at most once a second per
  process, so a worker that is chewing through a backlog proves it is alive however long the queue
  is in front of the next heartbeat (the supervisor and readiness read "heartbeat OR progress").
"""

from __future__ import annotations

import os
import time

from django.db import connection

SWEEP = "sweep"
WORKER = "worker"
PROGRESS = "progress:"  # + the worker's node name (e.g. `interactive@host`)
PROGRESS_EVERY_SECONDS = 1.0


def heartbeat_record(name: str, detail: str = "") -> None:
    """Mark `name` as having run now. One statement; the database's clock, so that ages read by any
    web server (selectors.health) do not depend on the hosts' clocks agreeing."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ops_heartbeat (name, last_at, detail) VALUES (%s, now(), %s) "
            "ON CONFLICT (name) DO UPDATE SET last_at = EXCLUDED.last_at, detail = EXCLUDED.detail",
            [name, detail[:200]],
        )


def progress_name(nodename: str) -> str:
    return f"{PROGRESS}{nodename}"[:40]


_last_progress: dict[str, float] = {}  # per node name, in this process: when the row was last written


def progress_record(nodename: str, *, now: float | None = None) -> bool:
    """The worker `nodename` moved (a task started or finished in this process). Writes its row at
    most once every PROGRESS_EVERY_SECONDS per process; returns whether it wrote. Never raises: a
    task's outcome must not depend on this bookkeeping (a database outage is reported elsewhere)."""
    now = time.monotonic() if now is None else now
    if now - _last_progress.get(nodename, float("-inf")) < PROGRESS_EVERY_SECONDS:
        return False
    _last_progress[nodename] = now
    try:
        heartbeat_record(progress_name(nodename), f"pid {os.getpid()}")
    except Exception:  # noqa: BLE001 - see the docstring
        connection.close()
        return False
    return True


def _on_task(sender: object = None, task: object = None, **_kwargs: object) -> None:
    task = task or sender
    request = getattr(task, "request", None)
    if request is None or request.is_eager or not request.hostname:
        return  # run in-process (CELERY_TASK_ALWAYS_EAGER, tests): no worker to speak for
    progress_record(request.hostname)


def connect_celery() -> None:
    """Called once per process by memory_admin.celery; only worker processes ever fire these."""
    from celery.signals import task_postrun, task_prerun

    task_prerun.connect(_on_task, weak=False, dispatch_uid="memory_admin.progress.prerun")
    task_postrun.connect(_on_task, weak=False, dispatch_uid="memory_admin.progress.postrun")
