"""Tenant administration: extraction batches, agents and API keys, tenant settings."""

from __future__ import annotations

import importlib

from django.contrib import messages
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from memory_admin.errors import DomainError, NotFound
from memory_admin.models import PII_ACTIONS, PII_KINDS, Agent, ApiKey, ExtractionBatch
from memory_admin.selectors.access import ADMIN, CURATE, get_visible, visible
from memory_admin.services.settings import tenant_settings
from memory_admin.services.tenant_admin import (
    EDITABLE,
    dashboard_key_create,
    dashboard_key_revoke,
    tenant_settings_update,
)
from memory_admin.views.base import paginate, tenant_view

# Where the extraction engineer's `batch_retry` may live; the retry button appears once it exists.
_RETRY_MODULES = ("memory_admin.services.extraction", "extraction.pipeline")


def batch_retry_fn():
    for name in _RETRY_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "batch_retry"):
            return module.batch_retry
    return None


@tenant_view(staff_only=True)
def batches(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    qs = visible(request.principal, ExtractionBatch.objects.all())
    if status:
        qs = qs.filter(status=status)
    qs = qs.select_related("memory_user", "thread").order_by("-created_at", "-pk")
    return render(request, "dashboard/batches.html", {
        "page": paginate(request, qs), "status": status, "statuses": ExtractionBatch.Status.values,
        "can_retry": batch_retry_fn() is not None and request.principal.can(CURATE),
    })


@require_POST
@tenant_view(ability=CURATE)
def batch_retry_view(request: HttpRequest, batch_id: int) -> HttpResponse:
    batch = get_visible(request.principal, ExtractionBatch.objects.all(), pk=batch_id)
    retry = batch_retry_fn()
    if retry is None:
        raise Http404("Retry is not available in this installation.")
    try:
        retry(principal=request.principal, batch_id=batch.pk)
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
            key, raw = dashboard_key_create(principal=request.principal, agent_name=request.POST.get("agent", ""),
                                            label=request.POST.get("label", ""),
                                            is_admin=request.POST.get("is_admin") == "on", allowed_user_ids=users)
        except DomainError as exc:
            error = exc.detail
        else:
            request.session[NEW_KEY_SESSION] = {"tenant": request.tenant.slug, "key_id": key.pk, "raw": raw}
            return redirect("keys", request.tenant.slug)
    created = None
    parked = request.session.pop(NEW_KEY_SESSION, None)
    if parked and parked.get("tenant") == request.tenant.slug:
        key = ApiKey.objects.filter(pk=parked["key_id"], tenant_id=request.principal.tenant_id).select_related(
            "agent").first()
        if key is not None:
            created = {"key": key, "raw": parked["raw"]}
    agents = (
        Agent.objects.filter(tenant_id=request.principal.tenant_id)
        .prefetch_related(Prefetch("keys", queryset=ApiKey.objects.order_by("-created_at")))
        .order_by("name")
    )
    response = render(request, "dashboard/keys.html", {"agents": agents, "created": created, "error": error},
                      status=422 if error else 200)
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


# What each setting means, in words and units, shown beside its field (ranges come from EDITABLE).
SETTING_HELP = {
    "confidence_threshold": ("Minimum confidence", "score 0–1",
                             "Writes claiming less confidence than this are refused (rejected: low confidence)."),
    "dedup_similarity": ("Duplicate similarity", "cosine 0–1",
                         "A new fact at least this similar to an existing one is merged into it instead of stored."),
    "contradiction_similarity": ("Contradiction similarity", "cosine 0–1",
                                 "Facts this similar but saying different things are checked for a contradiction."),
    "auto_resolve_gap": ("Auto-resolve gap", "confidence points 0–1",
                         "A contradiction resolves itself when one side is this much more confident; "
                         "below, it goes to the review queue."),
    "fact_cap": ("Fact cap per user", "facts",
                 "Above this many active facts, the least useful unpinned ones are evicted."),
    "debounce_seconds": ("Extraction delay", "seconds",
                         "How long a conversation must be quiet before its new messages are extracted."),
    "min_message_chars": ("Shortest message extracted", "characters",
                          "Shorter messages (greetings, \"ok\") are logged but not sent to extraction."),
    "episode_idle_minutes": ("Episode break", "minutes",
                             "A pause this long in a conversation starts a new episode."),
}


@tenant_view(staff_only=True)
def settings_page(request: HttpRequest) -> HttpResponse:
    error = None
    if request.method == "POST":
        if not request.principal.can(ADMIN):
            return render(request, "dashboard/error.html", {"title": "Not allowed",
                                                            "detail": "Only admins change settings."}, status=403)
        values = {name: request.POST.get(name) for name in EDITABLE if request.POST.get(name) not in (None, "")}
        values["pii_policy"] = {kind: request.POST.get(f"pii_{kind}", "block") for kind in PII_KINDS}
        values["extraction_enabled"] = request.POST.get("extraction_enabled") == "on"
        try:
            tenant_settings_update(principal=request.principal, values=values)
            messages.success(request, "Settings saved.")
            return redirect("settings", request.tenant.slug)
        except DomainError as exc:
            error = exc.detail
    obj = tenant_settings(request.principal.tenant_id)
    fields = [{"name": name, "value": getattr(obj, name), "step": "0.01" if cast is float else "1",
               "min": low, "max": high,
               "label": SETTING_HELP.get(name, (name.replace("_", " ").capitalize(), "", ""))[0],
               "unit": SETTING_HELP.get(name, ("", "", ""))[1], "help": SETTING_HELP.get(name, ("", "", ""))[2]}
              for name, (cast, low, high) in EDITABLE.items()]
    return render(request, "dashboard/settings.html", {
        "obj": obj, "fields": fields, "error": error, "pii_kinds": PII_KINDS, "pii_actions": PII_ACTIONS,
        "can_edit": request.principal.can(ADMIN),
    }, status=422 if error else 200)
