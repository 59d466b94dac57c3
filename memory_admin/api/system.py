"""Health (no auth) and the tenant's settings (admin keys)."""

from __future__ import annotations

from django.db import transaction
from ninja import Router

from memory_admin.api import api
from memory_admin.api.schemas import SettingsOut, SettingsPatch
from memory_admin.selectors.access import ADMIN, require_tenant_wide
from memory_admin.selectors.health import background_status, database_reachable
from memory_admin.services.audit import audit
from memory_admin.services.settings import tenant_settings

router = Router(tags=["system"])
SETTING_FIELDS = list(SettingsOut.model_fields)


def _readiness(request):
    """Ready: the database answers and beat's sweep and a worker ran recently (selectors.health)."""
    if not database_reachable():
        return api.create_response(
            request, {"status": "unavailable", "database": "unreachable", "code": "database_unavailable",
                      "detail": "The database cannot be reached.", "reasons": ["database unreachable"]}, status=503,
        )
    background, reasons = background_status()
    if reasons:
        return api.create_response(
            request, {"status": "unavailable", "database": "ok", "code": "background_stale",
                      "detail": "; ".join(reasons), "reasons": reasons, "background": background}, status=503,
        )
    starting = any(part["status"] == "starting" for part in background.values())
    return {"status": "starting" if starting else "ok", "database": "ok", "background": background}


@router.get("/health", auth=None)
def health(request):
    """Readiness with details (same answer as /health/ready): 200 `ok` or `starting`, 503 with
    `reasons` when the database is unreachable or the sweep or worker heartbeat is stale."""
    return _readiness(request)


@router.get("/health/ready", auth=None)
def health_ready(request):
    """Readiness, for load balancers: take this instance out of rotation on 503."""
    return _readiness(request)


@router.get("/health/live", auth=None)
def health_live(request):
    """Liveness: 200 as long as the web process answers; touches nothing else (a database outage
    must not make an orchestrator restart healthy web servers)."""
    return {"status": "alive"}


def _settings_dict(obj) -> dict:
    return {name: getattr(obj, name) for name in SETTING_FIELDS}


@router.get("/settings", response=SettingsOut)
def get_settings(request):
    request.principal.require(ADMIN)
    return _settings_dict(tenant_settings(request.principal.tenant_id))


@router.patch("/settings", response=SettingsOut)
def patch_settings(request, payload: SettingsPatch):
    principal = request.principal
    require_tenant_wide(principal, ADMIN)
    changes = payload.dict(exclude_none=True)
    with transaction.atomic():
        obj = tenant_settings(principal.tenant_id)
        before = _settings_dict(obj)
        if "pii_policy" in changes:
            changes["pii_policy"] = {**obj.pii_policy, **changes["pii_policy"]}
        if "search_weights" in changes:
            changes["search_weights"] = {**obj.search_weights, **changes["search_weights"]}
        for name, value in changes.items():
            setattr(obj, name, value)
        obj.save()
        audit(principal, "settings.update", outcome="updated", target=obj, before=before, after=_settings_dict(obj))
    return _settings_dict(obj)


api.add_router("", router)
