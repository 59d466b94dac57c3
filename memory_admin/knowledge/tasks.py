"""Celery tasks of ingestion: thin, they take ids and call the crawl. `knowledge.crawl` is routed to the
bulk queue (memory_admin/celery.py), which workers fetch after interactive work, so a long crawl never
starves conversation extraction; each task visits a few documents and sends the next step."""

from __future__ import annotations

from celery import shared_task

from memory_admin import celery
from memory_admin.knowledge import entities as knowledge_entities
from memory_admin.knowledge import services
from memory_admin.knowledge.crawl import crawl_step


@shared_task(name="knowledge.crawl", ignore_result=True)
def crawl(source_id: str) -> bool:
    more = crawl_step(source_id)
    # The next step, or, the walk done, the drawing of the new chunks' entities (bulk queue too).
    celery.dispatch(services.CRAWL_TASK if more else knowledge_entities.TASK, source_id)
    return more


@shared_task(name="knowledge.entities", ignore_result=True)
def entities(source_id: str) -> bool:
    _drawn, more = knowledge_entities.chunks_draw(source_id)
    if more:
        celery.dispatch(knowledge_entities.TASK, source_id)
    return more


@shared_task(name="knowledge.refresh_due", ignore_result=True)
def refresh_due() -> int:
    return services.refresh_due()
