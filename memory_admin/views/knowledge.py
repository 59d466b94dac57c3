"""Trained knowledge on the dashboard: the sources (with a progress bar while a crawl runs, refreshed by
htmx), a source's documents, a document's chunks (what was quarantined and why, what was redacted; a
secret is never shown, only that a chunk was refused), and the actions: add a page, a site or a file,
crawl now, pause or resume, delete (with a confirmation; its chunks are retired, audited).

The reads go through `knowledge.selectors` and the writes through `knowledge.services`, as the API's do,
so the access rule and the audit are the same ones. Staff pages: a member sees their own notebook and
facts only; acting needs the curate ability (operators and admins), reading does not (auditors read).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from memory_admin.errors import DomainError, NotFound
from memory_admin.inputs import whole_number
from memory_admin.knowledge import conf, selectors, services
from memory_admin.knowledge.crawl import ingestion_enabled
from memory_admin.knowledge.entities import chunk_entities, chunk_relations
from memory_admin.models import KnowledgeChunk, KnowledgeDocument, KnowledgeSource
from memory_admin.selectors.access import ADMIN, CURATE, get_visible
from memory_admin.views.base import safe_next, tenant_view

CRAWLING = (KnowledgeSource.State.QUEUED, KnowledgeSource.State.RUNNING)
ADDABLE_KINDS = (
    ("url", "One page (URL)"),
    ("site", "A site (same-host crawl)"),
    ("file", "A file (Markdown, text, HTML, PDF)"),
)
REFRESH_CHOICES = ((0, "never by itself"), (60, "every hour"), (1440, "every day"), (10080, "every week"))


def _crawling(source: dict) -> bool:
    return source["status"] == KnowledgeSource.Status.ACTIVE and source["state"] in CRAWLING


def _sources_context(request: HttpRequest) -> dict:
    sources = selectors.source_list(request.principal, include_deleted=request.GET.get("deleted") == "1")
    return {
        "sources": sources,
        "polling": any(_crawling(s) for s in sources),
        "show_deleted": request.GET.get("deleted") == "1",
    }


@tenant_view(staff_only=True)
def sources(request: HttpRequest) -> HttpResponse:
    context = _sources_context(request)
    if request.htmx and request.GET.get("part") == "rows":
        return render(request, "dashboard/_knowledge_source_rows.html", context)
    context.update(
        {
            "can_act": request.principal.can(CURATE),
            "can_switch": request.principal.can(ADMIN),
            "enabled": ingestion_enabled(request.principal.tenant_id),
            "kinds": ADDABLE_KINDS,
            "refresh_choices": REFRESH_CHOICES,
            "form": {},
            "max_upload": conf.MAX_UPLOAD_BYTES(),
        }
    )
    return render(request, "dashboard/knowledge_sources.html", context)


def _source_form(request: HttpRequest) -> dict:
    kind = request.POST.get("kind", "")
    refresh = whole_number(request.POST.get("refresh_minutes"), field="refresh_minutes", default=0)
    if refresh not in dict(REFRESH_CHOICES):
        raise DomainError("Choose how often the source is crawled again from the list.", code="invalid", status=422)
    fields: dict = {"kind": kind, "refresh_minutes": refresh or None}
    if kind == KnowledgeSource.Kind.FILE:
        upload = request.FILES.get("file")
        if upload is None:
            raise DomainError("Choose a file to upload.", code="file_missing", status=422)
        fields.update(
            location=(upload.name or "upload")[:2000],
            upload=upload.read(int(conf.MAX_UPLOAD_BYTES()) + 1),
            upload_type=upload.content_type or "",
            name=request.POST.get("name", "").strip() or upload.name or "upload",
        )
    else:
        location = request.POST.get("location", "").strip()
        if not location:
            raise DomainError("Give the page's or the site's address.", code="invalid", status=422)
        fields.update(location=location, name=request.POST.get("name", "").strip() or location)
        if kind == KnowledgeSource.Kind.SITE:
            fields["max_depth"] = whole_number(request.POST.get("max_depth"), field="max_depth", default=2, maximum=10)
            fields["max_pages"] = whole_number(
                request.POST.get("max_pages"), field="max_pages", default=50, minimum=1, maximum=100000
            )
    return fields


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def source_add(request: HttpRequest) -> HttpResponse:
    try:
        source = services.source_create(request.principal, **_source_form(request))
    except DomainError as exc:
        context = _sources_context(request)
        context.update(
            {
                "can_act": True,
                "can_switch": request.principal.can(ADMIN),
                "enabled": ingestion_enabled(request.principal.tenant_id),
                "kinds": ADDABLE_KINDS,
                "refresh_choices": REFRESH_CHOICES,
                "form": request.POST,
                "error": exc.detail,
                "max_upload": conf.MAX_UPLOAD_BYTES(),
            }
        )
        return render(request, "dashboard/knowledge_sources.html", context, status=exc.status)
    messages.success(request, f"Source “{source.name}” added; its first crawl is queued.")
    return redirect("knowledge_source", request.tenant.slug, source.pk)


@tenant_view(staff_only=True)
def source(request: HttpRequest, source_id) -> HttpResponse:
    detail = selectors.source_detail(request.principal, source_id)
    context = {"source": detail, "crawling": _crawling(detail), "can_act": request.principal.can(CURATE)}
    if request.htmx and request.GET.get("part") == "body":
        return render(request, "dashboard/_knowledge_source_body.html", context)
    return render(request, "dashboard/knowledge_source.html", context)


@tenant_view(staff_only=True)
def document(request: HttpRequest, document_id) -> HttpResponse:
    status = request.GET.get("status", "")
    if status not in KnowledgeChunk.Status.values:
        status = ""
    found = get_visible(request.principal, KnowledgeDocument.objects.select_related("source"), pk=document_id)
    page = selectors.document_chunks(request.principal, found.pk, status=status or None)
    return render(
        request,
        "dashboard/knowledge_document.html",
        {
            "document": page["document"],
            "chunks": page["items"],
            "entities": chunk_entities(c.pk for c in page["items"]),
            "relations": chunk_relations(request.principal, [c.pk for c in page["items"]]),
            "source": found.source,
            "status": status,
            "statuses": KnowledgeChunk.Status.values,
        },
    )


def _acted(request: HttpRequest, source_id, action) -> HttpResponse:
    """Run a source action; a refusal (paused, already running, switched off) is shown as a notice."""
    try:
        done = action()
    except NotFound:
        raise  # another tenant's or an unknown source: a 404, as for every page
    except DomainError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, done)
    return redirect(safe_next(request, reverse("knowledge_source", args=[request.tenant.slug, source_id])))


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def source_crawl(request: HttpRequest, source_id) -> HttpResponse:
    def run() -> str:
        services.source_crawl_now(request.principal, source_id)
        return "Crawl queued: the page shows its progress."

    return _acted(request, source_id, run)


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def source_pause_view(request: HttpRequest, source_id, action: str) -> HttpResponse:
    if action not in ("pause", "resume"):
        raise Http404("No such action.")
    paused = action == "pause"

    def run() -> str:
        services.source_pause(request.principal, source_id, paused=paused)
        return "Paused: no crawl runs until it is resumed." if paused else "Resumed: a crawl is queued."

    return _acted(request, source_id, run)


@tenant_view(ability=CURATE, staff_only=True)
def source_delete(request: HttpRequest, source_id) -> HttpResponse:
    """GET: what deleting would retire, and a confirmation; POST with `confirmed`: delete (audited)."""
    if request.method != "POST" or request.POST.get("confirmed") != "1":
        services.source_get_for(request.principal, source_id)  # a deleted or unseen source: 404
        detail = selectors.source_detail(request.principal, source_id)
        return render(request, "dashboard/knowledge_delete_confirm.html", {"source": detail})
    try:
        retired = services.source_delete(request.principal, source_id, reason=request.POST.get("note", ""))
    except NotFound:
        raise
    except DomainError as exc:
        messages.error(request, exc.detail)
        return redirect("knowledge_source", request.tenant.slug, source_id)
    messages.success(
        request, f"Source deleted: {retired} chunk{'s' if retired != 1 else ''} retired (kept as history)."
    )
    return redirect("knowledge_sources", request.tenant.slug)


@require_POST
@tenant_view(ability=ADMIN, staff_only=True)
def ingestion_switch(request: HttpRequest) -> HttpResponse:
    enabled = request.POST.get("enabled") == "1"
    services.knowledge_settings_update(request.principal, ingestion_enabled=enabled)
    messages.success(
        request,
        "Ingestion switched on." if enabled else "Ingestion switched off: running crawls stop at their next step.",
    )
    return redirect("knowledge_sources", request.tenant.slug)
