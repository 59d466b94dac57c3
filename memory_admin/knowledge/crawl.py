"""A crawl: the walk over a source's documents, a few at a time, resumable from the database.

`crawl_begin` lays out the walk (the start URL, the folder's files, the uploaded file) in the source's
`crawl_state`; each `crawl_step` (one short Celery task on the bulk queue) visits up to
KNOWLEDGE_PAGES_PER_TASK documents and says whether more remain, so a large site never holds a worker
for long and conversation extraction (interactive queue, fetched first) runs between steps.

Per document: an ETag/Last-Modified answered 304, or text whose hash did not change, leaves its chunks
untouched; a changed text is digested (changed chunks superseded); a 404/410, a file gone from the folder,
or a page no longer linked is retired with its chunks once the walk completes. A site crawl stays on the
start page's scheme, host and port, within `max_depth` links, `max_pages` pages and `max_bytes` bytes,
and honours robots.txt.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from django.db import connection, transaction
from django.utils import timezone

from memory_admin.knowledge import conf
from memory_admin.knowledge.digest import digest_document, retire_document
from memory_admin.knowledge.errors import FetchRefused, KnowledgeError
from memory_admin.knowledge.fetch import fetch, robots_for
from memory_admin.knowledge.parsing import SUFFIXES, doc_type, parse
from memory_admin.models import KnowledgeDocument, KnowledgeSettings, KnowledgeSource
from memory_admin.selectors.access import Principal

Source = KnowledgeSource


def ingestion_enabled(tenant_id: int) -> bool:
    row = KnowledgeSettings.objects.filter(tenant_id=tenant_id).only("ingestion_enabled").first()
    return row is None or row.ingestion_enabled


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def folder_files(root: str) -> list[str]:
    """The documents of a folder source: files of an accepted type, as paths relative to it, sorted."""
    base = Path(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith(".") and Path(name).suffix.lower() in SUFFIXES:
                found.append(str((Path(dirpath) / name).relative_to(base)))
    return found


def crawl_begin(source: KnowledgeSource) -> None:
    """Lay out a new walk of the source and mark it running (the caller dispatches the first step)."""
    if source.kind in (Source.Kind.URL, Source.Kind.SITE):
        frontier = [[source.location, 0]]
    elif source.kind == Source.Kind.FOLDER:
        frontier = [[path, 0] for path in folder_files(source.location)] if Path(source.location).is_dir() else []
    else:
        frontier = [[source.location or source.name, 0]]
    source.crawl_state = {
        "frontier": frontier,
        "seen": [item[0] for item in frontier],
        "visited": [],
        "bytes": 0,
        "missing_root": source.kind == Source.Kind.FOLDER and not Path(source.location).is_dir(),
    }
    source.state = Source.State.RUNNING
    source.crawl_started_at = timezone.now()
    source.last_error = ""
    source.pages_done = 0
    source.pages_total = len(frontier)
    source.save(
        update_fields=[
            "crawl_state",
            "state",
            "crawl_started_at",
            "last_error",
            "pages_done",
            "pages_total",
            "updated_at",
        ]
    )


@contextmanager
def _source_lock(source_id) -> Iterator[bool]:
    """A session advisory lock on the source: a step sent twice (the sweep resending one it took for lost)
    runs once at a time; the second finds it taken and leaves the walk to the first."""
    key = int.from_bytes(hashlib.blake2b(str(source_id).encode(), digest_size=8).digest(), "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        taken = cursor.fetchone()[0]
    try:
        yield taken
    finally:
        if taken:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


def crawl_step(source_id, *, pages: int | None = None) -> bool:
    """Visit up to `pages` documents of the walk; True when more remain (dispatch another step)."""
    with _source_lock(source_id) as taken:
        return _crawl_step(source_id, pages) if taken else False


def _crawl_step(source_id, pages: int | None) -> bool:
    source = KnowledgeSource.objects.filter(pk=source_id).first()
    if source is None or source.state != Source.State.RUNNING:
        return False
    if source.status != Source.Status.ACTIVE:
        _stop(source, error="")
        return False
    if not ingestion_enabled(source.tenant_id):
        _stop(source, error="Ingestion is switched off for this tenant.")
        return False
    state = source.crawl_state
    principal = Principal.system(source.tenant_id, actor=f"knowledge:{source.pk}")
    robots = None
    budget = pages or int(conf.PAGES_PER_TASK())
    while budget > 0 and state["frontier"]:
        locator, depth = state["frontier"].pop(0)
        budget -= 1
        if source.kind == Source.Kind.SITE or source.kind == Source.Kind.URL:
            if robots is None:
                try:
                    robots = robots_for(source.location)
                except FetchRefused as exc:
                    _stop(source, error=exc.detail, failed=True)
                    return False
            _visit_url(principal, source, locator, depth, state, robots)
        elif source.kind == Source.Kind.FOLDER:
            _visit_file(principal, source, locator, state)
        else:
            _visit_upload(principal, source, locator, state)
        source.pages_done = len(state["visited"])
        source.pages_total = len(state["visited"]) + len(state["frontier"])
        source.save(update_fields=["crawl_state", "pages_done", "pages_total", "updated_at"])
    if state["frontier"]:
        return True
    _finish(source)
    return False


def _document(source: KnowledgeSource, locator: str) -> KnowledgeDocument:
    document, _ = KnowledgeDocument.objects.get_or_create(
        source=source,
        locator=locator[:2000],
        defaults={"tenant_id": source.tenant_id, "memory_user_id": source.memory_user_id},
    )
    return document


def _ingest(principal, document: KnowledgeDocument, body: bytes, kind: str, *, charset: str = "", base_url: str = ""):
    """Parse and digest a fetched body, unless its text did not change; returns the parsed text's links."""
    parsed = parse(body, kind, base_url=base_url, charset=charset)
    digest = hashlib.sha256(parsed.text.encode()).hexdigest()
    now = timezone.now()
    if document.status == KnowledgeDocument.Status.ACTIVE and digest == document.content_hash and document.version:
        document.fetched_at = now
        document.error = ""
        document.save(update_fields=["fetched_at", "error"])
        return parsed.links
    digest_document(principal, document, parsed.text, title=parsed.title, fetched_at=now)
    document.status = KnowledgeDocument.Status.ACTIVE
    document.content_hash = digest
    document.bytes = len(body)
    document.fetched_at = now
    document.error = ""
    document.save(update_fields=["status", "content_hash", "bytes", "fetched_at", "error"])
    return parsed.links


