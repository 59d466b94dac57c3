"""LangGraph checkpoints (models/checkpoints.py): a thread's execution state, kept so that an agent resumes
where it stopped, in another process or on another host.

The server stores what the client's serde produced and never reads inside it. A checkpoint belongs to a
memory user's thread (the same `Thread` its messages go to, so the dashboard's conversation page shows
both); reads go through the one access check like every other row. Retention: after each put the thread
keeps its newest `keep_last` checkpoints per namespace (the client may ask for fewer than the server's
`CHECKPOINT_KEEP_LAST`), and none older than `CHECKPOINT_MAX_AGE_DAYS` except each namespace's newest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Length
from django.utils import timezone

from memory_admin.models import Checkpoint, CheckpointWrite, Thread
from memory_admin.selectors.access import WRITE_MEMORY, Principal, memory_user_for, visible
from memory_admin.services.audit import audit
from memory_admin.services.screening import screen_identifier

ROUTE = "checkpoint"
# LangGraph names threads, tasks and store keys with UUIDs, whose digit runs the PII scan can read as a phone
# number (one in a few hundred): the UUIDs are taken out before the scan, the rest of the id is screened.
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")


def screen_graph_id(principal: Principal, value: str, *, what: str, route: str, memory_user_id: int) -> None:
    """`screen_identifier` for an id LangGraph makes (thread, task, namespace label, store key)."""
    screen_identifier(principal, _UUID.sub("", value), what=what, route=route, memory_user_id=memory_user_id)


@dataclass(frozen=True)
class Blob:
    type: str
    data: bytes


@dataclass(frozen=True)
class CheckpointDraft:
    user_id: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str
    checkpoint: Blob
    metadata: dict[str, Any]
    metadata_blob: Blob


@dataclass(frozen=True)
class WriteDraft:
    idx: int
    channel: str
    value: Blob


@dataclass(frozen=True)
class CheckpointQuery:
    user_id: str | None = None
    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None
    before: str | None = None
    filter: dict[str, Any] | None = None
    limit: int | None = None


def keep_last_for(requested: int | None) -> int:
    cap = settings.CHECKPOINT_KEEP_LAST
    return min(requested, cap) if requested else cap


def _prune(thread: Thread, checkpoint_ns: str, keep_last: int) -> int:
    """Delete the namespace's checkpoints beyond the newest `keep_last` and, the newest excepted, those
    older than CHECKPOINT_MAX_AGE_DAYS (their writes go with them)."""
    ours = Checkpoint.objects.filter(thread=thread, checkpoint_ns=checkpoint_ns)
    newest = list(ours.order_by("-checkpoint_id").values_list("pk", flat=True)[:keep_last])
    stale = ours.exclude(pk__in=newest)
    if settings.CHECKPOINT_MAX_AGE_DAYS:
        cutoff = timezone.now() - timedelta(days=settings.CHECKPOINT_MAX_AGE_DAYS)
        stale = ours.filter(~Q(pk__in=newest) | Q(created_at__lt=cutoff)).exclude(pk=newest[0])
    gone = list(stale.values_list("checkpoint_id", flat=True))
    if gone:
        CheckpointWrite.objects.filter(thread=thread, checkpoint_ns=checkpoint_ns, checkpoint_id__in=gone).delete()
        stale.delete()
    return len(gone)


@dataclass(frozen=True)
class Saved:
    checkpoint: Checkpoint
    pruned: int  # older checkpoints the retention deleted


@dataclass(frozen=True)
class Found:
    checkpoint: Checkpoint
    writes: list[CheckpointWrite]  # its pending writes, in task order


def checkpoint_put(*, principal: Principal, draft: CheckpointDraft, keep_last: int | None = None) -> Saved:
    """Store a checkpoint (a second put of the same id replaces it) and apply the retention."""
    principal.require(WRITE_MEMORY)
    user = memory_user_for(principal, draft.user_id, create=True)
    for what, value in (("thread id", draft.thread_id), ("checkpoint namespace", draft.checkpoint_ns)):
        screen_graph_id(principal, value, what=what, route=ROUTE, memory_user_id=user.pk)
    with transaction.atomic():
        thread, _ = Thread.objects.get_or_create(
            tenant_id=principal.tenant_id, memory_user=user, external_id=draft.thread_id
        )
        checkpoint, created = Checkpoint.objects.update_or_create(
            thread=thread,
            checkpoint_ns=draft.checkpoint_ns,
            checkpoint_id=draft.checkpoint_id,
            defaults={
                "tenant_id": principal.tenant_id,
                "memory_user": user,
                "parent_checkpoint_id": draft.parent_checkpoint_id,
                "type": draft.checkpoint.type,
                "data": draft.checkpoint.data,
                "metadata": draft.metadata,
                "metadata_type": draft.metadata_blob.type,
                "metadata_data": draft.metadata_blob.data,
            },
        )
        pruned = _prune(thread, draft.checkpoint_ns, keep_last_for(keep_last))
        if created and draft.parent_checkpoint_id == "":
            # A thread's first checkpoint is the event worth an audit line; every step would flood the log.
            audit(principal, "checkpoint.thread_started", outcome="created", target=thread, memory_user_id=user.pk)
    return Saved(checkpoint, pruned)


def checkpoint_writes_put(
    *,
    principal: Principal,
    user_id: str,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: list[WriteDraft],
) -> int:
    """Store a task's pending writes against a checkpoint, as LangGraph's savers do: a write of a regular
    channel (`idx` >= 0) is kept as first written; a special channel's (`idx` < 0) replaces the last."""
    principal.require(WRITE_MEMORY)
    user = memory_user_for(principal, user_id, create=True)
    for what, value in (("thread id", thread_id), ("checkpoint namespace", checkpoint_ns), ("task id", task_id)):
        screen_graph_id(principal, value, what=what, route=ROUTE, memory_user_id=user.pk)
    thread, _ = Thread.objects.get_or_create(tenant_id=principal.tenant_id, memory_user=user, external_id=thread_id)
    rows = [
        CheckpointWrite(
            thread=thread,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            task_id=task_id,
            task_path=task_path,
            idx=w.idx,
            channel=w.channel,
            type=w.value.type,
            data=w.value.data,
        )
        for w in writes
    ]
    with transaction.atomic():
        CheckpointWrite.objects.bulk_create([r for r in rows if r.idx >= 0], ignore_conflicts=True)
        CheckpointWrite.objects.bulk_create(
            [r for r in rows if r.idx < 0],
            update_conflicts=True,
            unique_fields=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
            update_fields=["channel", "type", "data", "task_path"],
        )
    return len(rows)


