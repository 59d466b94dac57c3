"""The access log page: which key read which fact, when, through which door; per fact, key or user."""

from __future__ import annotations

from uuid import UUID

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from memory_admin.models import FactRead
from memory_admin.selectors.access_log import ReadFilters, fact_reads, filter_names, reads_page_rows, reads_summary
from memory_admin.views.base import paginate, tenant_view


def _read_filters(request: HttpRequest) -> ReadFilters:
    """The page's filters from its query string; a malformed id narrows to nothing rather than failing."""
    fact, key = request.GET.get("fact", "").strip(), request.GET.get("key", "").strip()
    try:
        fact_id = UUID(fact) if fact else None
    except ValueError:
        fact_id = UUID(int=0)
    key_id = int(key) if key.isdigit() and len(key) < 19 else (0 if key else None)
    return ReadFilters(
        fact_id=fact_id, key_id=key_id, user=request.GET.get("user", "").strip()[:200], via=request.GET.get("via", "")
    )


@tenant_view(staff_only=True)
def access_log(request: HttpRequest) -> HttpResponse:
    filters = _read_filters(request)
    rows = fact_reads(request.principal, filters)
    page = paginate(request, rows.values_list("pk", flat=True))
    page.object_list = reads_page_rows(list(page.object_list))
    return render(
        request,
        "dashboard/access_log.html",
        {
            "page": page,
            "filters": filters,
            "named": filter_names(request.principal, filters),
            "summary": reads_summary(rows),
            "doors": FactRead.Via.choices,
            "retention_days": int(settings.ACCESS_LOG_RETENTION_DAYS),
        },
    )
