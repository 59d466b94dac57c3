"""Typed results. Each is built from the server's JSON; fields the server adds later are ignored, so an
older client keeps working against a newer server."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")

# Outcomes after which the fact is stored (SPEC §4, README "The write path").
STORED_OUTCOMES = frozenset(
    {"created", "updated", "superseded_existing", "queued_for_review", "quarantined", "overruled", "capped"}
)


# Outcomes after which the statement is not served as written: the client raises for them.
REFUSED_OUTCOMES = frozenset({"quarantined", "rejected_low_confidence", "overruled", "capped", "blocked", "error"})


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is not type(None):
                return _convert(arg, value)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [_convert(item, v) for v in value]
    if tp is datetime and isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return parse(tp, value)
    return value


def parse(cls: type[T], data: dict[str, Any]) -> T:
    """Build a result dataclass from JSON, converting nested results and timestamps."""
    hints = _hints(cls)
    kwargs = {
        f.name: _convert(hints[f.name], data[f.name])
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.name in data
    }
    return cls(**kwargs)


@dataclass(frozen=True)
class Fact:
    id: str
    content: str
    status: str
    user_id: str | None = None
    scope: str = ""
    task_id: str = ""
    key: str | None = None
    category: str = "other"
    kind: str = "fact"
    confidence: float = 0.0
    effective_confidence: float = 0.0
    staleness: float = 0.0
    stale: bool = False
    source: str = ""
    status_reason: str = ""
    version: int = 1
    supersedes: str | None = None
    superseded_by: str | None = None
    superseded_by_notebook_version: int | None = None
    pinned: bool = False
    contested: bool = False
    importance: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    extractor: str = ""
    created_by: str = ""
    valid_from: datetime | None = None
    soft_expires_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_accessed_at: datetime | None = None
    access_count: int = 0


@dataclass(frozen=True)
class WriteResult:
    """What the write path did with one fact: `outcome` is one of created, updated, deduplicated, merged,
    superseded_existing, queued_for_review, overruled, quarantined, rejected_low_confidence, capped (and
    blocked, in a batch)."""

    outcome: str
    reason: str = ""
    fact: Fact | None = None
    other_fact_id: str | None = None
    contradiction_id: str | None = None
    evicted_ids: list[str] = field(default_factory=list)

    @property
    def stored(self) -> bool:
        return self.outcome in STORED_OUTCOMES

    @property
    def refused(self) -> bool:
        """Not served as written (`facts.add` raises `WriteRefused` for these; a batch, `BatchRefused`)."""
        return self.outcome in REFUSED_OUTCOMES


@dataclass(frozen=True)
class BatchItemResult(WriteResult):
    index: int = 0
    block_id: str | None = None


@dataclass(frozen=True)
class BatchResult:
    user_id: str
    results: list[BatchItemResult]


@dataclass(frozen=True)
class FactPage:
    items: list[Fact]
    next_cursor: str | None = None


@dataclass(frozen=True)
class MemoryUser:
    user_id: str
    task_ids: list[str] = field(default_factory=list)
    created_at: datetime | None = None


@dataclass(frozen=True)
class UserPage:
    items: list[MemoryUser]
    next_cursor: str | None = None


@dataclass(frozen=True)
class AuditEvent:
    id: int
    actor: str
    action: str
    outcome: str
    target_type: str = ""
    target_id: str = ""
    before: Any = None
    after: Any = None
    reason: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class History:
    fact_id: str
    chain: list[Fact]
    events: list[AuditEvent]


@dataclass(frozen=True)
class Score:
    final: float
    vector: float = 0.0
    cosine: float = 0.0
    keyword: float = 0.0
    recency: float = 0.0
    importance: float = 0.0
    relevance: float = 0.0
    neighbour: float = 0.0
    time: float = 0.0  # how well the fact's observed time matches the time the query names
    effective_confidence: float = 0.0
    staleness: float = 0.0
    stale: bool = False


@dataclass(frozen=True)
class MessageHit:
    """A past message of the user's conversations, as stored (secrets and blocked PII redacted)."""

    id: int
    thread_id: str
    role: str
    created_at: datetime
    text: str


@dataclass(frozen=True)
class DocumentChunk:
    """A chunk of a document from a knowledge source, with what citing it needs."""

    id: str
    text: str
    source_id: str
    source_name: str
    document_id: str = ""
    title: str = ""
    url: str | None = None  # a page's URL (url and site sources)
    file: str | None = None  # else the file's name or its path in the folder
    section: str = ""  # the headings above the chunk, " > " between them
    fetched_at: datetime | None = None
    version: int = 0

    @property
    def citation(self) -> str:
        """ "Source name, URL or file, § section": how to name it to a person."""
        parts = [self.source_name, self.url or self.file or ""]
        return ", ".join(p for p in parts if p) + (f" \u00a7 {self.section}" if self.section else "")


