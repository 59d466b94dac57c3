"""Request and response shapes of the agent API."""

from __future__ import annotations

import math
import re
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Annotated, Any, Literal, get_type_hints
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
    create_model,
)

from memory_admin import scoring
from memory_admin.inputs import INT4_MAX, implausible_time_reason
from memory_admin.models import (
    PII_ACTIONS,
    PII_KINDS,
    Entity,
    Fact,
    FactEntity,
    MemoryUser,
    Notebook,
    RelationEnd,
    Skill,
    WriteOutcome,
)
from memory_admin.models.entities import RELATION_TYPE_PATTERN
from memory_admin.retrieval import HIT_OBJECTS, KINDS, Hit
from memory_admin.retrieval.context import MAX_BUDGET_TOKENS, MIN_BUDGET_TOKENS
from memory_admin.services.settings import LIMITS, SEARCH_WEIGHT_MAX, SEARCH_WEIGHT_NAMES
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
# Its example is OpenAPI's `example` (one value), not JSON Schema's `examples` list: ninja copies a path
# parameter's schema example onto the Parameter Object, where `examples` must be a map of Example Objects,
# and a list there makes the document invalid (generators such as openapi-python-client refuse it).
UserId = text(
    min_length=1, max_length=IDENTIFIER_MAX, pattern=IDENTIFIER_PATTERN, json_schema_extra={"example": "alice"}
)
# A cursor is an opaque token this API returned: short, URL-safe.
Cursor = text(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_=-]+$")
# A page size in a query string, where every value arrives as text: lax (`?limit=5`), unlike body fields.
Limit = Annotated[int, Field(ge=1, le=200)]


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

# The closed sets of the API, from the model's choices. A writer cannot claim the sources the service
# sets itself (a correction, the notebook).
Category = Literal[tuple(Fact.Category.values)]
Kind = Literal[tuple(Fact.Kind.values)]
Source = Literal[tuple(s for s in Fact.Source.values if s not in (Fact.Source.USER_CORRECTION, Fact.Source.NOTEBOOK))]
Status = Literal[tuple(Fact.Status.values)]
StatusFilter = Literal[(*Fact.Status.values, "any")]
Confidence = number(ge=0, le=1)


class StrictIn(Schema):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# A fact's key (its slot), wherever a fact comes in: the API, a batch, an imported export.
FactKey = text(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/-]+$")


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


class NotebookOut(Schema):
    user_id: str
    content: str
    version: int
    updated_at: datetime | None
    updated_by: str

    @staticmethod
    def of(user: MemoryUser, notebook: Notebook | None) -> dict[str, Any]:
        return {
            "user_id": user.external_id,
            "content": notebook.content if notebook else "",
            "version": notebook.version if notebook else 0,
            "updated_at": notebook.updated_at if notebook else None,
            "updated_by": notebook.updated_by if notebook else "",
        }


class NotebookIn(StrictIn):
    content: Text
    version: Annotated[StrictInt, Field(ge=0, le=INT4_MAX)]
    note: text(max_length=500) = ""


class SkillIn(StrictIn):
    content: Text
    version: Annotated[StrictInt, Field(ge=0, le=INT4_MAX)] | None = None
    user_id: UserId | None = None


class SkillSummary(Schema):
    path: str
    scope: str
    user_id: str | None
    version: int
    updated_at: datetime

    @staticmethod
    def of(skill: Skill) -> dict[str, Any]:
        return {
            "path": skill.path,
            "scope": "user" if skill.memory_user_id else "tenant",
            "user_id": skill.memory_user.external_id if skill.memory_user_id else None,
            "version": skill.version,
            "updated_at": skill.updated_at,
        }


class SkillOut(Schema):
    path: str
    scope: str
    user_id: str | None
    version: int
    content: str
    updated_at: datetime
    updated_by: str

    @staticmethod
    def of(skill: Skill) -> dict[str, Any]:
        return {**SkillSummary.of(skill), "content": skill.content, "updated_by": skill.updated_by}


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


