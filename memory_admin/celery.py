"""The Celery application: tasks live in the `extraction` package; beat runs the schedule below."""

import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab
from kombu import Queue
from kombu.transport import TRANSPORT_ALIASES

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")

# The embedded broker (Postgres via SQLAlchemy) needs two fixes to kombu's transport; see
# extraction/broker.py. Registered before any connection is made, in every process (web, worker, beat).
TRANSPORT_ALIASES["sqla"] = "extraction.broker:Transport"
TRANSPORT_ALIASES["sqlalchemy"] = "extraction.broker:Transport"


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


app = Celery("memory_admin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["extraction"])

# Two queues, both consumed by every worker: batches and closes do not wait behind a backlog of
# sweeps (after a restart beat may have queued dozens), since workers take from the queues in turn.
app.conf.task_queues = (Queue("celery"), Queue("extraction"))
app.conf.task_default_queue = "celery"
app.conf.task_routes = {
    "extraction.run_batch": {"queue": "extraction"},
    "extraction.close_thread": {"queue": "extraction"},
    "extraction.build_episode": {"queue": "extraction"},
}

# Beat: the sweeper is the heartbeat of extraction (due threads, lost tasks, expired leases), so it
# runs every couple of seconds; each run is a few indexed queries when there is nothing to do.
app.conf.beat_schedule = {
    "extraction-sweep": {
        "task": "extraction.sweep",
        "schedule": timedelta(seconds=_seconds("EXTRACTION_SWEEP_SECONDS", 2)),
        # A sweep that waited longer than a few ticks is obsolete: the next one does the same work.
        "options": {"expires": max(5.0, 4 * _seconds("EXTRACTION_SWEEP_SECONDS", 2))},
    },
    "episodes-idle": {
        "task": "extraction.episodes_sweep",
        "schedule": timedelta(seconds=_seconds("EPISODE_SWEEP_SECONDS", 30)),
        "options": {"expires": 120},
    },
    "lifecycle-gc-daily": {
        "task": "extraction.lifecycle_gc_all",
        "schedule": crontab(hour=3, minute=17),
    },
    "contradiction-scan-hourly": {
        "task": "extraction.contradiction_scan_all",
        "schedule": crontab(minute=41),
    },
    "broker-cleanup-hourly": {
        "task": "extraction.broker_cleanup",
        "schedule": crontab(minute=7),
    },
}
