"""The Celery application: tasks live in the `extraction` package; beat runs the schedule below."""

import logging
import os
import time
from datetime import timedelta

from celery import Celery
from celery.beat import PersistentScheduler
from celery.schedules import crontab
from celery.signals import before_task_publish
from kombu import Queue
from kombu.transport import TRANSPORT_ALIASES

from memory_admin import config

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")

# The embedded broker: Postgres through the transport in extraction/broker.py. Registered before any
# connection is made, in every process (web, worker, beat); the `sqla+` URLs of kombu's SQLAlchemy
# transport, the former default, reach it too.
for _alias in ("pg", "sqla", "sqlalchemy"):
    TRANSPORT_ALIASES[_alias] = "extraction.broker:Transport"


def _seconds(name: str, default: float) -> float:
    return config.get(name)


log = logging.getLogger("memory_admin.beat")


class Scheduler(PersistentScheduler):
    """Beat's scheduler, made to survive a broker/database outage.

    Stock beat creates one producer and one broker connection for its whole life. After an outage it
    kept publishing through the dead ones (`SchedulingError ... channel disconnected` every tick,
    forever: nothing swept again). Here a failed publish drops both, so the next tick connects
    afresh (the transport fix in extraction/broker.py also lets the producer reconnect in place).
    As a last resort, a beat that has failed to publish anything for BEAT_GIVE_UP_SECONDS exits with
    status 3, and its supervisor (`manage.py up`, systemd, Kubernetes) starts a fresh process.
    """

    give_up_seconds = _seconds("BEAT_GIVE_UP_SECONDS", 300)

    def __init__(self, *args, **kwargs):
        self._failing_since: float | None = None
        super().__init__(*args, **kwargs)

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        try:
            result = super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        except Exception:
            self._drop_publisher()
            now = time.monotonic()
            self._failing_since = self._failing_since or now
            if now - self._failing_since > self.give_up_seconds:
                log.critical(
                    "beat: nothing published for %.0f s; exiting so a fresh beat is started", now - self._failing_since
                )
                try:
                    self.close()
                finally:
                    os._exit(3)
            raise
        if self._failing_since is not None:
            log.warning("beat: publishing again after %.0f s of failures", time.monotonic() - self._failing_since)
            self._failing_since = None
        return result

    def _ensure_connected(self):
        """Stock beat waits up to 30 s between attempts, so it kept sweeping half a minute after the
        database was back; 5 s at most here. Still gives up after broker_connection_max_retries
        (the exception ends beat, and its supervisor starts a new one)."""

        def _error_handler(exc, interval):
            log.error("beat: broker unreachable (%s); trying again in %.0f s", type(exc).__name__, interval)

        return self.connection.ensure_connection(
            _error_handler,
            self.app.conf.broker_connection_max_retries,
            interval_start=1,
            interval_step=1,
            interval_max=5,
        )

    def _drop_publisher(self) -> None:
        self.__dict__.pop("producer", None)
        connection = self.__dict__.pop("connection", None)
        if connection is not None:
            try:
                connection.collect()
            except Exception:  # noqa: BLE001 - the connection is broken already; only forget it
                log.debug("beat: releasing a broken connection failed", exc_info=True)


app = Celery("memory_admin")
# Request ids in task headers and Celery's log format, the metrics directory, tracing per process.
from memory_admin import metrics, requestlog, tracing  # noqa: E402
from memory_admin.services import heartbeats  # noqa: E402

requestlog.connect_celery()
metrics.connect_celery()
tracing.connect_celery()
heartbeats.connect_celery()  # a worker's progress: liveness that does not wait in a queue
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.beat_scheduler = Scheduler
app.conf.broker_connection_retry_on_startup = True
app.autodiscover_tasks(["extraction", "memory_admin.knowledge"])

# Three queues, all consumed by every worker unless it is told otherwise (-Q). `control` carries what
# proves the background is alive and keeps it moving (heartbeats, sweeps, housekeeping), so it never
# waits behind work; `interactive` what a user waits for (a batch due now, a thread closed); `bulk`
# what may lag (entity drawing, re-embedding, imports, the daily and hourly scans). The embedded
# broker fetches in that order (extraction/broker.py). Tasks of no route stay on Celery's default
# queue, `celery`, which every worker consumes too (after interactive work, before bulk): it is where
# a client that knows nothing of these routes sends (a bare Celery app, an operator's probe).
CONTROL, INTERACTIVE, BULK = "control", "interactive", "bulk"
app.conf.task_queues = (Queue(CONTROL), Queue(INTERACTIVE), Queue("celery"), Queue(BULK))
app.conf.task_default_queue = "celery"
app.conf.task_routes = {
    **{
        name: {"queue": CONTROL}
        for name in (
            "extraction.worker_heartbeat",
            "extraction.sweep",
            "extraction.entities_sweep",
            "extraction.episodes_sweep",
            "extraction.broker_cleanup",
            "knowledge.refresh_due",
        )
    },
    **{
        name: {"queue": INTERACTIVE}
        for name in (
            "extraction.run_batch",
            "extraction.close_thread",
            "extraction.build_episode",
            "extraction.index_messages",
        )
    },
    **{
        name: {"queue": BULK}
        for name in (
            "extraction.entities_draw",
            "extraction.reembed*",
            "extraction.import*",
            "extraction.lifecycle_gc_all",
            "extraction.contradiction_scan_all",
            "knowledge.crawl",
            "knowledge.entities",
        )
    },
}