@dataclass(frozen=True)
class SearchHit:
    """One hit: `kind` "fact" (its `fact`), "message" (its `message`) or "chunk" (its `chunk`, a
    document's); the others are None. All kinds are ranked together."""

    fact: Fact | None
    score: Score
    kind: str = "fact"
    message: MessageHit | None = None
    chunk: DocumentChunk | None = None


@dataclass(frozen=True)
class SearchResult:
    user_id: str
    query: str
    hits: list[SearchHit]
    k: int = 10
    include: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    candidates: int = 0
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Dropped:
    id: str
    reason: str
    of: str | None = None  # reason "duplicate": the fact whose line holds this one


@dataclass(frozen=True)
class ContextSection:
    name: str
    tokens: int
    included: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    contradicts_notebook: list[str] = field(default_factory=list)  # documents the notebook overrules


@dataclass(frozen=True)
class Context:
    """The token-capped context block: `text` is what goes into the prompt (fenced as data)."""

    user_id: str
    text: str
    tokens: int
    budget_tokens: int
    task: str = ""
    notebook_truncated: bool = False
    warnings: list[str] = field(default_factory=list)
    sections: list[ContextSection] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Notebook:
    user_id: str
    content: str
    version: int
    updated_at: datetime | None = None
    updated_by: str = ""


@dataclass(frozen=True)
class SkillSummary:
    path: str
    scope: str
    version: int
    user_id: str | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class Skill(SkillSummary):
    content: str = ""
    updated_by: str = ""


@dataclass(frozen=True)
class MessagesAccepted:
    thread_id: str
    accepted: int
    message_ids: list[int] = field(default_factory=list)
    pending: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    redacted: list[dict[str, Any]] = field(default_factory=list)
    extraction: str = ""
    extract_due_at: datetime | None = None


@dataclass(frozen=True)
class ThreadClosed:
    thread_id: str
    closed_at: datetime | None = None
    extraction: str = ""
    episode: str = ""


@dataclass(frozen=True)
class Episode:
    """One thread or task as it happened: when, its summary and outcome (success, failure, unknown)."""

    id: str
    user_id: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    thread_id: str | None = None
    summary: str = ""
    outcome: str = "unknown"
    summarizer: str = ""
    message_count: int = 0
    fact_count: int = 0
    created_at: datetime | None = None


@dataclass(frozen=True)
class EpisodeFact:
    id: str
    content: str
    category: str = ""
    status: str = ""


@dataclass(frozen=True)
class EpisodeMessage:
    id: int
    role: str
    content: str
    created_at: datetime | None = None
    status: str = ""


@dataclass(frozen=True)
class EpisodeDetail(Episode):
    """An episode with the facts drawn from it and its messages."""

    facts: list[EpisodeFact] = field(default_factory=list)
    messages: list[EpisodeMessage] = field(default_factory=list)


@dataclass(frozen=True)
class EpisodePage:
    items: list[Episode]
    next_cursor: str | None = None


@dataclass(frozen=True)
class Batch:
    """An extraction batch: the messages of a thread extracted in one call, its status and cost."""

    id: int
    user_id: str
    thread_id: str
    status: str
    attempts: int = 0
    error: str = ""
    extractor: str = ""
    model: str = ""
    message_count: int = 0
    fact_count: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    created_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class Settings:
    """The tenant's settings (admin keys): thresholds, cap, PII policy, search weights, extraction."""

    confidence_threshold: float
    dedup_similarity: float
    contradiction_similarity: float
    auto_resolve_gap: float
    fact_cap: int
    pii_policy: dict[str, str] = field(default_factory=dict)
    search_weights: dict[str, float] = field(default_factory=dict)
    debounce_seconds: int = 0
    min_message_chars: int = 0
    extraction_enabled: bool = True
    episode_idle_minutes: int = 0


@dataclass(frozen=True)
class Erased:
    erased: bool
    counts: dict[str, int] = field(default_factory=dict)


# --- Entities (the knowledge graph) --------------------------------------------------------------


@dataclass(frozen=True)
class EntityRef:
    id: str
    name: str
    type: str


@dataclass(frozen=True)
class Entity:
    """A person, company, project, place or tool; `merged_into` is set (the live entity to use instead)
    when it was merged into another."""

    id: str
    name: str
    type: str
    scope: str = "user"
    user_id: str | None = None
    aliases: list[str] = field(default_factory=list)
    summary: str = ""
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    merged_into: str | None = None


@dataclass(frozen=True)
class RelationChunk:
    """The document chunk that states a relation: its document's title, URL or file, and section."""

    chunk_id: str
    document_id: str
    source_id: str
    title: str = ""
    locator: str = ""
    section: list[str] = field(default_factory=list)
    document_version: int = 0
    status: str = ""


