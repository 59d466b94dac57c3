"""Health (no auth) and the tenant's settings (admin keys)."""

from __future__ import annotations

from ninja import Router

from memory_admin.api.schemas import SettingsOut, SettingsPatch
from memory_admin.errors import Unavailable
from memory_admin.selectors.access import ADMIN
from memory_admin.selectors.health import background_status, database_reachable, queues_status
from memory_admin.services.settings import settings_snapshot, tenant_settings, tenant_settings_update

router = Router(tags=["system"])


def _readiness() -> dict:
    """Ready: the database answers and beat's sweep and a worker ran recently (selectors.health)."""
    if not database_reachable():
        raise Unavailable(
            "The database cannot be reached.",
            code="database_unavailable",
            database="unreachable",
            reasons=["database unreachable"],
        )
    background, reasons = background_status()
    if reasons:
        raise Unavailable(
            "; ".join(reasons), code="background_stale", database="ok", reasons=reasons, background=background
        )
    queues, behind = queues_status()  # a backlog that still moves is `degraded`, never a 503
    starting = any(part["status"] == "starting" for part in background.values())
    status = "starting" if starting else "degraded" if behind else "ok"
    return {"status": status, "database": "ok", "background": background, "queues": queues, "reasons": behind}


@router.get("/health", auth=None)
def health(request):
    """Readiness with details (same answer as /health/ready): 200 `ok`, `starting` or `degraded` (a
    queue's oldest message waits longer than HEALTH_BACKLOG_SECONDS: behind but moving), 503 with
    `reasons` when the database is unreachable or the sweep or the workers have not moved for
    HEALTH_STALE_SECONDS."""
    return _readiness()


@router.get("/health/ready", auth=None)
def health_ready(request):
    """Readiness, for load balancers: take this instance out of rotation on 503."""
    return _readiness()


@router.get("/health/live", auth=None)
def health_live(request):
    """Liveness: 200 as long as the web process answers; touches nothing else (a database outage
    must not make an orchestrator restart healthy web servers)."""
    return {"status": "alive"}


@router.get("/settings", response=SettingsOut)
def get_settings(request):
    request.principal.require(ADMIN)
    return settings_snapshot(tenant_settings(request.principal.tenant_id))


@router.patch("/settings", response=SettingsOut)
def patch_settings(request, payload: SettingsPatch):
    obj = tenant_settings_update(principal=request.principal, changes=payload.dict(exclude_none=True))
    return settings_snapshot(obj)
