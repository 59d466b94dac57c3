"""Tenant administration from the dashboard: API keys, each audited (settings: services.settings)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from memory_admin.errors import Invalid, NotFound
from memory_admin.models import ApiKey
from memory_admin.selectors.access import ADMIN, Principal, require_tenant_wide
from memory_admin.services.audit import audit
from memory_admin.services.keys import api_key_create, api_key_revoke, key_expiry_check, key_users_check


def dashboard_key_create(
    *,
    principal: Principal,
    agent_name: str,
    label: str = "",
    is_admin: bool = False,
    allowed_user_ids: list[str] | None = None,
    read_only: bool = False,
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    require_tenant_wide(principal, ADMIN)
    agent_name = agent_name.strip()
    if not agent_name or len(agent_name) > 200:
        raise Invalid("Name the agent this key is for (up to 200 characters).", field="agent")
    key_users_check(tenant_id=principal.tenant_id, external_ids=allowed_user_ids or [])
    key_expiry_check(expires_at)
    with transaction.atomic():
        key, raw = api_key_create(
            tenant_id=principal.tenant_id,
            agent_name=agent_name,
            is_admin=is_admin,
            allowed_user_ids=allowed_user_ids,
            label=label[:200],
            read_only=read_only,
            expires_at=expires_at,
        )
        audit(
            principal,
            "api_key.create",
            outcome="created",
            target=key,
            after={
                "prefix": key.prefix,
                "agent": agent_name,
                "admin": is_admin,
                "users": allowed_user_ids or [],
                "read_only": read_only,
                "expires_at": expires_at.isoformat() if expires_at else None,
            },
        )
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
