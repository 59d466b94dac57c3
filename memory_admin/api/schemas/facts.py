"""Facts: a write and its outcome, batches, corrections, pins, the fact body, history, list filters."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field, StrictBool

from memory_admin import scoring
from memory_admin.api.schemas.common import (
    Category,
    Confidence,
    Cursor,
    FactKey,
    Identifier,
    Kind,
    Limit,
    Metadata,
    Source,
    StatusFilter,
    StrictIn,
    Text,
    Timestamp,
    number,
    text,
)
from memory_admin.models import Fact, WriteOutcome


class FactIn(StrictIn):
    content: Text
    key: FactKey | None = None
    category: Category = "other"
    kind: Kind = "fact"
    confidence: Confidence | None = None
    source: Source = "agent_stated"  # a deliberate write is stored (SOURCE_PRIOR 0.8, above the default gate)
    observed_at: Timestamp | None = None
    ttl_days: number(gt=0, le=36500) | None = None
    pinned: StrictBool = False
    importance: Confidence | None = None
    metadata: Metadata | None = None
    task_id: Identifier | None = None


class CorrectIn(StrictIn):
    content: Text
    confidence: Confidence | None = None
    category: Category | None = None
    reason: text(max_length=2000) = ""


class PinIn(StrictIn):
    pinned: StrictBool


class ForgetIn(StrictIn):
    reason: text(max_length=2000) = ""


class FactOut(Schema):
    id: UUID
    user_id: str | None
    scope: str
    task_id: str
    key: str | None
    content: str
    category: str
    kind: str
    confidence: float
    effective_confidence: float
    staleness: float
    stale: bool
    source: str
    status: str
    status_reason: str
    version: int
    supersedes: UUID | None
    superseded_by: UUID | None
    superseded_by_notebook_version: int | None
    pinned: bool
    contested: bool
    importance: float
    metadata: dict[str, Any]
    extractor: str
    created_by: str
    valid_from: datetime
    soft_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime | None
    access_count: int

    @staticmethod
    def of(fact: Fact, scores: tuple[float, float, bool] | None = None) -> dict[str, Any]:
        """`scores`: (effective confidence, staleness, stale) as computed already (a search's, by Postgres
        with the same formulas); by default scoring's, now."""
        effective, staleness, stale = scores if scores is not None else scoring.scores(fact)
        return {
            "id": fact.pk,
            "user_id": fact.memory_user.external_id if fact.memory_user_id else None,
            "scope": fact.scope,
            "task_id": fact.task_ref,
            "key": fact.key,
            "content": fact.content,
            "category": fact.category,
            "kind": fact.kind,
            "confidence": fact.confidence,
            "effective_confidence": round(effective, 4),
            "staleness": staleness,
            "stale": stale,
            "source": fact.source,
            "status": fact.status,
            "status_reason": fact.status_reason,
            "version": fact.version,
            "supersedes": fact.supersedes_id,
            "superseded_by": fact.superseded_by_id,
            "superseded_by_notebook_version": (
                fact.superseded_by_notebook.version if fact.superseded_by_notebook_id else None
            ),
            "pinned": fact.pinned,
            "contested": fact.contested,
            "importance": fact.importance,
            "metadata": fact.metadata,
            "extractor": fact.extractor,
            "created_by": fact.created_by,
            "valid_from": fact.valid_from,
            "soft_expires_at": fact.soft_expires_at,
            "created_at": fact.created_at,
            "updated_at": fact.updated_at,
            "last_accessed_at": fact.last_accessed_at,
            "access_count": fact.access_count,
        }


class WriteOut(Schema):
    outcome: WriteOutcome
    reason: str
    fact: FactOut | None
    other_fact_id: UUID | None = None
    contradiction_id: UUID | None = None
    evicted_ids: list[UUID] = []


MAX_BATCH_FACTS = 100


class FactBatchIn(StrictIn):
    # Up to MAX_BATCH_FACTS; a longer list answers 413 (checked by the route, so that the limit is
    # reported as a size limit rather than as a malformed request).
    facts: Annotated[list[FactIn], Field(min_length=1)]


class BatchWriteOut(WriteOut):
    """One fact's outcome in a batch: where it stood in the request, and the block of a refused one."""

    index: int
    block_id: str | None = None


class FactBatchOut(Schema):
    user_id: str
    results: list[BatchWriteOut]


class FactPage(Schema):
    items: list[FactOut]
    next_cursor: str | None


class AuditOut(Schema):
    id: int
    actor: str
    action: str
    outcome: str
    target_type: str
    target_id: str
    before: Any = None
    after: Any = None
    reason: str
    created_at: datetime


class HistoryOut(Schema):
    fact_id: UUID
    chain: list[FactOut]
    events: list[AuditOut]


# --- Facts: list filters, promote -----------------------------------------------------------------

KeyFilter = text(max_length=200)
TextFilter = text(max_length=2000)


class FactFilters(Schema):
    status: StatusFilter = "active"
    category: Category | None = None
    kind: Kind | None = None
    key: KeyFilter | None = None
    text: TextFilter | None = None
    cursor: Cursor | None = None
    limit: Limit = 50


class PromoteIn(Schema):
    to: Literal["user", "org"]
