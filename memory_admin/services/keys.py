"""API keys: generated once, shown once, stored as SHA-256."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from memory_admin.db.cursors import prepared_cursor
from memory_admin.errors import RateLimited
from memory_admin.models import Agent, ApiKey
from memory_admin.selectors.access import KnownUser, Principal, known_memory_user, memory_user_lookup
from memory_admin.services.throttle import api_key_check, api_key_count_sql

KEY_PREFIX = "mem_"
_KEY_SQL = (
    "SELECT k.id, k.tenant_id, k.agent_id, k.is_admin, k.allowed_user_ids, k.last_used_at, a.name"
    f" FROM {ApiKey._meta.db_table} AS k JOIN {Agent._meta.db_table} AS a ON a.id = k.agent_id"
    " WHERE k.key_hash = %s AND k.revoked_at IS NULL LIMIT 1"
)
_KEY_WIDTH = 7  # the columns of _KEY_SQL (what `_principal` reads)


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
    return _key_principal(raw)


def principal_for_request(raw: str, user_id: str | None = None) -> tuple[Principal | None, KnownUser | None]:
    """principal_for_key and the key's request count (throttle.api_key_hit) in one statement, so one
    round trip: RateLimited past the key's limit, None for a missing, unknown or revoked key (not
    counted). With `user_id` (a read of one memory user), the same statement also looks that user up,
    with the lookup `memory_user_for` compiles for the principal this key had on its previous request in
    this process: the KnownUser is given only when the key's row gives that principal again (the access
    rule stays `visible()`'s; a key whose users or role changed is looked up apart, at once)."""
    if not raw or not raw.startswith(KEY_PREFIX):
        return None, None
    return _counted_principal(raw, user_id)


def _key_principal(raw: str) -> Principal | None:
    # Every API request asks this: fixed SQL, no ORM query built per request.
    with connection.cursor() as cursor:
        cursor.execute(_KEY_SQL, [hash_key(raw)])
        row = cursor.fetchone()
    return _principal(row) if row is not None else None


# The principal of each key on its previous request in this process (by key hash): which compiled user
# lookup the key statement carries. Only a guess: a user row is used only if the key gives it again.
_previous: dict[str, Principal] = {}
_PREVIOUS_MAX = 4096


def _counted_principal(raw: str, user_id: str | None = None) -> tuple[Principal | None, KnownUser | None]:
    key_hash = hash_key(raw)
    guess = _previous.get(key_hash) if user_id is not None else None
    count = api_key_count_sql("k.id")
    if count is None and guess is None:
        principal = _key_principal(raw)
        _remember(key_hash, principal)
        return principal, None
    ctes, params, columns = [f"k AS ({_KEY_SQL})"], [key_hash], ["k.*"]
    if count is not None:
        count_sql, count_params, retry_after = count
        ctes.append(f"c AS ({count_sql})")
        params += count_params
        columns.append("(SELECT hits FROM c)")
    if guess is not None:
        user_sql, user_params = memory_user_lookup(guess, user_id)
        ctes.append(f"u AS ({user_sql})")
        params += user_params
        columns.append("u.*")
    join = " LEFT JOIN u ON true" if guess is not None else ""
    with prepared_cursor() as cursor:  # parsed and planned once per connection (a generic plan fits it)
        cursor.execute(f"WITH {', '.join(ctes)} SELECT {', '.join(columns)} FROM k{join}", params)
        row = cursor.fetchone()
        names = [column.name for column in cursor.description]
    if row is None:
        _remember(key_hash, None)  # unknown or revoked: no guess, nothing ahead for it any more
        return None, None
    n_key = _KEY_WIDTH
    principal = _principal(row[:n_key])
    if count is not None:
        try:
            api_key_check(row[n_key], retry_after)
        except RateLimited:
            _remember(key_hash, None)  # no work ahead of the key's statement while it is over its limit
            raise
        n_key += 1
    _remember(key_hash, principal)
    if guess is None or guess != principal:
        return principal, None
    return principal, known_memory_user(principal, user_id, names[n_key:], row[n_key:])


def _remember(key_hash: str, principal: Principal | None) -> None:
    if principal is None:
        _previous.pop(key_hash, None)
        return
    if len(_previous) >= _PREVIOUS_MAX and key_hash not in _previous:
        _previous.clear()
    _previous[key_hash] = principal


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
