"""The import of an export: the shape `GET /users/{id}/export` answers, and what an import did."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field, StrictBool, StrictInt

from memory_admin.api.schemas.common import (
    Category,
    Confidence,
    FactKey,
    Identifier,
    Kind,
    Metadata,
    Status,
    StrictIn,
    Text,
    Timestamp,
    text,
)
from memory_admin.api.schemas.messages import Role
from memory_admin.models import Entity, FactEntity, RelationEnd
from memory_admin.models.entities import RELATION_TYPE_PATTERN

# --- Import of an export (`POST /users/{id}/import`, `manage.py import_memory`; services/imports.py) ---
# The shape `GET /users/{id}/export` answers. Fields added to the export later are optional here, so
# older exports import too; unknown fields are refused like everywhere else.

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
