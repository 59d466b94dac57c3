"""Messages, threads, episodes and extraction batches (SPEC §5, §8). Requests never wait on a model."""

from __future__ import annotations

from uuid import UUID

from ninja import Query, Router

from memory_admin.api.schemas import (
    BatchId,
    BatchOut,
    BatchStatus,
    CloseIn,
    CloseOut,
    EpisodeDetailOut,
    EpisodeFilters,
    EpisodePage,
    Identifier,
    Limit,
    MessageItemIn,
    MessagesIn,
    MessagesOut,
    UserId,
)
from memory_admin.models import Episode, ExtractionBatch, Message
from memory_admin.selectors.access import get_visible, memory_user_for, visible
from memory_admin.services.extraction import MessageIn, batch_retry, message_post, thread_close, thread_for

router = Router(tags=["messages and episodes"])


def episode_core(e: Episode) -> dict:
    """What every episode answer holds (the entity page lists episodes with these alone)."""
    return {
        "id": e.pk,
        "user_id": e.memory_user.external_id,
        "thread_id": e.thread.external_id if e.thread else None,
        "started_at": e.started_at,
        "ended_at": e.ended_at,
        "summary": e.summary,
        "outcome": e.outcome,
    }


def _episode_out(e: Episode) -> dict:
    return {
        **episode_core(e),
        "summarizer": e.summarizer,
        "message_count": e.n_messages,
        "fact_count": e.n_facts,
        "created_at": e.created_at,
    }


def _batch_out(b: ExtractionBatch) -> dict:
    return {
        "id": b.pk,
        "user_id": b.memory_user.external_id,
        "thread_id": b.thread.external_id,
        "status": b.status,
        "attempts": b.attempts,
        "error": b.error,
        "extractor": b.extractor,
        "model": b.model,
        "message_count": b.message_count,
        "fact_count": b.fact_count,
        "prompt_tokens": b.prompt_tokens,
        "completion_tokens": b.completion_tokens,
        "cost_usd": float(b.cost_usd),
        "created_at": b.created_at,
        "finished_at": b.finished_at,
    }


def _episodes(principal):
    from django.db.models import Count

    return (
        visible(principal, Episode.objects.all())
        .select_related("memory_user", "thread")
        .annotate(n_messages=Count("messages", distinct=True), n_facts=Count("facts", distinct=True))
    )


@router.post("/users/{user_id}/messages", response={202: MessagesOut})
def post_messages(request, user_id: UserId, payload: MessagesIn):
    user = memory_user_for(request.principal, user_id, create=True)
    result = message_post(
        principal=request.principal,
        memory_user=user,
        thread_id=payload.thread_id,
        messages=[message_in(m) for m in payload.messages],
    )
    return 202, {
        "thread_id": result.thread.external_id,
        "accepted": len(result.messages),
        "message_ids": [m.pk for m in result.messages],
        "pending": result.pending,
        "skipped": result.skipped,
        "redacted": result.redacted,
        "extraction": result.extraction,
        "extract_due_at": result.thread.extract_due_at,
    }


def message_in(m: MessageItemIn) -> MessageIn:
    """A posted message as the service takes it: its text, our role; a chat format's turn without text is
    passed over (`skipped`, reason `no_text`)."""
    content = m.joined_text()
    skip = "no_text" if not content.strip() and m.carries_no_text_by_design() else ""
    return MessageIn(m.stored_role(), content, m.created_at, skip=skip)


@router.post("/users/{user_id}/threads/{thread_id}/close", response={202: CloseOut})
def close_thread(request, user_id: UserId, thread_id: Identifier, payload: CloseIn | None = None):
    user = memory_user_for(request.principal, user_id)
    thread = thread_close(
        principal=request.principal, memory_user=user, thread_id=thread_id, outcome=payload.outcome if payload else None
    )
    return 202, {
        "thread_id": thread.external_id,
        "closed_at": thread.closed_at,
        "extraction": "now" if thread.extract_due_at else "nothing_pending",
        "episode": "scheduled",
    }


@router.get("/users/{user_id}/episodes", response=EpisodePage)
def list_episodes(request, user_id: UserId, filters: Query[EpisodeFilters]):
    user = memory_user_for(request.principal, user_id)
    qs = _episodes(request.principal).filter(memory_user=user)
    if filters.since:
        qs = qs.filter(ended_at__gte=filters.since)
    if filters.until:
        qs = qs.filter(started_at__lt=filters.until)
    if filters.thread_id:
        qs = qs.filter(thread=thread_for(request.principal, user, filters.thread_id))
    if filters.outcome:
        qs = qs.filter(outcome=filters.outcome)
    limit = filters.limit
    offset = int(filters.cursor) if filters.cursor else 0
    rows = list(qs.order_by("-started_at", "-created_at")[offset : offset + limit + 1])
    more = len(rows) > limit
    return {"items": [_episode_out(e) for e in rows[:limit]], "next_cursor": str(offset + limit) if more else None}


@router.get("/episodes/{episode_id}", response=EpisodeDetailOut)
def get_episode(request, episode_id: UUID):
    episode = get_visible(request.principal, _episodes(request.principal), pk=episode_id)
    facts = episode.facts.order_by("created_at")
    messages = Message.objects.filter(episode=episode).order_by("created_at", "id")[:500]
    return {
        **_episode_out(episode),
        "facts": [{"id": f.pk, "content": f.content, "category": f.category, "status": f.status} for f in facts],
        "messages": [
            {"id": m.pk, "role": m.role, "content": m.content, "created_at": m.created_at, "status": m.status}
            for m in messages
        ],
    }


@router.get("/batches", response=list[BatchOut])
def list_batches(request, status: BatchStatus | None = None, limit: Limit = 50):
    qs = visible(request.principal, ExtractionBatch.objects.select_related("memory_user", "thread"))
    if status:
        qs = qs.filter(status=status)
    return [_batch_out(b) for b in qs.order_by("-created_at")[:limit]]


@router.post("/batches/{batch_id}/retry", response={202: BatchOut})
def retry_batch(request, batch_id: BatchId):
    batch = batch_retry(request.principal, batch_id)
    batch = ExtractionBatch.objects.select_related("memory_user", "thread").get(pk=batch.pk)
    return 202, _batch_out(batch)