def setting(name: str) -> Any:
    """A numeric setting's type, from the one table of limits (services.settings.LIMITS), so that
    OpenAPI states its range and the API refuses what the service would refuse."""
    limit = LIMITS[name]
    low = {"gt" if limit.above_minimum else "ge": limit.minimum}
    if limit.type is int:
        return Annotated[StrictInt, Field(**low, le=limit.maximum, description=limit.help)]
    return number(**low, le=limit.maximum, description=limit.help)


PiiKind = Literal[PII_KINDS]
PiiAction = Literal[PII_ACTIONS]
SearchWeightName = Literal[SEARCH_WEIGHT_NAMES]


class SettingsPatch(StrictIn):
    confidence_threshold: setting("confidence_threshold") | None = None
    dedup_similarity: setting("dedup_similarity") | None = None
    contradiction_similarity: setting("contradiction_similarity") | None = None
    auto_resolve_gap: setting("auto_resolve_gap") | None = None
    fact_cap: setting("fact_cap") | None = None
    pii_policy: dict[PiiKind, PiiAction] | None = None
    search_weights: dict[SearchWeightName, number(ge=0, le=SEARCH_WEIGHT_MAX)] | None = None
    debounce_seconds: setting("debounce_seconds") | None = None
    min_message_chars: setting("min_message_chars") | None = None
    extraction_enabled: StrictBool | None = None
    episode_idle_minutes: setting("episode_idle_minutes") | None = None


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


# --- Memory users, notebooks, skills --------------------------------------------------------------

# Checked (and normalised) by check_skill_path; the type bounds what reaches it.
SkillPath = text(min_length=1, max_length=300)
SkillPrefix = text(max_length=300)
UserPrefix = text(max_length=200)
# A page of memory users: larger than other pages (a user row is small).
UserLimit = Annotated[int, Field(ge=1, le=500)]


class UserOut(Schema):
    user_id: str
    task_ids: list[str]
    created_at: datetime


class UserPage(Schema):
    items: list[UserOut]
    next_cursor: str | None


# --- Messages, threads, episodes, extraction batches -----------------------------------------------

Role = Literal["user", "assistant", "system", "tool"]
Outcome = Literal["success", "failure", "unknown"]


class MessageItemIn(StrictIn):
    role: Role
    content: Text
    created_at: Timestamp | None = None


class MessagesIn(StrictIn):
    thread_id: Identifier
    messages: Annotated[list[MessageItemIn], Field(min_length=1)]


class MessagesOut(Schema):
    thread_id: str
    accepted: int
    message_ids: list[int]
    pending: int
    skipped: list[dict]
    redacted: list[dict]
    extraction: str
    extract_due_at: datetime | None


class CloseIn(StrictIn):
    outcome: Outcome | None = None


class CloseOut(Schema):
    thread_id: str
    closed_at: datetime
    extraction: str
    episode: str


class EpisodeFactOut(Schema):
    id: UUID
    content: str
    category: str
    status: str


class EpisodeOut(Schema):
    id: UUID
    user_id: str
    thread_id: str | None
    started_at: datetime
    ended_at: datetime
    summary: str
    outcome: str
    summarizer: str
    message_count: int
    fact_count: int
    created_at: datetime


class EpisodeMessageOut(Schema):
    id: int
    role: str
    content: str
    created_at: datetime
    status: str


class EpisodeDetailOut(EpisodeOut):
    facts: list[EpisodeFactOut]
    messages: list[EpisodeMessageOut]


class EpisodePage(Schema):
    items: list[EpisodeOut]
    next_cursor: str | None


# An offset this API returned (digits); bounded so that it stays a valid SQL OFFSET.
EpisodeCursor = text(max_length=9, pattern=r"^[0-9]+$")


class EpisodeFilters(Schema):
    since: Timestamp | None = None  # episodes that ended at or after
    until: Timestamp | None = None  # episodes that started before
    thread_id: Identifier | None = None
    outcome: Outcome | None = None
    cursor: EpisodeCursor | None = None
    limit: Limit = 50