@before_task_publish.connect
def _stamp_published_at(headers=None, **_kwargs) -> None:
    """When the message was sent: queue_stats() reads the age of a Redis queue's oldest message from
    it (the embedded broker records the time itself)."""
    if headers is not None:
        headers.setdefault("published_at", time.time())


EPISODE_SWEEP_SECONDS = _seconds("EPISODE_SWEEP_SECONDS", 30)

# Beat: the sweeper is the heartbeat of extraction (due threads, lost tasks, expired leases), so it
# runs every couple of seconds; each run is a few indexed queries when there is nothing to do.
app.conf.beat_schedule = {
    "extraction-sweep": {
        "task": "extraction.sweep",
        "schedule": timedelta(seconds=_seconds("EXTRACTION_SWEEP_SECONDS", 2)),
        # A sweep that waited longer than a few ticks is obsolete: the next one does the same work.
        "options": {"expires": max(5.0, 4 * _seconds("EXTRACTION_SWEEP_SECONDS", 2))},
    },
    # Messages posted since the last tick become searchable (services/message_index.py), at the pace of
    # the extraction sweep; a tick with nothing due is one probe of a partial index. Runs in parallel
    # skip each other's rows.
    "messages-index": {
        "task": "extraction.index_messages",
        "schedule": timedelta(seconds=_seconds("EXTRACTION_SWEEP_SECONDS", 2)),
        "options": {"expires": max(5.0, 4 * _seconds("EXTRACTION_SWEEP_SECONDS", 2))},
    },
    "episodes-idle": {
        "task": "extraction.episodes_sweep",
        "schedule": timedelta(seconds=EPISODE_SWEEP_SECONDS),
        "options": {"expires": 120},
    },
    # Entities of facts whose after-commit task was lost (services/entity_draw.py).
    "entities-sweep": {
        "task": "extraction.entities_sweep",
        "schedule": timedelta(seconds=_seconds("ENTITY_SWEEP_SECONDS", 30)),
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
    # Trained knowledge: the sources whose refresh interval has passed (memory_admin/knowledge/).
    "knowledge-refresh": {
        "task": "knowledge.refresh_due",
        "schedule": timedelta(seconds=_seconds("KNOWLEDGE_REFRESH_SWEEP_SECONDS", 60)),
        "options": {"expires": 120},
    },
    "broker-cleanup-hourly": {
        "task": "extraction.broker_cleanup",
        "schedule": crontab(minute=7),
    },
    # The access log past ACCESS_LOG_RETENTION_DAYS (services/access_counts.py).
    "access-log-prune-daily": {
        "task": "extraction.access_log_prune",
        "schedule": crontab(hour=3, minute=47),
    },
}


# The tasks sent every few seconds or minutes (beat's, and each worker's own heartbeat): Celery's routine
# lines about them wait for LOG_LEVEL=DEBUG.
requestlog.quiet_heartbeats(
    frozenset(entry["task"] for entry in app.conf.beat_schedule.values() if isinstance(entry["schedule"], timedelta))
    | {"extraction.worker_heartbeat"}
)


def dispatch(task: str, *args: object) -> bool:
    """Send a task by name; never fail the caller: the database is the source of truth, and the sweeper
    dispatches again what a lost send left behind (the broker down, say). True if it was sent."""
    try:
        app.send_task(task, args=list(args))
    except Exception:  # noqa: BLE001 - a lost dispatch is recovered by the sweeper
        logging.getLogger("memory_admin.dispatch").warning(
            "could not dispatch %s%s; the sweeper will retry", task, args, exc_info=True
        )
        return False
    return True


def dispatch_batches(batch_ids: list[int]) -> None:
    """Send run_batch for each pending batch and record when it was sent (`dispatched_at`, after the
    send: the message is older than the record). The sweeper sends a batch again only when that
    message is lost (extraction.pipeline.recover_batches), never while it waits in the queue."""
    from django.utils import timezone

    # Inside: this module is loaded by memory_admin/__init__, before Django's apps are ready.
    from memory_admin.models import ExtractionBatch

    sent = [pk for pk in dict.fromkeys(batch_ids) if dispatch("extraction.run_batch", pk)]
    if sent:
        ExtractionBatch.objects.filter(
            pk__in=sent, status=ExtractionBatch.Status.PENDING, dispatched_at__isnull=True
        ).update(dispatched_at=timezone.now())
