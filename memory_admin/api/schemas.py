"""Request and response shapes of the agent API."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)

from memory_admin import scoring
from memory_admin.inputs import implausible_time_reason
from memory_admin.models import Fact
from memory_admin.textnorm import unreadable_reason

# --- Field types shared by every route (SPEC §11): one definition of what a hostile value is --------
#
# Every string the API accepts is `Text` (or a narrower type built on it): NUL, lone surrogates and
# control characters other than tab and line ends are refused with 422 before anything runs.
# Identifiers are short and drawn from a safe set, so they fit in a URL path segment (no `/`), a log
# line and the audit log as they are. Timestamps must carry a zone and lie in a plausible window.


def _readable(value: str) -> str:
    reason = unreadable_reason(value)
    if reason:
        raise ValueError(reason)
    return value


# What `_readable` accepts, for the OpenAPI schema only (the check itself is `unreadable_reason`).
READABLE_PATTERN = r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\ud800-\udfff]*$"


def text(**constraints: Any) -> Any:
    """A readable string with length/pattern constraints (declared before the check so that OpenAPI
    shows them; without a pattern of its own, OpenAPI shows the readable-text pattern)."""
    if "pattern" not in constraints:
        constraints["json_schema_extra"] = {"pattern": READABLE_PATTERN}
    return Annotated[StrictStr, Field(**constraints), AfterValidator(_readable)]


Text = text()


def number(**constraints: Any) -> Any:
    """A JSON number (integer or not, never a bool, NaN or Infinity) with bounds on both branches, so
    that OpenAPI states them as minimum/maximum."""
    floats = Annotated[StrictFloat, Field(allow_inf_nan=False, **constraints)]
    return floats | Annotated[StrictInt, Field(**constraints)]


IDENTIFIER_MAX = 200
IDENTIFIER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:@+=|-]*$"
# A user, thread or task id: letters, digits and `_ . : @ + = | -`, at most 200 characters.
Identifier = text(min_length=1, max_length=IDENTIFIER_MAX, pattern=IDENTIFIER_PATTERN)
UserId = text(min_length=1, max_length=IDENTIFIER_MAX, pattern=IDENTIFIER_PATTERN, examples=["alice"])
# A cursor is an opaque token this API returned: short, URL-safe.
Cursor = text(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_=-]+$")
Limit = Annotated[StrictInt, Field(ge=1, le=200)]

def _plausible(value: datetime) -> datetime:
    reason = implausible_time_reason(value)
    if reason:
        raise ValueError(reason)
    return value


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def _iso_text(value: Any) -> Any:
    # pydantic would also read 1700000000 or "0.5" as seconds since 1970: the schema says date-time.
    if not isinstance(value, str) or not _ISO_DATE.match(value):
        raise ValueError("give an ISO 8601 date-time with a timezone, e.g. 2024-05-01T09:30:00Z")
    return value


# A timezone-aware ISO 8601 time (`2024-05-01T09:30:00Z`, `…+02:00`) from 1900 up to 2200 (see inputs.py).
Timestamp = Annotated[AwareDatetime, BeforeValidator(_iso_text), AfterValidator(_plausible)]

METADATA_MAX_DEPTH = 16


def _json_tree(value: Any, depth: int = 0) -> None:
    if depth > METADATA_MAX_DEPTH:
        raise ValueError(f"nested deeper than {METADATA_MAX_DEPTH} levels")
    if isinstance(value, str):
        _readable(value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and Infinity are not JSON numbers")
    elif isinstance(value, dict):
        for key, item in value.items():
            _readable(str(key))
            _json_tree(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _json_tree(item, depth + 1)


def _metadata(value: dict[str, Any]) -> dict[str, Any]:
    _json_tree(value)
    return value


# Free-form JSON attached to a fact: readable strings (keys too), finite numbers, bounded depth.
Metadata = Annotated[dict[str, Any], AfterValidator(_metadata)]

Category = Literal["preference", "project", "technical", "personal", "other"]
Kind = Literal["fact", "decision", "inference", "correction", "preference", "skill"]
Source = Literal["user_stated", "tool_verified", "agent_inferred", "recalled", "external"]
Status = Literal["active", "superseded", "stale", "evicted", "quarantined"]
Confidence = number(ge=0, le=1)


class StrictIn(Schema):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class FactIn(StrictIn):
    content: Text
    key: text(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/-]+$") | None = None
    category: Category = "other"
    kind: Kind = "fact"
    confidence: Confidence | None = None
    source: Source = "agent_inferred"
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
    def of(fact: Fact) -> dict[str, Any]:
        effective, staleness, stale = scoring.scores(fact)
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
    content: Text
    version: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]
    note: text(max_length=500) = ""


class SkillIn(StrictIn):
    content: Text
    version: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)] | None = None
    user_id: UserId | None = None


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


Unit = number(ge=0, le=1)


class SettingsPatch(StrictIn):
    confidence_threshold: Unit | None = None
    dedup_similarity: number(gt=0, le=1) | None = None
    contradiction_similarity: number(gt=0, le=1) | None = None
    auto_resolve_gap: Unit | None = None
    fact_cap: Annotated[StrictInt, Field(ge=1, le=100000)] | None = None
    pii_policy: dict[Literal["email", "phone", "national_id"], Literal["block", "redact", "flag"]] | None = None
    search_weights: dict[Literal["vector", "keyword", "recency", "importance"],
                         number(ge=0, le=10)] | None = None
    debounce_seconds: Annotated[StrictInt, Field(ge=0, le=86400)] | None = None
    min_message_chars: Annotated[StrictInt, Field(ge=0, le=65536)] | None = None
    extraction_enabled: StrictBool | None = None
    episode_idle_minutes: Annotated[StrictInt, Field(ge=1, le=100000)] | None = None


class ErrorOut(Schema):
    """Every 4xx/5xx answer: a stable `code`, a sentence, and fields that depend on the code (`field`
    and `errors` for `invalid`, `limit` for size limits, `current_version` for conflicts...)."""

    model_config = ConfigDict(extra="allow")

    code: str
    detail: str
