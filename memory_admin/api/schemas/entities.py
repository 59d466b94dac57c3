"""Entities, their graph and their curation (SPEC §12)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from ninja import Schema
from pydantic import Field

from memory_admin.api.schemas.common import Limit, StrictIn, Timestamp, UserId, text

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


class RelationChunkOut(Schema):
    """The document chunk that states a relation: its document, the URL or file, the section."""

    chunk_id: UUID
    document_id: UUID
    source_id: UUID
    title: str
    locator: str  # the page's URL, or the file's path or name
    section: list[str]  # the headings above the chunk, outermost first
    document_version: int
    status: str  # active, superseded, retired

    @staticmethod
    def of(chunk: Any) -> dict[str, Any]:
        return {
            "chunk_id": chunk.pk,
            "document_id": chunk.document_id,
            "source_id": chunk.source_id,
            "title": chunk.document.title,
            "locator": chunk.document.locator,
            "section": chunk.heading_path,
            "document_version": chunk.document_version,
            "status": chunk.status,
        }


class RelationOut(Schema):
    id: int
    type: str
    subject: EntityRefOut
    object: EntityRefOut
    valid_from: datetime
    valid_to: datetime | None  # null: still holds
    # Exactly one of the two: the fact that states it, or the document chunk that does.
    source_fact_id: UUID | None
    source_chunk: RelationChunkOut | None = None
    invalidated_by_id: UUID | None  # the fact that closed it
    # Why it closed ("" while open): superseded, forgotten, capped, a GC rule (hard_ttl,
    # soft_ttl_unread, low_confidence), review_evicted, quarantined, retired (its document is gone).
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
            "source_chunk": RelationChunkOut.of(relation.source_chunk) if relation.source_chunk_id else None,
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