def _fail(document: KnowledgeDocument, error: str) -> None:
    document.error = error[:500]
    if not document.version:
        document.status = KnowledgeDocument.Status.FAILED
    document.save(update_fields=["error", "status"])


def _usable(document: KnowledgeDocument, got, url: str, state: dict) -> bool:
    """Whether the answer has a body to digest; records what a 304, a 404/410 or an error means."""
    if got.not_modified:
        document.fetched_at = timezone.now()
        document.save(update_fields=["fetched_at"])
        return False
    if got.status in (404, 410):
        state["visited"].remove(url)  # gone: retired at the end with the pages no longer reached
        return False
    if got.status >= 400:
        _fail(document, f"http_{got.status}: the server answered {got.status}")
        return False
    return True


def _visit_url(principal, source, url: str, depth: int, state: dict, robots) -> None:
    if not robots.can_fetch(conf.USER_AGENT(), url):
        return  # never fetched, so retired at the end if it was stored before
    document = _document(source, url)
    state["visited"].append(url)
    remaining = max(0, source.max_bytes - state["bytes"])
    try:
        got = fetch(
            url,
            etag=document.etag if document.status == KnowledgeDocument.Status.ACTIVE else "",
            last_modified=document.last_modified if document.status == KnowledgeDocument.Status.ACTIVE else "",
            max_bytes=min(int(conf.MAX_PAGE_BYTES()), remaining),
        )
    except KnowledgeError as exc:
        _fail(document, f"{exc.code}: {exc.detail}")
        return
    if got.not_modified and source.kind == Source.Kind.SITE and depth < source.max_depth:
        _follow(source, document.links, depth, state)
    if not _usable(document, got, url, state):
        return
    state["bytes"] += len(got.body)
    kind = doc_type(name=urlsplit(got.url).path, media_type=got.media_type) or "text"
    try:
        links = _ingest(principal, document, got.body, kind, charset=got.charset, base_url=got.url)
    except KnowledgeError as exc:
        _fail(document, f"{exc.code}: {exc.detail}")
        return
    origin = _origin(source.location)
    document.etag, document.last_modified = got.etag, got.last_modified
    document.links = [link for link in links if _origin(link) == origin][:1000]
    document.save(update_fields=["etag", "last_modified", "links"])
    if source.kind == Source.Kind.SITE and depth < source.max_depth:
        _follow(source, links, depth, state)


