"""Celery tasks: thin. Each takes ids, calls the pipeline, and is safe to run twice (acks_late, and
the embedded broker may lose or repeat a delivery): every claim goes through the database."""

from __future__ import annotations

import logging
import os
import socket
import threading

from celery import shared_task
from celery.signals import worker_init, worker_process_init, worker_ready, worker_shutdown
from django.conf import settings

from extraction import broker, pipeline
from memory_admin.celery import EPISODE_SWEEP_SECONDS, INTERACTIVE, app
from memory_admin.embedding import embed, get_embedder, use_switch_interval
from memory_admin.services import access_counts, entity_draw, lifecycle
from memory_admin.services.heartbeats import SWEEP, WORKER, heartbeat_record
from memory_admin.services.message_index import messages_index

log = logging.getLogger(__name__)


@shared_task(name="extraction.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    result = pipeline.sweep()
    heartbeat_record(SWEEP)  # only a sweep that completed counts (health: the sweep's age)
    return result


@shared_task(name="extraction.worker_heartbeat", bind=True, ignore_result=True)
def worker_heartbeat(self, sender: str) -> None:
    """Published by every worker's heartbeat thread, executed by whichever worker takes it: the row's
    age proves that tasks still travel through the broker and get executed (health: worker age)."""
    heartbeat_record(WORKER, f"sent by {sender}, run by {self.request.hostname or '?'}")


class _HeartbeatPublisher(threading.Thread):
    """In the worker's main process: every WORKER_HEARTBEAT_SECONDS, publish one worker_heartbeat.
    A publish that fails (broker down) is logged and tried again next period; the kombu transport
    reconnects (extraction/broker.py). Expiring messages keep a backlog from piling up heartbeats."""

    def __init__(self, app, hostname: str, period: float):
        super().__init__(name="worker-heartbeat", daemon=True)
        self.app, self.hostname, self.period = app, hostname, period
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.app.send_task(
                    "extraction.worker_heartbeat",
                    args=[self.hostname],
                    expires=max(3 * self.period, 30),
                    retry_policy={"max_retries": 2, "interval_start": 0.5, "interval_step": 1, "interval_max": 2},
                )
            except Exception as exc:  # noqa: BLE001 - the outage is what /health/ready reports
                log.warning("worker heartbeat not published (%s); retrying in %.0f s", type(exc).__name__, self.period)
            self.stopped.wait(self.period)


_publisher: _HeartbeatPublisher | None = None


@worker_ready.connect
def _start_heartbeat(sender=None, **_kwargs) -> None:
    """`sender` is the worker's consumer (main process)."""
    global _publisher
    if settings.WORKER_HEARTBEAT_SECONDS <= 0 or _publisher is not None:
        return
    hostname = getattr(sender, "hostname", None) or f"{socket.gethostname()}:{os.getpid()}"
    _publisher = _HeartbeatPublisher(app, hostname, settings.WORKER_HEARTBEAT_SECONDS)
    _publisher.start()


@worker_shutdown.connect
def _stop_heartbeat(**_kwargs) -> None:
    if _publisher is not None:
        _publisher.stopped.set()


@shared_task(name="extraction.run_batch", ignore_result=True)
def run_batch(batch_id: int) -> str:
    return pipeline.run_batch(batch_id).status


@shared_task(name="extraction.entities_draw", ignore_result=True)
def entities_draw(tenant_id: int | list[str], memory_user_id: int | None = None) -> int:
    """Draw everything due of one owner (a memory user; None: the tenant's shared facts). A list of fact
    ids is a message sent before drawing was per owner: those facts are drawn."""
    if isinstance(tenant_id, list):
        return entity_draw.facts_draw(tenant_id)
    return entity_draw.owner_draw(tenant_id=tenant_id, memory_user_id=memory_user_id)


@shared_task(name="extraction.entities_sweep", ignore_result=True)
def entities_sweep() -> int:
    return entity_draw.sweep()


@shared_task(name="extraction.index_messages", ignore_result=True)
def index_messages() -> int:
    """Embed the messages posted since the last run (services/message_index.py): search finds them then."""

    return messages_index()


@shared_task(name="extraction.close_thread", ignore_result=True)
def close_thread(thread_id: int, outcome: str | None = None) -> str | None:
    episode = pipeline.close_thread(thread_id, outcome=outcome)
    return str(episode.pk) if episode else None


@shared_task(name="extraction.build_episode", ignore_result=True)
def build_episode(thread_id: int) -> str | None:
    episode = pipeline.episode_build(thread_id)
    return str(episode.pk) if episode else None


@shared_task(name="extraction.episodes_sweep", ignore_result=True)
def episodes_sweep() -> int:
    """build_episode for each idle thread; none while the interactive queue still holds messages as
    old as one sweep period (the last sweep's may be among them: sending more would only add
    duplicates to a queue that is not keeping up)."""
    waiting = broker.queue_stats().get(INTERACTIVE)
    if waiting and waiting["depth"] and (waiting["oldest_age_seconds"] or 0) >= EPISODE_SWEEP_SECONDS:
        return 0
    threads = pipeline.idle_threads()
    for thread_id in threads:
        build_episode.delay(thread_id)
    return len(threads)


@shared_task(name="extraction.lifecycle_gc_all", ignore_result=True)
def lifecycle_gc_all() -> dict:
    return lifecycle.lifecycle_gc_all()


@shared_task(name="extraction.contradiction_scan_all", ignore_result=True)
def contradiction_scan_all() -> dict:
    return lifecycle.contradiction_scan_all()


@shared_task(name="extraction.broker_cleanup", ignore_result=True)
def broker_cleanup() -> int:
    return broker.broker_cleanup()


@shared_task(name="extraction.access_log_prune", ignore_result=True)
def access_log_prune() -> int:
    return access_counts.access_log_prune()


@worker_init.connect
@worker_process_init.connect
def _switch_interval(**_kwargs) -> None:
    """The GIL switch interval of the worker (settings.GIL_SWITCH_INTERVAL_MS), in its main process and
    in each pool child: a batch's texts are embedded on helper threads beside the task's Python."""
    use_switch_interval()


@worker_init.connect
def _load_embedder_before_fork(**_kwargs) -> None:
    """Load the local embedding model once in the worker's main process, before the pool forks:
    children share it copy-on-write instead of each spending ~6 s (and memory) loading their own.
    No inference happens here, so no torch thread pool exists yet to be broken by fork."""
    if settings.EMBEDDER == "openai":
        return
    try:
        get_embedder()
    except Exception:  # noqa: BLE001 - children load it themselves then
        log.warning("embedding preload failed", exc_info=True)


@worker_process_init.connect
def _warm_embedder(**_kwargs) -> None:
    """First inference in each child (cheap once the model is loaded): keeps the first batch's
    latency and lease predictable."""
    if settings.EMBEDDER == "openai":
        return
    try:
        embed(["warm up"])
        log.info("embedding model warm")
    except Exception:  # noqa: BLE001 - a failed warm-up is retried by the first real use
        log.warning("embedding warm-up failed", exc_info=True)
