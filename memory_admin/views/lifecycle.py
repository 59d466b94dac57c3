"""The lifecycle page: what the daily GC would do now (its dry run), and buttons to run the GC and
the contradiction scan on demand. The rules live in `selectors.lifecycle`; this only shows them."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_POST

from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import ADMIN, CURATE
from memory_admin.selectors.lifecycle import GC_RULES
from memory_admin.services.lifecycle import contradiction_scan_run, lifecycle_gc_run
from memory_admin.views.base import paginate, tenant_view

SCAN_WINDOWS = {
    "2h": ("facts changed in the last 2 hours", timedelta(hours=2)),
    "24h": ("facts changed in the last 24 hours", timedelta(hours=24)),
    "7d": ("facts changed in the last 7 days", timedelta(days=7)),
    "all": ("all active facts", None),
}
DEFAULT_WINDOW = "24h"


def _render(
    request: HttpRequest, *, gc_result: dict | None = None, scan_result: dict | None = None, status: int = 200
) -> HttpResponse:
    report = sel.gc_preview(request.principal)
    rules = [
        {
            "key": rule.key,
            "label": rule.reason,
            "count": report["counts"][rule.key],
            "capped": rule.key in report["capped"],
            "outcome": rule.effect,
        }
        for rule in GC_RULES
    ]
    context = {
        "nav": "lifecycle",
        "report": report,
        "rules": rules,
        "page": paginate(request, report["facts"]),
        "gc_result": gc_result,
        "scan_result": scan_result,
        "windows": [(key, label) for key, (label, _) in SCAN_WINDOWS.items()],
        "default_window": DEFAULT_WINDOW,
        "can_run_gc": request.principal.can(ADMIN),
        "can_scan": request.principal.can(CURATE),
    }
    template = "dashboard/_lifecycle_body.html" if request.htmx else "dashboard/lifecycle.html"
    return render(request, template, context, status=status)


@tenant_view(staff_only=True)
def lifecycle(request: HttpRequest) -> HttpResponse:
    return _render(request)


@require_POST
@tenant_view(ability=ADMIN, staff_only=True)
def lifecycle_gc_now(request: HttpRequest) -> HttpResponse:
    return _render(request, gc_result=lifecycle_gc_run(principal=request.principal))


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def contradiction_scan_now(request: HttpRequest) -> HttpResponse:
    window = request.POST.get("window", DEFAULT_WINDOW)
    label, span = SCAN_WINDOWS.get(window, SCAN_WINDOWS[DEFAULT_WINDOW])
    result = contradiction_scan_run(principal=request.principal, since=timezone.now() - span if span else None)
    return _render(request, scan_result={**result, "window": label})
