"""API keys: generated once, shown once, stored as SHA-256."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.utils import timezone

from memory_admin.models import Agent, ApiKey
from memory_admin.selectors.access import Principal

KEY_PREFIX = "mem_"


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_create(
    *, tenant_id: int, agent_name: str, is_admin: bool = False, allowed_user_ids: list[str] | None = None,
    label: str = "",
) -> tuple[ApiKey, str]:
    """Create a key for the named agent (created if new). Returns the row and the raw key, which is
    never stored and cannot be shown again."""
    agent, _ = Agent.objects.get_or_create(tenant_id=tenant_id, name=agent_name)
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        tenant_id=tenant_id, agent=agent, label=label, prefix=raw[:12], key_hash=hash_key(raw),
        is_admin=is_admin, allowed_user_ids=allowed_user_ids or [],
    )
    return key, raw


def api_key_revoke(*, key: ApiKey) -> None:
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def principal_for_key(raw: str) -> Principal | None:
    """The principal of a bearer key, or None for a missing, unknown or revoked key."""
    if not raw or not raw.startswith(KEY_PREFIX):
        return None
    key = ApiKey.objects.select_related("agent").filter(key_hash=hash_key(raw), revoked_at__isnull=True).first()
    if key is None:
        return None
    now = timezone.now()
    # last_used_at at minute resolution: not one write per request.
    if key.last_used_at is None or now - key.last_used_at > timedelta(minutes=1):
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return Principal(
        tenant_id=key.tenant_id,
        role="agent_admin" if key.is_admin else "agent",
        actor=f"agent:{key.agent.name}",
        actor_type="agent",
        agent_id=key.agent_id,
        api_key_id=key.pk,
        allowed_external_ids=tuple(key.allowed_user_ids),
    )