class BatchOut(Schema):
    id: int
    user_id: str
    thread_id: str
    status: str
    attempts: int
    error: str
    extractor: str
    model: str
    message_count: int
    fact_count: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    created_at: datetime
    finished_at: datetime | None


BatchId = Annotated[int, Field(ge=1, le=2**63 - 1)]
BatchStatus = Literal["pending", "running", "done", "failed"]


# --- Retrieval: search and the context block --------------------------------------------------------

MAX_K = 100
MAX_QUERY_CHARS = 2000
# How many hits a search returns, and a context block's budget in tokens (cl100k_base).
K = Annotated[int, Field(ge=1, le=MAX_K)]
BudgetTokens = Annotated[int, Field(ge=MIN_BUDGET_TOKENS, le=MAX_BUDGET_TOKENS)]
# A search's query and a context block's task: readable text, at most MAX_QUERY_CHARS characters.
QueryText = text(max_length=MAX_QUERY_CHARS)


# A hit's score components, as the search ranking defines them (retrieval.Hit, one home).
ScoreOut = create_model(
    "ScoreOut",
    __base__=Schema,
    **{f.name: (get_type_hints(Hit)[f.name], ...) for f in dataclass_fields(Hit) if f.name not in HIT_OBJECTS},
)


def _kinds(value: str) -> tuple[str, ...]:
    parts = [part.strip().lower() for part in value.split(",")]
    unknown = [part or "(empty)" for part in parts if part not in KINDS]
    if unknown:
        raise ValueError(f"unknown kind {', '.join(unknown)}; give a comma-separated list of {', '.join(KINDS)}")
    return tuple(dict.fromkeys(parts))


# The kinds of hits a search returns (KINDS.md): a comma-separated list of fact, message, chunk.
Kinds = Annotated[
    StrictStr, Field(max_length=100, json_schema_extra={"pattern": r"^[a-z, ]*$"}), AfterValidator(_kinds)
]


class MessageHitOut(Schema):
    """A message hit: its text as stored, i.e. screened (secrets and blocked PII redacted) when posted."""

    id: int
    thread_id: str
    role: str
    created_at: datetime
    text: str


class ChunkHitOut(Schema):
    """A document chunk (trained knowledge, issue 34) with what citing it needs."""

    id: UUID
    text: str
    source_id: UUID
    source_name: str
    document_id: UUID
    title: str
    url: str | None  # a page's URL (url and site sources)
    file: str | None  # else the file's name or its path in the folder
    section: str  # the headings above the chunk, " > " between them
    fetched_at: datetime
    version: int  # the document's version it was cut from


class HitOut(Schema):
    kind: Literal["fact", "message", "chunk"]
    fact: FactOut | None
    message: MessageHitOut | None
    chunk: ChunkHitOut | None = None
    score: ScoreOut


class SearchOut(Schema):
    user_id: str
    query: str
    k: int
    include: list[str]
    kinds: list[str]
    weights: dict[str, float]
    candidates: int
    hits: list[HitOut]
    timings: dict[str, float]


class DroppedOut(Schema):
    id: str
    reason: str
    of: str | None = None  # reason "duplicate": the fact whose line holds this one


class SectionOut(Schema):
    name: str
    tokens: int
    included: list[str]
    related: list[str] = []  # of the included: facts observed next to a strong match
    truncated: list[str]
    dropped: list[DroppedOut]
    contradicts_notebook: list[str] = []  # documents: included chunks that disagree with the notebook


class ContextOut(Schema):
    user_id: str
    task: str
    budget_tokens: int
    tokens: int
    text: str
    notebook_truncated: bool
    warnings: list[str]
    sections: list[SectionOut]
    timings: dict[str, float]


class ErrorOut(Schema):
    """Every 4xx/5xx answer: a stable `code`, a sentence, and fields that depend on the code (`field`
    and `errors` for `invalid`, `limit` for size limits, `current_version` for conflicts...)."""

    model_config = ConfigDict(extra="allow")

    code: str
    detail: str


