"""Tenant administration from the dashboard: settings changes and API keys, each audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from memory_admin.errors import Invalid, NotFound
from memory_admin.models import PII_ACTIONS, PII_KINDS, ApiKey, TenantSettings
from memory_admin.selectors.access import ADMIN, Principal, require_tenant_wide
from memory_admin.services.audit import audit
from memory_admin.services.keys import api_key_create, api_key_revoke
from memory_admin.services.settings import tenant_settings

EDITABLE = {
    "confidence_threshold": (float, 0.0, 1.0),
    "dedup_similarity": (float, 0.01, 1.0),
    "contradiction_similarity": (float, 0.01, 1.0),
    "auto_resolve_gap": (float, 0.0, 1.0),
    "fact_cap": (int, 1, 100_000),
    "debounce_seconds": (int, 0, 86_400),
    "min_message_chars": (int, 0, 100_000),
    "episode_idle_minutes": (int, 1, 10_080),
}


def settings_snapshot(obj: TenantSettings) -> dict[str, Any]:
    return {**{name: getattr(obj, name) for name in EDITABLE}, "pii_policy": dict(obj.pii_policy),
            "extraction_enabled": obj.extraction_enabled}


@transaction.atomic
def tenant_settings_update(*, principal: Principal, values: dict[str, Any]) -> TenantSettings:
    """Validate every field first (raise Invalid naming the field), then save and audit once."""
    require_tenant_wide(principal, ADMIN)
    obj = TenantSettings.objects.select_for_update().get(pk=tenant_settings(principal.tenant_id).pk)
    before = settings_snapshot(obj)
    for name, (cast, low, high) in EDITABLE.items():
        if name not in values:
            continue
        try:
            value = cast(values[name])
        except (TypeError, ValueError) as exc:
            raise Invalid(f"{name.replace('_', ' ')} must be a number.", field=name) from exc
        if not low <= value <= high:
            raise Invalid(f"{name.replace('_', ' ')} must be between {low:g} and {high:g}.", field=name)
        setattr(obj, name, value)
    if "pii_policy" in values:
        policy = dict(obj.pii_policy)
        for kind, action in values["pii_policy"].items():
            if kind not in PII_KINDS or action not in PII_ACTIONS:
                raise Invalid(f"PII policy for {kind}: choose one of {', '.join(PII_ACTIONS)}.", field="pii_policy")
            policy[kind] = action
        obj.pii_policy = policy
    if "extraction_enabled" in values:
        obj.extraction_enabled = bool(values["extraction_enabled"])
    obj.save()
    audit(principal, "settings.update", outcome="updated", target=obj, before=before, after=settings_snapshot(obj))
    return obj


def dashboard_key_create(
    *, principal: Principal, agent_name: str, label: str = "", is_admin: bool = False,
    allowed_user_ids: list[str] | None = None,
) -> tuple[ApiKey, str]:
    require_tenant_wide(principal, ADMIN)
    agent_name = agent_name.strip()
    if not agent_name or len(agent_name) > 200:
        raise Invalid("Name the agent this key is for (up to 200 characters).", field="agent")
    with transaction.atomic():
        key, raw = api_key_create(tenant_id=principal.tenant_id, agent_name=agent_name, is_admin=is_admin,
                                  allowed_user_ids=allowed_user_ids, label=label[:200])
        audit(principal, "api_key.create", outcome="created", target=key,
              after={"prefix": key.prefix, "agent": agent_name, "admin": is_admin,
                     "users": allowed_user_ids or []})
    return key, raw


@transaction.atomic
def dashboard_key_revoke(*, principal: Principal, key_id: int) -> ApiKey:
    require_tenant_wide(principal, ADMIN)
    key = _tenant_key(principal, key_id)
    api_key_revoke(key=key)
    key.refresh_from_db()
    audit(principal, "api_key.revoke", outcome="revoked", target=key, after={"prefix": key.prefix})
    return key


def _tenant_key(principal: Principal, key_id: int) -> ApiKey:
    # ApiKey has no memory-user owner, so `visible` does not cover it: the tenant filter is in the query.
    key = ApiKey.objects.filter(tenant_id=principal.tenant_id, pk=key_id).first()
    if key is None:
        raise NotFound("No API key with that id is visible to you.")
    return key