def _follow(source: KnowledgeSource, links: list[str], depth: int, state: dict) -> None:
    """Queue the links on the start page's origin not seen yet, while the page budget lasts."""
    origin = _origin(source.location)
    for link in links:
        if len(state["seen"]) >= source.max_pages:
            break
        if _origin(link) == origin and link not in state["seen"]:
            state["seen"].append(link)
            state["frontier"].append([link, depth + 1])


def _visit_file(principal, source, relative: str, state: dict) -> None:
    root = Path(source.location).resolve()
    path = (root / relative).resolve()
    document = _document(source, relative)
    if not path.is_relative_to(root) or not path.is_file():
        return  # gone (or a link out of the folder): retired at the end
    state["visited"].append(relative)
    stat = path.stat()
    stamp = f"{stat.st_mtime_ns}:{stat.st_size}"
    if document.status == KnowledgeDocument.Status.ACTIVE and document.etag == stamp:
        return
    if stat.st_size > min(int(conf.MAX_PAGE_BYTES()), max(0, source.max_bytes - state["bytes"])):
        _fail(document, "too_large: the file is over the size limit")
        return
    state["bytes"] += stat.st_size
    try:
        _ingest(principal, document, path.read_bytes(), doc_type(name=path.name) or "text")
    except (KnowledgeError, OSError) as exc:
        _fail(document, f"{getattr(exc, 'code', 'unreadable_document')}: {getattr(exc, 'detail', 'unreadable')}")
        return
    document.etag = stamp
    document.save(update_fields=["etag"])


def _visit_upload(principal, source, name: str, state: dict) -> None:
    document = _document(source, name)
    state["visited"].append(name)
    body = bytes(source.upload or b"")
    try:
        _ingest(principal, document, body, doc_type(name=name, media_type=source.upload_type) or "text")
    except KnowledgeError as exc:
        _fail(document, f"{exc.code}: {exc.detail}")


def _finish(source: KnowledgeSource) -> None:
    visited = set(source.crawl_state.get("visited", []))
    complete = not source.crawl_state.get("missing_root")
    with transaction.atomic():
        if complete:
            for document in source.documents.filter(status__in=["active", "failed"]).exclude(locator__in=visited):
                retire_document(document, reason="no longer in the source")
        now = timezone.now()
        source.state = Source.State.IDLE
        source.last_crawled_at = now
        source.next_crawl_at = now + timedelta(minutes=source.refresh_minutes) if source.refresh_minutes else None
        source.crawl_state = {"visited_count": len(visited), "bytes": source.crawl_state.get("bytes", 0)}
        if not complete:
            source.last_error = "The folder does not exist (or is not readable); nothing was retired."
        source.save(
            update_fields=["state", "last_crawled_at", "next_crawl_at", "crawl_state", "last_error", "updated_at"]
        )


def _stop(source: KnowledgeSource, *, error: str, failed: bool = False) -> None:
    source.state = Source.State.FAILED if failed else Source.State.IDLE
    source.last_error = error[:500]
    source.crawl_state = {}
    if failed and source.refresh_minutes:
        source.next_crawl_at = timezone.now() + timedelta(minutes=source.refresh_minutes)
    source.save(update_fields=["state", "last_error", "crawl_state", "next_crawl_at", "updated_at"])