# --- Import of an export (`POST /users/{id}/import`, `manage.py import_memory`; services/imports.py) ---
# The shape `GET /users/{id}/export` answers. Fields added to the export later are optional here, so
# older exports import too; unknown fields are refused like everywhere else.

Role = Literal["user", "assistant", "system", "tool"]
AnySource = Literal[
    "user_stated",
    "tool_verified",
    "agent_stated",
    "agent_inferred",
    "recalled",
    "external",
    "notebook",
    "user_correction",
]
Version = Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]


class ExportedFactIn(StrictIn):
    id: UUID
    key: FactKey | None = None  # the API's rule: an import stores no key the API would refuse
    content: Text
    category: Category = "other"
    kind: Kind = "fact"
    confidence: Confidence
    source: AnySource
    status: Status = "active"
    version: Version = 1
    supersedes: UUID | None = None
    superseded_by: UUID | None = None
    superseded_by_notebook_version: Version | None = None
    pinned: StrictBool = False
    valid_from: Timestamp
    valid_to: Timestamp | None = None
    soft_expires_at: Timestamp | None = None
    hard_expires_at: Timestamp | None = None
    created_at: Timestamp
    metadata: Metadata = {}
    task_id: Identifier | None = None
    status_reason: text(max_length=300) = ""
    importance: Confidence = 0.5


class ExportedRevisionIn(StrictIn):
    version: Version
    content: Text
    author: text(max_length=200) = ""
    note: text(max_length=500) = ""
    created_at: Timestamp


class ExportedNotebookIn(StrictIn):
    version: Version = 0
    content: Text = ""
    revisions: list[ExportedRevisionIn] = []


class ExportedEpisodeIn(StrictIn):
    id: UUID
    started_at: Timestamp
    ended_at: Timestamp
    summary: Text = ""
    outcome: Literal["success", "failure", "unknown"] = "unknown"
    thread_id: Identifier | None = None
    fact_ids: list[UUID] = []


class ExportedMessageIn(StrictIn):
    thread_id: Identifier
    role: Role
    content: Text
    created_at: Timestamp


class ExportedSkillIn(StrictIn):
    path: text(min_length=1, max_length=300)
    version: Version = 1
    content: Text
    revisions: list[ExportedRevisionIn] = []


class ExportedEntityIn(StrictIn):
    id: UUID
    name: text(min_length=1, max_length=200)
    type: Literal[tuple(Entity.Type.values)] = "other"
    scope: Literal[tuple(Entity.Scope.values)] = "user"  # informational: an import makes it the user's
    aliases: Annotated[list[text(min_length=1, max_length=200)], Field(max_length=50)] = []
    summary: text(max_length=2000) = ""
    first_seen: Timestamp
    last_seen: Timestamp


class ExportedMentionIn(StrictIn):
    fact_id: UUID
    entity_id: UUID
    role: Literal[tuple(FactEntity.Role.values)] = "mentioned"


class ExportedRelationIn(StrictIn):
    id: Annotated[StrictInt, Field(ge=1, le=2**63 - 1)]
    subject_id: UUID
    type: text(min_length=1, max_length=40, pattern=RELATION_TYPE_PATTERN)
    object_id: UUID
    source_fact_id: UUID
    valid_from: Timestamp
    valid_to: Timestamp | None = None
    invalidated_by_id: UUID | None = None
    closed_reason: Literal[("", *RelationEnd.values)] = ""
    stated_by: Annotated[list[UUID], Field(max_length=1000)] = []  # every fact that states it