def checkpoints_found(*, principal: Principal, query: CheckpointQuery) -> list[Found]:
    """The checkpoints a query names, newest first, each with its pending writes; two queries."""
    checkpoints = visible(principal, Checkpoint.objects).select_related("thread", "memory_user")
    if query.user_id is not None:
        checkpoints = checkpoints.filter(memory_user__external_id=query.user_id)
    if query.thread_id is not None:
        checkpoints = checkpoints.filter(thread__external_id=query.thread_id)
    if query.checkpoint_ns is not None:
        checkpoints = checkpoints.filter(checkpoint_ns=query.checkpoint_ns)
    if query.checkpoint_id is not None:
        checkpoints = checkpoints.filter(checkpoint_id=query.checkpoint_id)
    if query.before is not None:
        checkpoints = checkpoints.filter(checkpoint_id__lt=query.before)
    if query.filter:
        checkpoints = checkpoints.filter(metadata__contains=query.filter)
    checkpoints = checkpoints.order_by("-checkpoint_id", "checkpoint_ns")
    return _with_writes(list(checkpoints[: query.limit] if query.limit else checkpoints))


def _with_writes(checkpoints: list[Checkpoint]) -> list[Found]:
    """Each checkpoint with its pending writes, read in one query."""
    found = {(c.thread_id, c.checkpoint_ns, c.checkpoint_id): Found(c, []) for c in checkpoints}
    if found:
        writes = CheckpointWrite.objects.filter(
            thread_id__in={c.thread_id for c in checkpoints}, checkpoint_id__in={c.checkpoint_id for c in checkpoints}
        ).order_by("task_path", "task_id", "idx")
        for w in writes:
            owner = found.get((w.thread_id, w.checkpoint_ns, w.checkpoint_id))
            if owner is not None:
                owner.writes.append(w)
    return list(found.values())


def checkpoint_thread_delete(*, principal: Principal, user_id: str | None, thread_id: str) -> int:
    """Delete every checkpoint (and pending write) of the thread (of every visible thread with that id when
    no user is named); its messages stay. Answers how many checkpoints went."""
    principal.require(WRITE_MEMORY)
    ours = visible(principal, Checkpoint.objects).filter(thread__external_id=thread_id)
    if user_id is not None:
        ours = ours.filter(memory_user__external_id=user_id)
    with transaction.atomic():
        threads = set(ours.values_list("thread_id", "memory_user_id"))
        CheckpointWrite.objects.filter(thread_id__in={t for t, _ in threads}).delete()
        deleted = Checkpoint.objects.filter(pk__in=ours.values("pk")).delete()[1].get("memory_admin.Checkpoint", 0)
        for thread_pk, memory_user_id in sorted(threads):
            audit(
                principal,
                "checkpoint.thread_deleted",
                outcome="deleted",
                target_type="thread",
                target_id=str(thread_pk),
                memory_user_id=memory_user_id,
            )
    return deleted


def thread_checkpoints(*, principal: Principal, thread: Thread, limit: int = 50) -> list[Checkpoint]:
    """A thread's newest checkpoints for the dashboard, each with its number of pending writes; one query."""
    writes = (
        CheckpointWrite.objects.filter(
            thread=OuterRef("thread"), checkpoint_ns=OuterRef("checkpoint_ns"), checkpoint_id=OuterRef("checkpoint_id")
        )
        .order_by()
        .values("thread")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return list(
        visible(principal, Checkpoint.objects)
        .filter(thread=thread)
        .annotate(write_count=Subquery(writes), size=Length("data"))
        .defer("data", "metadata_data")
        .order_by("-checkpoint_id")[:limit]
    )
