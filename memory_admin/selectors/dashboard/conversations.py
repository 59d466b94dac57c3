"""Conversations: threads, their messages, and the facts each batch drew from them."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from memory_admin.models import ExtractionBatch, Fact, Message, Thread
from memory_admin.selectors.access import Principal, get_visible, visible

# --- Conversations: threads, their messages, and the facts each batch drew from them ---------------


def threads(principal: Principal, *, q: str = "", user: str = "") -> QuerySet:
    """Threads, newest first, with their message count (one subquery per listed row)."""
    qs = visible(principal, Thread.objects.all())
    if user:
        qs = qs.filter(memory_user__external_id__icontains=user)
    if q:
        qs = qs.filter(external_id__icontains=q)
    counts = (
        Message.objects.filter(thread=OuterRef("pk")).order_by().values("thread").annotate(n=Count("id")).values("n")
    )
    return qs.annotate(message_count=Coalesce(Subquery(counts), 0)).select_related("memory_user").order_by("-pk")


THREAD_MESSAGES = 500


def thread_view(principal: Principal, thread_id: int) -> dict[str, Any]:
    """One thread: its messages in order (the first THREAD_MESSAGES), each with the facts drawn from it,
    and its extraction batches with their status and facts. Four queries whatever the size."""
    thread = get_visible(principal, Thread.objects.select_related("memory_user"), pk=thread_id)
    messages = list(
        visible(principal, Message.objects.filter(thread=thread)).order_by("created_at", "pk")[:THREAD_MESSAGES]
    )
    # The two ways a fact comes from a thread, as a UNION of two indexed lookups: an OR across the two
    # joins made Postgres scan every fact of the tenant (950 ms at 1M facts).
    drawn = (
        Fact.objects.filter(message__thread=thread)
        .values("pk")
        .union(Fact.objects.filter(batch__thread=thread).values("pk"))
    )
    facts = list(
        visible(principal, Fact.objects.filter(pk__in=drawn))
        .defer("embedding", "search_vector")
        .order_by("created_at", "pk")[:2000]
    )
    batches = list(visible(principal, ExtractionBatch.objects.filter(thread=thread)).order_by("created_at", "pk"))
    by_message: dict[int, list[Fact]] = {}
    by_batch: dict[int, list[Fact]] = {}
    for fact in facts:
        if fact.message_id:
            by_message.setdefault(fact.message_id, []).append(fact)
        if fact.batch_id:
            by_batch.setdefault(fact.batch_id, []).append(fact)
    batch_by_id = {b.pk: b for b in batches}
    for message in messages:
        message.drawn = by_message.get(message.pk, [])
        message.batch_row = batch_by_id.get(message.batch_id)
    for batch in batches:
        batch.drawn = by_batch.get(batch.pk, [])
    # Not "messages": templates read that name as the flash messages (base.html shows them all on top).
    # One account of the thread's extraction, from the same rows the messages show (a message marked
    # extracted with no batch, as imports and the demo seed leave them, is not "no extraction yet").
    states = {status: 0 for status in Message.Status.values}
    for message in messages:
        states[message.status] = states.get(message.status, 0) + 1
    return {
        "thread": thread,
        "thread_messages": messages,
        "batches": batches,
        "truncated": len(messages) == THREAD_MESSAGES,
        "extraction": {
            **states,
            "facts": len({f.pk for f in facts}),
            "without_batch": sum(1 for m in messages if m.status == Message.Status.EXTRACTED and not m.batch_id),
        },
    }