class ExportIn(StrictIn):
    format: Literal["memory-admin/export-v1"]
    exported_at: Timestamp | None = None
    user_id: text(max_length=200) = ""  # the user it was exported from (informational)
    # A factory, not an instance: OpenAPI then states no object default, which generators cannot take
    # (openapi-python-client drops a model with one, and the import operation with it).
    notebook: ExportedNotebookIn = Field(default_factory=ExportedNotebookIn)
    facts: list[ExportedFactIn] = []
    episodes: list[ExportedEpisodeIn] = []
    messages: list[ExportedMessageIn] = []
    skills: list[ExportedSkillIn] = []
    # The knowledge graph (SPEC §12); exports made before entities existed have none.
    entities: list[ExportedEntityIn] = []
    mentions: list[ExportedMentionIn] = []
    relations: list[ExportedRelationIn] = []


class ImportOut(Schema):
    """What an import did: per kind, how many items were written (`imported`), found already imported by
    an earlier run (`already_imported`) or refused by the write path (`refused`, with each refusal's
    index, code and block id); the write path's outcome per fact; and the facts whose status here
    differs from the export's (the write path decided otherwise: a secret, the tenant's threshold...)."""

    user_id: str
    imported: dict[str, int]
    already_imported: dict[str, int]
    refused: list[dict[str, Any]]
    fact_outcomes: dict[str, int]
    diverged: list[dict[str, Any]]


# --- Entities (SPEC §12) --------------------------------------------------------------------------

EntityQuery = text(max_length=200)
GraphDepth = Annotated[int, Field(ge=1, le=3)]


class EntityFilters(Schema):
    q: EntityQuery = ""
    user_id: UserId | None = None  # the entities this user's facts resolve to (its own and the tenant's)
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class GraphFilters(Schema):
    depth: GraphDepth = 1
    as_of: Timestamp | None = None  # default: now


class EntityRefOut(Schema):
    id: UUID
    name: str
    type: str

    @staticmethod
    def of(entity: Any) -> dict[str, Any]:
        return {"id": entity.pk, "name": entity.name, "type": entity.type}


class EntityOut(Schema):
    id: UUID
    name: str
    type: str
    scope: str
    user_id: str | None
    aliases: list[str]
    summary: str
    first_seen: datetime
    last_seen: datetime
    # Set when the entity was merged into another (its facts, relations and names went there): the
    # live entity to use instead. Null for a live entity.
    merged_into: UUID | None = None

    @staticmethod
    def of(entity: Any) -> dict[str, Any]:
        user = entity.memory_user
        return {
            "id": entity.pk,
            "name": entity.name,
            "type": entity.type,
            "scope": entity.scope,
            "user_id": user.external_id if user is not None else None,
            "aliases": entity.aliases,
            "summary": entity.summary,
            "first_seen": entity.first_seen,
            "last_seen": entity.last_seen,
            "merged_into": entity.merged_into_id,
        }


class RelationOut(Schema):
    id: int
    type: str
    subject: EntityRefOut
    object: EntityRefOut
    valid_from: datetime
    valid_to: datetime | None  # null: still holds
    source_fact_id: UUID
    invalidated_by_id: UUID | None  # the fact that closed it
    # Why it closed ("" while open): superseded, forgotten, capped, a GC rule (hard_ttl,
    # soft_ttl_unread, low_confidence), review_evicted, quarantined.
    closed_reason: str

    @staticmethod
    def of(relation: Any) -> dict[str, Any]:
        return {
            "id": relation.pk,
            "type": relation.type,
            "subject": EntityRefOut.of(relation.subject),
            "object": EntityRefOut.of(relation.object),
            "valid_from": relation.valid_from,
            "valid_to": relation.valid_to,
            "source_fact_id": relation.source_fact_id,
            "invalidated_by_id": relation.invalidated_by_id,
            "closed_reason": relation.closed_reason,
        }


class EntityPage(Schema):
    items: list[EntityOut]


class MentionOut(Schema):
    fact_id: UUID
    content: str
    status: str
    role: str
    valid_from: datetime


class EntityThreadOut(Schema):
    """A thread one of whose messages stated a fact that mentions the entity."""

    thread_id: str
    user_id: str
    created_at: datetime
    last_message_at: datetime | None
    closed_at: datetime | None


