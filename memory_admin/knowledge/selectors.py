"""What the API shows of sources, documents and chunks; every read goes through `visible` (one access rule)."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count

from memory_admin.models import KnowledgeChunk, KnowledgeDocument, KnowledgeSource, MemoryUser
from memory_admin.selectors.access import Principal, get_visible, visible

DOCUMENTS_SHOWN = 500


def _chunk_counts(principal: Principal, **lookup) -> dict:
    """{(group key): {status: count}} for the chunks matching `lookup`, grouped by source or document."""
    group = "document_id" if "document_id__in" in lookup else "source_id"
    rows = (
        visible(principal, KnowledgeChunk.objects.filter(**lookup))
        .values(group, "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts: dict = defaultdict(dict)
    for row in rows:
        counts[row[group]][row["status"]] = row["n"]
    return counts


def _source_row(source: KnowledgeSource, chunks: dict, documents: int) -> dict:
    return {
        "id": source.pk,
        "kind": source.kind,
        "name": source.name,
        "location": source.location,
        "user_id": source.memory_user.external_id if source.memory_user_id else None,
        "status": source.status,
        "state": source.state,
        "refresh_minutes": source.refresh_minutes,
        "max_depth": source.max_depth,
        "max_pages": source.max_pages,
        "max_bytes": source.max_bytes,
        "pages_done": source.pages_done,
        "pages_total": source.pages_total,
        "documents": documents,
        "chunks": chunks,
        "last_error": source.last_error,
        "crawl_started_at": source.crawl_started_at,
        "last_crawled_at": source.last_crawled_at,
        "next_crawl_at": source.next_crawl_at,
        "created_at": source.created_at,
    }


def _sources(principal: Principal):
    return visible(principal, KnowledgeSource.objects.select_related("memory_user").defer("upload", "crawl_state"))


def source_list(principal: Principal, *, memory_user: MemoryUser | None = None, include_deleted: bool = False) -> list:
    sources = _sources(principal)
    if memory_user is not None:
        sources = sources.filter(memory_user=memory_user)
    if not include_deleted:
        sources = sources.exclude(status=KnowledgeSource.Status.DELETED)
    sources = list(sources.order_by("-created_at")[:500])
    ids = [s.pk for s in sources]
    chunks = _chunk_counts(principal, source_id__in=ids)
    documents = dict(
        KnowledgeDocument.objects.filter(source_id__in=ids, status=KnowledgeDocument.Status.ACTIVE)
        .values_list("source_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    return [_source_row(s, chunks.get(s.pk, {}), documents.get(s.pk, 0)) for s in sources]


def _document_row(document: KnowledgeDocument, chunks: dict) -> dict:
    return {
        "id": document.pk,
        "locator": document.locator,
        "title": document.title,
        "status": document.status,
        "version": document.version,
        "fetched_at": document.fetched_at,
        "changed_at": document.changed_at,
        "error": document.error,
        "chunks": chunks,
        "chunks_blocked": document.chunks_blocked,
        "chunks_redacted": document.chunks_redacted,
        "chunks_quarantined": document.chunks_quarantined,
    }


def source_detail(principal: Principal, source_id) -> dict:
    source = get_visible(principal, _sources(principal), pk=source_id)
    documents = list(source.documents.order_by("locator")[:DOCUMENTS_SHOWN])
    per_document = _chunk_counts(principal, document_id__in=[d.pk for d in documents])
    chunks: dict[str, int] = defaultdict(int)
    for counts in per_document.values():
        for status, n in counts.items():
            chunks[status] += n
    active = sum(1 for d in documents if d.status == KnowledgeDocument.Status.ACTIVE)
    row = _source_row(source, dict(chunks), active)
    row["document_list"] = [_document_row(d, per_document.get(d.pk, {})) for d in documents]
    return row


def document_chunks(principal: Principal, document_id, *, status: str | None = None) -> dict:
    document = get_visible(principal, KnowledgeDocument.objects.all(), pk=document_id)
    chunks = KnowledgeChunk.objects.filter(document=document).defer(*KnowledgeChunk.VECTORS)
    if status:
        chunks = chunks.filter(status=status)
    counts = _chunk_counts(principal, document_id__in=[document.pk]).get(document.pk, {})
    return {
        "document": _document_row(document, counts),
        "items": list(chunks.order_by("-document_version", "ordinal")[:1000]),
    }
