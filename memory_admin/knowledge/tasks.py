"""Celery tasks of ingestion: thin, they take ids and call the crawl. `knowledge.crawl` is routed to the
bulk queue (memory_admin/celery.py), which workers fetch after interactive work, so a long crawl never
starves conversation extraction; each task visits a few documents and sends the next step."""

from __future__ import annotations

from celery import shared_task

from memory_admin.knowledge import services
from memory_admin.knowledge.crawl import crawl_step


@shared_task(name="knowledge.crawl", ignore_result=True)
def crawl(source_id: str) -> bool:
    more = crawl_step(source_id)
    if more:
        from memory_admin import celery

        celery.dispatch(services.CRAWL_TASK, source_id)
    return more


@shared_task(name="knowledge.refresh_due", ignore_result=True)
def refresh_due() -> int:
    return services.refresh_due()
