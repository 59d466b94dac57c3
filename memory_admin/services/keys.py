"""API keys: generated once, shown once, stored as SHA-256."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from datetime import timedelta

from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from memory_admin.models import Agent, ApiKey
from memory_admin.selectors.access import Principal
from memory_admin.services.throttle import api_key_check, api_key_count_sql

KEY_PREFIX = "mem_"
_KEY_SQL = (
    "SELECT k.id, k.tenant_id, k.agent_id, k.is_admin, k.allowed_user_ids, k.last_used_at, a.name"
    f" FROM {ApiKey._meta.db_table} AS k JOIN {Agent._meta.db_table} AS a ON a.id = k.agent_id"
    " WHERE k.key_hash = %s AND k.revoked_at IS NULL LIMIT 1"
)


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_create(
    *,
    tenant_id: int,
    agent_name: str,
    is_admin: bool = False,
    allowed_user_ids: list[str] | None = None,
    label: str = "",
) -> tuple[ApiKey, str]:
    """Create a key for the named agent (created if new). Returns the row and the raw key, which is
    never stored and cannot be shown again."""
    agent, _ = Agent.objects.get_or_create(tenant_id=tenant_id, name=agent_name)
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        tenant_id=tenant_id,
        agent=agent,
        label=label,
        prefix=raw[:12],
        key_hash=hash_key(raw),
        is_admin=is_admin,
        allowed_user_ids=allowed_user_ids or [],
    )
    return key, raw


def api_key_revoke(*, key: ApiKey) -> None:
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def principal_for_key(raw: str) -> Principal | None:
    """The principal of a bearer key, or None for a missing, unknown or revoked key."""
    if not raw or not raw.startswith(KEY_PREFIX):
        return None
    return _checking_connection(_key_principal, raw)


def principal_for_request(raw: str) -> Principal | None:
    """principal_for_key and the key's request count (throttle.api_key_hit) in one statement, so one
    round trip: RateLimited past the key's limit, None for a missing, unknown or revoked key (not
    counted)."""
    if not raw or not raw.startswith(KEY_PREFIX):
        return None
    return _checking_connection(_counted_principal, raw)


def _key_principal(raw: str) -> Principal | None:
    # Every API request asks this: fixed SQL, no ORM query built per request.
    with connection.cursor() as cursor:
        cursor.execute(_KEY_SQL, [hash_key(raw)])
        row = cursor.fetchone()
    return _principal(row) if row is not None else None


def _counted_principal(raw: str) -> Principal | None:
    count = api_key_count_sql("k.id")
    if count is None:
        return _key_principal(raw)
    count_sql, count_params, retry_after = count
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH k AS ({_KEY_SQL}), c AS ({count_sql}) SELECT k.*, (SELECT hits FROM c) FROM k",
            [hash_key(raw), *count_params],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    principal = _principal(row[:-1])
    api_key_check(row[-1], retry_after)
    return principal


def _checking_connection(lookup: Callable[[str], Principal | None], raw: str) -> Principal | None:
    """The key lookup, whose statement is also the connection's health check (one round trip, not two).

    With CONN_HEALTH_CHECKS Django sends `SELECT 1` before the first statement of a request on a reused
    connection. The key lookup opens every API request, so it is the check instead: Django's is skipped,
    and when the lookup fails on a connection that then proves broken (Postgres restarted, the socket
    closed) the connection is closed and the lookup runs once more on a new one, which is what Django
    does after a failed check. Any other error is raised as it was. Inside a transaction (nothing to
    reconnect) and on a connection not yet used, nothing changes."""
    due = (
        connection.health_check_enabled
        and connection.connection is not None
        and not connection.health_check_done
        and not connection.in_atomic_block
    )
    if not due:
        return lookup(raw)
    connection.health_check_done = True
    try:
        return lookup(raw)
    except (OperationalError, InterfaceError):
        if connection.is_usable():
            raise
        connection.close()
    return lookup(raw)


def _principal(row: tuple) -> Principal:
    key_id, tenant_id, agent_id, is_admin, allowed_user_ids, last_used_at, agent_name = row
    now = timezone.now()
    # last_used_at at minute resolution: not one write per request.
    if last_used_at is None or now - last_used_at > timedelta(minutes=1):
        ApiKey.objects.filter(pk=key_id).update(last_used_at=now)
    return Principal(
        tenant_id=tenant_id,
        role="agent_admin" if is_admin else "agent",
        actor=f"agent:{agent_name}",
        actor_type="agent",
        agent_id=agent_id,
        api_key_id=key_id,
        allowed_external_ids=tuple(allowed_user_ids or ()),
    )