class EntityEpisodeOut(Schema):
    """An episode that holds a fact mentioning the entity (or the message such a fact came from)."""

    id: UUID
    user_id: str
    thread_id: str | None
    started_at: datetime
    ended_at: datetime
    outcome: str
    summary: str


class MergedInOut(Schema):
    """An entity merged into this one (by a curator, or by resolution: `automatic`)."""

    id: UUID  # the merge: POST /entity-merges/{id}/undo
    loser: EntityRefOut
    automatic: bool
    created_at: datetime


class EntityDetailOut(EntityOut):
    facts: list[MentionOut]
    relations: list[RelationOut]  # over time: closed ones too, oldest first
    threads: list[EntityThreadOut]  # most recent first, at most 20
    thread_count: int  # all of them
    episodes: list[EntityEpisodeOut]  # most recent first, at most 20
    episode_count: int  # all of them
    merge_id: UUID | None = None  # a merged entity: the merge that moved it (POST /entity-merges/{id}/undo)
    merges: list[MergedInOut] = []  # the merges into this entity that can be undone, newest first


class EntityGraphOut(Schema):
    root: UUID
    # Asked for an entity merged into another: its id (the graph is the live survivor's, `root`).
    merged_from: UUID | None = None
    depth: int
    as_of: datetime
    nodes: list[EntityOut]
    edges: list[RelationOut]


# --- Entity curation (SPEC §12): admin keys; a key limited to users curates only their entities ------

CurationNote = text(max_length=2000)


class CurationNoteIn(StrictIn):
    note: CurationNote = ""  # why, for the audit log


class EntityMergeIn(StrictIn):
    survivor_id: UUID  # the entity that stays
    loser_id: UUID  # merged into the survivor: its facts, relations and names move there
    note: CurationNote = ""


class EntitySplitIn(StrictIn):
    alias: text(min_length=1, max_length=200)  # one of the entity's aliases, to become its own entity
    note: CurationNote = ""


class EntityRenameIn(StrictIn):
    name: text(min_length=1, max_length=200)  # the new canonical name; the old one stays an alias
    note: CurationNote = ""


class EntityMergeOut(Schema):
    id: UUID  # undo with POST /entity-merges/{id}/undo
    survivor: EntityOut
    loser: EntityOut  # `merged_into` is the survivor while the merge holds
    automatic: bool  # made by resolution, not by a curator
    mentions_moved: int
    relations_moved: int
    created_at: datetime
    undone_at: datetime | None

    @staticmethod
    def of(record: Any) -> dict[str, Any]:
        return {
            "id": record.pk,
            "survivor": EntityOut.of(record.survivor),
            "loser": EntityOut.of(record.loser),
            "automatic": record.automatic,
            "mentions_moved": len(record.mention_ids),
            "relations_moved": len(record.relation_sides),
            "created_at": record.created_at,
            "undone_at": record.undone_at,
        }


class EntitySplitOut(Schema):
    entity: EntityOut  # the entity the alias left
    split_off: EntityOut  # the new entity, with the facts that call it by that alias


class EntityReviewOut(Schema):
    """Resolution was unsure whether `entity` (made for a new mention) is `candidate`."""

    id: UUID
    entity: EntityOut
    candidate: EntityOut
    similarity: float
    judge: str
    status: str  # open, accepted, rejected
    resolved_by: str
    resolved_at: datetime | None
    merge_id: UUID | None  # an accepted item's merge
    created_at: datetime

    @staticmethod
    def of(item: Any) -> dict[str, Any]:
        return {
            "id": item.pk,
            "entity": EntityOut.of(item.entity),
            "candidate": EntityOut.of(item.candidate),
            "similarity": item.similarity,
            "judge": item.judge,
            "status": item.status,
            "resolved_by": item.resolved_by,
            "resolved_at": item.resolved_at,
            "merge_id": item.merge_id,
            "created_at": item.created_at,
        }


class EntityReviewPage(Schema):
    items: list[EntityReviewOut]  # open items, oldest first


class EntityReviewFilters(Schema):
    limit: Limit = 50
