"""Tenant administration: extraction batches, agents and API keys, tenant settings."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from memory_admin.errors import DomainError, NotFound
from memory_admin.inputs import form_number
from memory_admin.models import PII_ACTIONS, PII_KINDS, Agent, ApiKey, ExtractionBatch
from memory_admin.selectors.access import ADMIN, CURATE, get_visible, visible
from memory_admin.selectors.health import queue_backlogs
from memory_admin.services.extraction import batch_retry
from memory_admin.services.settings import LIMITS, tenant_settings, tenant_settings_update
from memory_admin.services.tenant_admin import dashboard_key_create, dashboard_key_revoke
from memory_admin.views.base import paginate, tenant_view
from memory_admin.views.keys import expiry_from_form


@tenant_view(staff_only=True)
def batches(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    qs = visible(request.principal, ExtractionBatch.objects.all())
    if status:
        qs = qs.filter(status=status)
    qs = qs.select_related("memory_user", "thread").order_by("-created_at", "-pk")
    return render(
        request,
        "dashboard/batches.html",
        {
            "page": paginate(request, qs),
            "status": status,
            "statuses": ExtractionBatch.Status.values,
            "can_retry": request.principal.can(CURATE),
            "queues": queue_backlogs(),
            "backlog_seconds": settings.HEALTH_BACKLOG_SECONDS,
        },
    )


@require_POST
@tenant_view(ability=CURATE)
def batch_retry_view(request: HttpRequest, batch_id: int) -> HttpResponse:
    batch = get_visible(request.principal, ExtractionBatch.objects.all(), pk=batch_id)
    try:
        batch_retry(request.principal, batch.pk)
        messages.success(request, f"Batch {batch.pk} queued for another attempt.")
    except DomainError as exc:
        messages.error(request, exc.detail)
    return redirect("batches", request.tenant.slug)


NEW_KEY_SESSION = "dashboard_new_key"


@tenant_view(staff_only=True)
def keys(request: HttpRequest) -> HttpResponse:
    """Post/redirect/get: a created key is parked in the session, shown by the next GET and dropped
    from the session there, so a reload (or going back) never creates nor shows it again."""
    error = None
    if request.method == "POST":
        users = [u.strip() for u in request.POST.get("users", "").split(",") if u.strip()]
        try:
            key, raw = dashboard_key_create(
                principal=request.principal,
                agent_name=request.POST.get("agent", ""),
                label=request.POST.get("label", ""),
                is_admin=request.POST.get("is_admin") == "on",
                allowed_user_ids=users,
                read_only=request.POST.get("read_only") == "on",
                expires_at=expiry_from_form(request.POST.get("expires", "")),
            )
        except DomainError as exc:
            error = exc.detail
        else:
            request.session[NEW_KEY_SESSION] = {"tenant": request.tenant.slug, "key_id": key.pk, "raw": raw}
            return redirect("keys", request.tenant.slug)
    created = None
    parked = request.session.pop(NEW_KEY_SESSION, None)
    if parked and parked.get("tenant") == request.tenant.slug:
        key = (
            ApiKey.objects.filter(pk=parked["key_id"], tenant_id=request.principal.tenant_id)
            .select_related("agent")
            .first()
        )
        if key is not None:
            created = {"key": key, "raw": parked["raw"]}
    agents = (
        Agent.objects.filter(tenant_id=request.principal.tenant_id)
        .prefetch_related(Prefetch("keys", queryset=ApiKey.objects.order_by("-created_at")))
        .order_by("name")
    )
    response = render(
        request,
        "dashboard/keys.html",
        {"agents": agents, "created": created, "error": error, "form": request.POST if error else None},
        status=422 if error else 200,
    )
    if created:
        response["Cache-Control"] = "no-store"  # the raw key is on this page exactly once
    return response


@require_POST
@tenant_view(ability=ADMIN)
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    try:
        key = dashboard_key_revoke(principal=request.principal, key_id=key_id)
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    messages.success(request, f"Key {key.prefix}… revoked; agents using it now get 401.")
    return redirect("keys", request.tenant.slug)


@tenant_view(staff_only=True)
def settings_page(request: HttpRequest) -> HttpResponse:
    error = None
    if request.method == "POST":
        if not request.principal.can(ADMIN):
            return render(
                request,
                "dashboard/error.html",
                {"title": "Not allowed", "detail": "Only admins change settings."},
                status=403,
            )
        try:
            tenant_settings_update(principal=request.principal, changes=_settings_form(request.POST))
            messages.success(request, "Settings saved.")
            return redirect("settings", request.tenant.slug)
        except DomainError as exc:
            error = exc.detail
    obj = tenant_settings(request.principal.tenant_id)
    fields = [
        {"limit": limit, "value": getattr(obj, name), "step": "1" if limit.type is int else "0.01"}
        for name, limit in LIMITS.items()
    ]
    return render(
        request,
        "dashboard/settings.html",
        {
            "obj": obj,
            "fields": fields,
            "error": error,
            "pii_kinds": PII_KINDS,
            "pii_actions": PII_ACTIONS,
            "can_edit": request.principal.can(ADMIN),
        },
        status=422 if error else 200,
    )


def _settings_form(post: QueryDict) -> dict[str, Any]:
    """The settings form as typed values (a blank number field leaves that setting as it is)."""
    changes: dict[str, Any] = {
        name: form_number(post[name], field=name, whole=limit.type is int)
        for name, limit in LIMITS.items()
        if post.get(name, "").strip()
    }
    changes["pii_policy"] = {kind: post.get(f"pii_{kind}", "block") for kind in PII_KINDS}
    changes["extraction_enabled"] = post.get("extraction_enabled") == "on"
    return changes
