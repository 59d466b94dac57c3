"""Health (no auth) and the tenant's settings (admin keys)."""

from __future__ import annotations

from django.db import connection, transaction
from ninja import Router

from memory_admin.api import api
from memory_admin.api.schemas import SettingsOut, SettingsPatch
from memory_admin.errors import Invalid
from memory_admin.selectors.access import ADMIN
from memory_admin.services.audit import audit
from memory_admin.services.settings import tenant_settings

router = Router(tags=["system"])
SETTING_FIELDS = list(SettingsOut.model_fields)


@router.get("/health", auth=None)
def health(request):
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure to reach Postgres is "down"
        return api.create_response(
            request, {"status": "unavailable", "database": "unreachable", "code": "database_unavailable",
                      "detail": "The database cannot be reached."}, status=503,
        )
    return {"status": "ok", "database": "ok"}


def _settings_dict(obj) -> dict:
    return {name: getattr(obj, name) for name in SETTING_FIELDS}


@router.get("/settings", response=SettingsOut)
def get_settings(request):
    request.principal.require(ADMIN)
    return _settings_dict(tenant_settings(request.principal.tenant_id))


@router.patch("/settings", response=SettingsOut)
def patch_settings(request, payload: SettingsPatch):
    principal = request.principal
    principal.require(ADMIN)
    changes = payload.dict(exclude_none=True)
    with transaction.atomic():
        obj = tenant_settings(principal.tenant_id)
        before = _settings_dict(obj)
        if "pii_policy" in changes:
            changes["pii_policy"] = {**obj.pii_policy, **changes["pii_policy"]}
        if "search_weights" in changes:
            changes["search_weights"] = {**obj.search_weights, **changes["search_weights"]}
            if not any(changes["search_weights"].values()):
                # Every hit would score 0: ranking would be arbitrary. Refuse rather than store it.
                raise Invalid("search_weights: at least one weight must be above 0.", field="search_weights")
        for name, value in changes.items():
            setattr(obj, name, value)
        obj.save()
        audit(principal, "settings.update", outcome="updated", target=obj, before=before, after=_settings_dict(obj))
    return _settings_dict(obj)


api.add_router("", router)