@dataclass(frozen=True)
class Relation:
    """subject -[type]-> object, true from `valid_from` until `valid_to` (None: still holds), stated by
    a fact (`source_fact_id`) or by a document chunk (`source_chunk`)."""

    id: int
    type: str
    subject: EntityRef
    object: EntityRef
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    source_fact_id: str | None = None
    source_chunk: RelationChunk | None = None
    invalidated_by_id: str | None = None
    closed_reason: str = ""


@dataclass(frozen=True)
class EntityPage:
    items: list[Entity]


@dataclass(frozen=True)
class EntityMention:
    fact_id: str
    content: str
    status: str
    role: str
    valid_from: datetime | None = None


@dataclass(frozen=True)
class MergedIn:
    """An entity merged into this one; `id` is the merge (undo it with `entities.undo_merge`)."""

    id: str
    loser: EntityRef
    automatic: bool = False
    created_at: datetime | None = None


@dataclass(frozen=True)
class EntityDetail(Entity):
    """An entity with the facts that mention it, its relations over time, the threads and episodes it
    came up in; for a merged entity, `merge_id` is the merge (undo it with `entities.undo_merge`)."""

    facts: list[EntityMention] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    threads: list[dict[str, Any]] = field(default_factory=list)
    thread_count: int = 0
    episodes: list[dict[str, Any]] = field(default_factory=list)
    episode_count: int = 0
    merge_id: str | None = None
    merges: list[MergedIn] = field(default_factory=list)


@dataclass(frozen=True)
class EntityGraph:
    """The entities around `root` and the relations that held at `as_of`. `merged_from`: the entity asked
    for was merged into `root`."""

    root: str
    depth: int
    as_of: datetime | None
    nodes: list[Entity]
    edges: list[Relation]
    merged_from: str | None = None


@dataclass(frozen=True)
class EntityMerge:
    id: str
    survivor: Entity
    loser: Entity
    automatic: bool = False
    mentions_moved: int = 0
    relations_moved: int = 0
    created_at: datetime | None = None
    undone_at: datetime | None = None


@dataclass(frozen=True)
class EntitySplit:
    entity: Entity
    split_off: Entity


@dataclass(frozen=True)
class EntityReview:
    """Resolution was unsure whether `entity` is `candidate`: accept merges them, reject keeps them apart."""

    id: str
    entity: Entity
    candidate: Entity
    similarity: float = 0.0
    judge: str = ""
    status: str = "open"
    resolved_by: str = ""
    resolved_at: datetime | None = None
    merge_id: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class EntityReviewPage:
    items: list[EntityReview]


@dataclass(frozen=True)
class KnowledgeDocument:
    """One page or file of a knowledge source: its current `version`, and its chunks by status."""

    id: str
    locator: str
    title: str = ""
    status: str = ""
    version: int = 1
    fetched_at: datetime | None = None
    changed_at: datetime | None = None
    error: str = ""
    chunks: dict[str, int] = field(default_factory=dict)
    chunks_blocked: int = 0
    chunks_redacted: int = 0
    chunks_quarantined: int = 0


@dataclass(frozen=True)
class KnowledgeSource:
    """A file, page, site or folder the agent's memory learns from. `state` is how its crawl stands
    (`pages_done` of `pages_total`); `user_id` is None for a source the tenant shares."""

    id: str
    kind: str
    name: str
    location: str
    status: str
    state: str
    user_id: str | None = None
    refresh_minutes: int | None = None
    max_depth: int = 0
    max_pages: int = 0
    max_bytes: int = 0
    pages_done: int = 0
    pages_total: int = 0
    documents: int = 0
    chunks: dict[str, int] = field(default_factory=dict)
    last_error: str = ""
    crawl_started_at: datetime | None = None
    last_crawled_at: datetime | None = None
    next_crawl_at: datetime | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class KnowledgeSourceDetail(KnowledgeSource):
    document_list: list[KnowledgeDocument] = field(default_factory=list)


@dataclass(frozen=True)
class KnowledgeSourcePage:
    items: list[KnowledgeSource]


@dataclass(frozen=True)
class KnowledgeChunk:
    """A piece of a document as memory serves it; a quarantined one says why in `status_reason`."""

    id: str
    ordinal: int
    content: str
    status: str
    heading_path: list[str] = field(default_factory=list)
    tokens: int = 0
    status_reason: str = ""
    document_version: int = 1
    redacted_kinds: list[str] = field(default_factory=list)
    fetched_at: datetime | None = None


@dataclass(frozen=True)
class KnowledgeChunkPage:
    document: KnowledgeDocument
    items: list[KnowledgeChunk]


@dataclass(frozen=True)
class KnowledgeSourceDeleted:
    id: str
    status: str
    chunks_retired: int = 0


@dataclass(frozen=True)
class KnowledgeSettings:
    ingestion_enabled: bool
