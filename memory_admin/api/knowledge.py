"""Trained knowledge (issue 34): sources the agent's memory learns from (files, pages, sites, folders).

Creating a source answers 201 at once; the crawl runs on the worker's bulk queue and its progress is in
`GET /knowledge/sources/{id}` (state, pages done of pages known, last and next crawl, per-document
errors and what was blocked, redacted or quarantined). Every refusal has a stable `code`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from ninja import File, Form, Query, Router, Schema, UploadedFile
from pydantic import Field, StrictBool, StrictInt

from memory_admin.api.schemas import StrictIn, UserId, text
from memory_admin.knowledge import selectors, services
from memory_admin.selectors.access import memory_user_for

router = Router(tags=["knowledge"])

SourceName = text(min_length=1, max_length=200)
Location = text(min_length=1, max_length=2000)
RefreshMinutes = Annotated[StrictInt, Field(ge=5, le=525600)]  # five minutes to a year
Depth = Annotated[StrictInt, Field(ge=0, le=10)]
Pages = Annotated[StrictInt, Field(ge=1, le=100000)]
Bytes = Annotated[StrictInt, Field(ge=1024, le=10**10)]


class SourceIn(StrictIn):
    kind: Literal["url", "site", "folder"]
    location: Location  # the URL, or the folder's path on the server
    name: SourceName | None = None
    user_id: UserId | None = None  # a memory user's own source; none: shared by the tenant
    refresh_minutes: RefreshMinutes | None = None
    max_depth: Depth = 2
    max_pages: Pages = 50
    max_bytes: Bytes = 20 * 1024 * 1024


class UploadIn(Schema):
    name: SourceName | None = None
    user_id: UserId | None = None


class SourceFilters(Schema):
    user_id: UserId | None = None
    include_deleted: bool = False


class KnowledgeSettingsIn(StrictIn):
    ingestion_enabled: StrictBool


class SourceOut(Schema):
    id: UUID
    kind: str
    name: str
    location: str
    user_id: str | None
    status: str
    state: str
    refresh_minutes: int | None
    max_depth: int
    max_pages: int
    max_bytes: int
    pages_done: int
    pages_total: int
    documents: int
    chunks: dict[str, int]
    last_error: str
    crawl_started_at: datetime | None
    last_crawled_at: datetime | None
    next_crawl_at: datetime | None
    created_at: datetime


class DocumentOut(Schema):
    id: UUID
    locator: str
    title: str
    status: str
    version: int
    fetched_at: datetime | None
    changed_at: datetime | None
    error: str
    chunks: dict[str, int]
    chunks_blocked: int
    chunks_redacted: int
    chunks_quarantined: int


class SourceDetailOut(SourceOut):
    document_list: list[DocumentOut]


class SourcePage(Schema):
    items: list[SourceOut]


class ChunkOut(Schema):
    id: UUID
    ordinal: int
    heading_path: list[str]
    content: str
    tokens: int
    status: str
    status_reason: str
    document_version: int
    redacted_kinds: list[str]
    fetched_at: datetime


class ChunkPage(Schema):
    document: DocumentOut
    items: list[ChunkOut]


class KnowledgeSettingsOut(Schema):
    ingestion_enabled: bool


def _user(request, user_id: str | None, *, create: bool = False):
    return memory_user_for(request.principal, user_id, create=create) if user_id else None


@router.post("/knowledge/sources", response={201: SourceDetailOut})
def create_source(request, payload: SourceIn):
    """A page (`url`), a same-host crawl (`site`, bounded by `max_depth`, `max_pages`, `max_bytes`,
    robots.txt honoured) or a folder on the server (`folder`, admin keys, under KNOWLEDGE_FOLDER_ROOTS)."""
    source = services.source_create(
        request.principal,
        memory_user=_user(request, payload.user_id, create=True),
        name=payload.name or payload.location,
        **payload.dict(exclude={"user_id", "name"}),
    )
    return 201, selectors.source_detail(request.principal, source.pk)


@router.post("/knowledge/sources/upload", response={201: SourceDetailOut})
def upload_source(request, file: File[UploadedFile], form: Form[UploadIn]):
    """An uploaded file (multipart `file`): Markdown, plain text, HTML or PDF."""
    body = file.read(services.conf.MAX_UPLOAD_BYTES() + 1)
    source = services.source_create(
        request.principal,
        kind="file",
        memory_user=_user(request, form.user_id, create=True),
        name=form.name or file.name or "upload",
        location=(file.name or "upload")[:2000],
        upload=body,
        upload_type=file.content_type or "",
    )
    return 201, selectors.source_detail(request.principal, source.pk)


@router.get("/knowledge/sources", response=SourcePage)
def list_sources(request, filters: Query[SourceFilters]):
    """The sources visible to this key, newest first (a restricted key: the tenant's and its users')."""
    user = _user(request, filters.user_id)
    return {
        "items": selectors.source_list(request.principal, memory_user=user, include_deleted=filters.include_deleted)
    }


@router.get("/knowledge/sources/{source_id}", response=SourceDetailOut)
def get_source(request, source_id: UUID):
    return selectors.source_detail(request.principal, source_id)


@router.get("/knowledge/documents/{document_id}/chunks", response=ChunkPage)
def list_chunks(
    request, document_id: UUID, status: Literal["active", "superseded", "retired", "quarantined"] | None = None
):
    """A document's chunks with their status (quarantined ones say why), current version first."""
    return selectors.document_chunks(request.principal, document_id, status=status)


@router.post("/knowledge/sources/{source_id}/crawl", response={202: SourceDetailOut})
def crawl_source(request, source_id: UUID):
    """Crawl now (409 `crawl_in_progress` while one runs, `source_paused` when paused)."""
    services.source_crawl_now(request.principal, source_id)
    return 202, selectors.source_detail(request.principal, source_id)


@router.post("/knowledge/sources/{source_id}/pause", response=SourceDetailOut)
def pause_source(request, source_id: UUID):
    services.source_pause(request.principal, source_id, paused=True)
    return selectors.source_detail(request.principal, source_id)


@router.post("/knowledge/sources/{source_id}/resume", response=SourceDetailOut)
def resume_source(request, source_id: UUID):
    """Resume, and crawl now."""
    services.source_pause(request.principal, source_id, paused=False)
    return selectors.source_detail(request.principal, source_id)


@router.delete("/knowledge/sources/{source_id}", response={200: dict})
def delete_source(request, source_id: UUID):
    """Delete: its chunks are retired (kept as history, never served), audited."""
    retired = services.source_delete(request.principal, source_id)
    return {"id": str(source_id), "status": "deleted", "chunks_retired": retired}


@router.get("/knowledge/settings", response=KnowledgeSettingsOut)
def get_knowledge_settings(request):
    return {"ingestion_enabled": services.ingestion_enabled(request.principal.tenant_id)}


@router.put("/knowledge/settings", response=KnowledgeSettingsOut)
def put_knowledge_settings(request, payload: KnowledgeSettingsIn):
    """The tenant's kill switch (admin keys): off stops running crawls at their next step."""
    row = services.knowledge_settings_update(request.principal, ingestion_enabled=payload.ingestion_enabled)
    return {"ingestion_enabled": row.ingestion_enabled}
