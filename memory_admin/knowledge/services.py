"""Writes on knowledge sources: create, crawl now, pause, resume, delete, the tenant's kill switch.

Each checks access with the one access function (selectors/access.py), is audited, and leaves the
crawl itself to the worker (`knowledge.crawl` on the bulk queue), sent once the transaction commits.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from memory_admin import celery
from memory_admin.knowledge import conf
from memory_admin.knowledge.crawl import crawl_begin, ingestion_enabled
from memory_admin.knowledge.errors import KnowledgeError
from memory_admin.knowledge.fetch import check_url, resolve_checked
from memory_admin.knowledge.parsing import doc_type
from memory_admin.models import (
    KnowledgeChunk,
    KnowledgeDocument,
    KnowledgeSettings,
    KnowledgeSource,
    MemoryUser,
    RelationEnd,
)
from memory_admin.selectors.access import ADMIN, Principal, get_visible, require_tenant_wide, require_write_to
from memory_admin.services.audit import audit
from memory_admin.services.entities import relations_end

CRAWL_TASK = "knowledge.crawl"


def _dispatch(source_id) -> None:
    transaction.on_commit(lambda: celery.dispatch(CRAWL_TASK, str(source_id)))


def _snapshot(source: KnowledgeSource) -> dict:
    return {
        "id": str(source.pk),
        "kind": source.kind,
        "name": source.name,
        "location": source.location,
        "status": source.status,
        "refresh_minutes": source.refresh_minutes,
    }


def _require_enabled(principal: Principal) -> None:
    if not ingestion_enabled(principal.tenant_id):
        raise KnowledgeError(
            "Ingestion is switched off for this tenant; an admin can switch it on (PUT /knowledge/settings).",
            code="ingestion_disabled",
            status=409,
        )


def _check_limits(max_depth: int, max_pages: int, max_bytes: int) -> None:
    for name, value, limit in (
        ("max_depth", max_depth, conf.LIMIT_DEPTH()),
        ("max_pages", max_pages, conf.LIMIT_PAGES()),
        ("max_bytes", max_bytes, conf.LIMIT_BYTES()),
    ):
        if value > int(limit):
            raise KnowledgeError(f"{name} may be at most {limit}.", code="limit_too_high", field=name, limit=limit)


def folder_allowed(path: str, roots: tuple[str, ...] | None = None) -> Path:
    """The folder, resolved, if it lies inside one of the roots staff configured (KNOWLEDGE_FOLDER_ROOTS)."""
    resolved = Path(path).expanduser().resolve()
    for root in conf.FOLDER_ROOTS() if roots is None else roots:
        if resolved.is_relative_to(Path(root).expanduser().resolve()):
            if not resolved.is_dir():
                raise KnowledgeError("No folder at that path.", code="folder_not_found", field="location")
            return resolved
    raise KnowledgeError(
        "Folders can be read only inside the roots an operator configured (KNOWLEDGE_FOLDER_ROOTS).",
        code="folder_not_allowed",
        field="location",
    )


@transaction.atomic
def source_create(
    principal: Principal,
    *,
    kind: str,
    name: str,
    memory_user: MemoryUser | None = None,
    location: str = "",
    upload: bytes | None = None,
    upload_type: str = "",
    refresh_minutes: int | None = None,
    max_depth: int = 2,
    max_pages: int = 50,
    max_bytes: int = 20 * 1024 * 1024,
    folder_roots: tuple[str, ...] | None = None,
    dispatch: bool = True,
) -> KnowledgeSource:
    """A new source (its first crawl is sent at commit unless `dispatch` is false: the caller crawls).
    A tenant-wide source needs a tenant-wide writer; a folder source an admin, and a folder under a
    configured root (`folder_roots`: the command line's own, trusted, choice)."""
    require_write_to(principal, memory_user)
    _require_enabled(principal)
    _check_limits(max_depth, max_pages, max_bytes)
    if kind in (KnowledgeSource.Kind.URL, KnowledgeSource.Kind.SITE):
        resolve_checked(*check_url(location)[1:])  # refused now rather than at the first fetch
    elif kind == KnowledgeSource.Kind.FOLDER:
        principal.require(ADMIN)
        location = str(folder_allowed(location, folder_roots))
    elif kind == KnowledgeSource.Kind.FILE:
        if upload is None:
            raise KnowledgeError("Send the file as `file` (multipart).", code="file_missing", field="file")
        if len(upload) > int(conf.MAX_UPLOAD_BYTES()):
            raise KnowledgeError(
                f"A file may hold at most {conf.MAX_UPLOAD_BYTES()} bytes.",
                code="too_large",
                status=413,
                limit=conf.MAX_UPLOAD_BYTES(),
            )
        if doc_type(name=location, media_type=upload_type) is None:
            raise KnowledgeError(
                "Upload Markdown, plain text, HTML or PDF (by its name's ending or its media type).",
                code="unsupported_file_type",
                field="file",
            )
    else:
        raise KnowledgeError("kind is one of file, url, site, folder.", code="invalid", field="kind")
    source = KnowledgeSource.objects.create(
        tenant_id=principal.tenant_id,
        memory_user=memory_user,
        kind=kind,
        name=name[:200],
        location=location[:2000],
        upload=upload,
        upload_type=upload_type[:100],
        refresh_minutes=refresh_minutes,
        max_depth=0 if kind == KnowledgeSource.Kind.URL else max_depth,
        max_pages=1 if kind == KnowledgeSource.Kind.URL else max_pages,
        max_bytes=max_bytes,
        created_by=principal.actor,
    )
    crawl_begin(source)
    audit(principal, "knowledge.source.create", outcome="created", target=source, after=_snapshot(source))
    if dispatch:
        _dispatch(source.pk)
    return source


def source_get_for(principal: Principal, source_id) -> KnowledgeSource:
    return get_visible(principal, KnowledgeSource.objects.exclude(status=KnowledgeSource.Status.DELETED), pk=source_id)


def _writable(principal: Principal, source_id) -> KnowledgeSource:
    source = source_get_for(principal, source_id)
    if source.memory_user_id is None:
        require_tenant_wide(principal)
    else:
        require_write_to(principal, source.memory_user)
    return source


@transaction.atomic
def source_crawl_now(principal: Principal, source_id, *, dispatch: bool = True) -> KnowledgeSource:
    source = _writable(principal, source_id)
    _require_enabled(principal)
    if source.status == KnowledgeSource.Status.PAUSED:
        raise KnowledgeError("The source is paused; resume it first.", code="source_paused", status=409)
    if source.state == KnowledgeSource.State.RUNNING:
        raise KnowledgeError("A crawl of this source is already running.", code="crawl_in_progress", status=409)
    crawl_begin(source)
    audit(principal, "knowledge.source.crawl", outcome="queued", target=source)
    if dispatch:
        _dispatch(source.pk)
    return source


@transaction.atomic
def source_pause(principal: Principal, source_id, *, paused: bool) -> KnowledgeSource:
    """Pause (no crawl runs or is scheduled; a running one stops at its next step) or resume (a crawl now)."""
    source = _writable(principal, source_id)
    before = _snapshot(source)
    if paused:
        source.status = KnowledgeSource.Status.PAUSED
        source.save(update_fields=["status", "updated_at"])
    else:
        _require_enabled(principal)
        source.status = KnowledgeSource.Status.ACTIVE
        source.save(update_fields=["status", "updated_at"])
        if source.state != KnowledgeSource.State.RUNNING:
            crawl_begin(source)
            _dispatch(source.pk)
    audit(
        principal,
        "knowledge.source.pause" if paused else "knowledge.source.resume",
        outcome="paused" if paused else "resumed",
        target=source,
        before=before,
        after=_snapshot(source),
    )
    return source


@transaction.atomic
def source_delete(principal: Principal, source_id, *, reason: str = "") -> int:
    """Delete a source: its documents and chunks are retired (kept as history), the source stops; audited."""
    source = _writable(principal, source_id)
    before = _snapshot(source)
    now = timezone.now()
    ids = list(
        KnowledgeChunk.objects.filter(
            source=source, status__in=[KnowledgeChunk.Status.ACTIVE, KnowledgeChunk.Status.QUARANTINED]
        ).values_list("pk", flat=True)
    )
    retired = KnowledgeChunk.objects.filter(pk__in=ids).update(
        status=KnowledgeChunk.Status.RETIRED, status_reason="its source was deleted", updated_at=now
    )
    relations_end(chunk_ids=ids, reason=RelationEnd.RETIRED)  # the relations its documents stated end
    KnowledgeDocument.objects.filter(source=source).update(status=KnowledgeDocument.Status.RETIRED)
    source.status = KnowledgeSource.Status.DELETED
    source.state = KnowledgeSource.State.IDLE
    source.next_crawl_at = None
    source.crawl_state = {}
    source.upload = None
    source.save(update_fields=["status", "state", "next_crawl_at", "crawl_state", "upload", "updated_at"])
    audit(
        principal,
        "knowledge.source.delete",
        outcome="deleted",
        target=source,
        before=before,
        after={**_snapshot(source), "chunks_retired": retired},
        reason=reason[:500],
    )
    return retired


@transaction.atomic
def knowledge_settings_update(principal: Principal, *, ingestion_enabled: bool) -> KnowledgeSettings:
    require_tenant_wide(principal, ADMIN)
    row, _ = KnowledgeSettings.objects.select_for_update().get_or_create(tenant_id=principal.tenant_id)
    before = {"ingestion_enabled": row.ingestion_enabled}
    row.ingestion_enabled = ingestion_enabled
    row.save(update_fields=["ingestion_enabled", "updated_at"])
    audit(
        principal,
        "knowledge.settings.update",
        outcome="updated",
        target=row,
        before=before,
        after={"ingestion_enabled": ingestion_enabled},
    )
    return row


def due_sources(now=None) -> list:
    """Active sources whose refresh is due (or whose crawl was sent and seems lost), for beat's sweep."""
    now = now or timezone.now()
    stuck = now - timedelta(seconds=float(conf.STUCK_SECONDS()))
    due = KnowledgeSource.objects.filter(status=KnowledgeSource.Status.ACTIVE, next_crawl_at__lte=now).exclude(
        state=KnowledgeSource.State.RUNNING
    )
    lost = KnowledgeSource.objects.filter(
        status=KnowledgeSource.Status.ACTIVE, state=KnowledgeSource.State.RUNNING, updated_at__lt=stuck
    )
    return list(due.values_list("pk", "tenant_id")) + [(pk, None) for pk in lost.values_list("pk", flat=True)]


def refresh_due(now=None) -> int:
    """Start the crawls that are due (tenants whose ingestion is on); resend the lost ones. Returns how many."""

    sent = 0
    for pk, tenant_id in due_sources(now):
        if tenant_id is not None:
            if not ingestion_enabled(tenant_id):
                continue
            with transaction.atomic():
                source = KnowledgeSource.objects.select_for_update(skip_locked=True).filter(pk=pk).first()
                if source is None or source.state == KnowledgeSource.State.RUNNING:
                    continue
                crawl_begin(source)
        else:
            KnowledgeSource.objects.filter(pk=pk).update(updated_at=timezone.now())
        sent += celery.dispatch(CRAWL_TASK, str(pk))
    return sent
