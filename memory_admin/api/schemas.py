"""Request and response shapes of the agent API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from memory_admin import scoring
from memory_admin.models import Fact

Category = Literal["preference", "project", "technical", "personal", "other"]
Kind = Literal["fact", "decision", "inference", "correction", "preference", "skill"]
Source = Literal["user_stated", "tool_verified", "agent_inferred", "recalled", "external"]
Status = Literal["active", "superseded", "stale", "evicted", "quarantined"]
Confidence = Annotated[StrictFloat | StrictInt, Field(ge=0, le=1)]


class StrictIn(Schema):
    model_config = ConfigDict(extra="forbid")


class FactIn(StrictIn):
    content: StrictStr
    key: Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/-]+$")] | None = None
    category: Category = "other"
    kind: Kind = "fact"
    confidence: Confidence | None = None
    source: Source = "agent_inferred"
    observed_at: datetime | None = None
    ttl_days: Annotated[StrictFloat | StrictInt, Field(gt=0, le=36500)] | None = None
    pinned: StrictBool = False
    importance: Confidence | None = None
    metadata: dict[str, Any] | None = None
    task_id: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None


class CorrectIn(StrictIn):
    content: StrictStr
    confidence: Confidence | None = None
    category: Category | None = None
    reason: Annotated[StrictStr, Field(max_length=2000)] = ""


class PinIn(StrictIn):
    pinned: StrictBool


class ForgetIn(StrictIn):
    reason: Annotated[StrictStr, Field(max_length=2000)] = ""


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
    def of(fact: Fact) -> dict[str, Any]:
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
            "effective_confidence": round(scoring.effective_confidence(fact), 4),
            "staleness": scoring.staleness(fact),
            "stale": scoring.is_stale(fact),
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
    outcome: str
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


class NotebookOut(Schema):
    user_id: str
    content: str
    version: int
    updated_at: datetime | None
    updated_by: str


class NotebookIn(StrictIn):
    content: StrictStr
    version: Annotated[StrictInt, Field(ge=0)]
    note: Annotated[StrictStr, Field(max_length=500)] = ""


class SkillIn(StrictIn):
    content: StrictStr
    version: Annotated[StrictInt, Field(ge=0)] | None = None
    user_id: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None


class SkillOut(Schema):
    path: str
    scope: str
    user_id: str | None
    version: int
    content: str
    updated_at: datetime
    updated_by: str


class SkillSummary(Schema):
    path: str
    scope: str
    user_id: str | None
    version: int
    updated_at: datetime


class SettingsOut(Schema):
    confidence_threshold: float
    dedup_similarity: float
    contradiction_similarity: float
    auto_resolve_gap: float
    fact_cap: int
    pii_policy: dict[str, str]
    search_weights: dict[str, float]
    debounce_seconds: int
    min_message_chars: int
    extraction_enabled: bool
    episode_idle_minutes: int


Unit = Annotated[StrictFloat | StrictInt, Field(ge=0, le=1)]


class SettingsPatch(StrictIn):
    confidence_threshold: Unit | None = None
    dedup_similarity: Annotated[StrictFloat | StrictInt, Field(gt=0, le=1)] | None = None
    contradiction_similarity: Annotated[StrictFloat | StrictInt, Field(gt=0, le=1)] | None = None
    auto_resolve_gap: Unit | None = None
    fact_cap: Annotated[StrictInt, Field(ge=1, le=100000)] | None = None
    pii_policy: dict[Literal["email", "phone", "national_id"], Literal["block", "redact", "flag"]] | None = None
    search_weights: dict[Literal["vector", "keyword", "recency", "importance"],
                         Annotated[StrictFloat | StrictInt, Field(ge=0, le=10)]] | None = None
    debounce_seconds: Annotated[StrictInt, Field(ge=0, le=86400)] | None = None
    min_message_chars: Annotated[StrictInt, Field(ge=0, le=65536)] | None = None
    extraction_enabled: StrictBool | None = None
    episode_idle_minutes: Annotated[StrictInt, Field(ge=1, le=100000)] | None = None


class ErrorOut(Schema):
    code: str
    detail: str
