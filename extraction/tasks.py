"""Celery tasks: thin. Each takes ids, calls the pipeline, and is safe to run twice (acks_late, and
the embedded broker may lose or repeat a delivery): every claim goes through the database."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_init, worker_process_init

from extraction import lifecycle, pipeline


@shared_task(name="extraction.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    return pipeline.sweep()


@shared_task(name="extraction.run_batch", ignore_result=True)
def run_batch(batch_id: int) -> str:
    return pipeline.run_batch(batch_id).status


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
    return lifecycle.broker_cleanup()


@worker_init.connect
def _load_embedder_before_fork(**_kwargs) -> None:
    """Load the local embedding model once in the worker's main process, before the pool forks:
    children share it copy-on-write instead of each spending ~6 s (and memory) loading their own.
    No inference happens here, so no torch thread pool exists yet to be broken by fork."""
    from django.conf import settings

    if settings.EMBEDDER == "openai":
        return
    try:
        from memory_admin.embeddings import get_embedder

        get_embedder()
    except Exception:  # noqa: BLE001 - children load it themselves then
        logging.getLogger(__name__).warning("embedding preload failed", exc_info=True)


@worker_process_init.connect
def _warm_embedder(**_kwargs) -> None:
    """First inference in each child (cheap once the model is loaded): keeps the first batch's
    latency and lease predictable."""
    from django.conf import settings

    if settings.EMBEDDER == "openai":
        return
    try:
        from memory_admin.embeddings import embed

        embed(["warm up"])
        logging.getLogger(__name__).info("embedding model warm")
    except Exception:  # noqa: BLE001 - a failed warm-up is retried by the first real use
        logging.getLogger(__name__).warning("embedding warm-up failed", exc_info=True)
