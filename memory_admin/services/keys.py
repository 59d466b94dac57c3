"""API keys: generated once, shown once, stored as SHA-256."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from memory_admin.db.cursors import prepared_cursor
from memory_admin.errors import DomainError, Invalid, NotFound, RateLimited
from memory_admin.models import Agent, ApiKey, MemoryUser
from memory_admin.selectors.access import (
    ADMIN,
    KnownUser,
    Principal,
    known_memory_user,
    memory_user_lookup,
    require_tenant_wide,
)
from memory_admin.services.audit import audit
from memory_admin.services.throttle import api_key_check, api_key_count_sql

KEY_PREFIX = "mem_"
_KEY_SQL = (
    "SELECT k.id, k.tenant_id, k.agent_id, k.is_admin, k.allowed_user_ids, k.last_used_at, a.name,"
    " k.paused_at, k.expires_at, k.read_only"
    f" FROM {ApiKey._meta.db_table} AS k JOIN {Agent._meta.db_table} AS a ON a.id = k.agent_id"
    " WHERE k.key_hash = %s AND k.revoked_at IS NULL LIMIT 1"
)
_KEY_WIDTH = 10  # the columns of _KEY_SQL (what `_principal` reads)


class KeyPaused(DomainError):
    """The key exists but an admin paused it: nothing it asks is answered until it is resumed."""

    code = "key_paused"
    status = 403


class KeyExpired(DomainError):
    code = "key_expired"
    status = 401


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_create(
    *,
    tenant_id: int,
    agent_name: str,
    is_admin: bool = False,
    allowed_user_ids: list[str] | None = None,
    label: str = "",
    read_only: bool = False,
    expires_at: datetime | None = None,
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
        read_only=read_only,
        expires_at=expires_at,
    )
    return key, raw


def key_users_check(*, tenant_id: int, external_ids: list[str]) -> None:
    """Refuse a key limited to memory users the tenant does not have (`unknown_memory_user`, naming
    them): a typo would otherwise make a key that reaches nobody, or someone created later."""
    if not external_ids:
        return
    known = set(
        MemoryUser.objects.filter(tenant_id=tenant_id, external_id__in=external_ids).values_list(
            "external_id", flat=True
        )
    )
    unknown = [u for u in dict.fromkeys(external_ids) if u not in known]
    if unknown:
        raise Invalid(
            f"No memory user with the id {', '.join(unknown)} in this tenant: check the ids on the Users page.",
            code="unknown_memory_user",
            field="users",
            unknown=unknown,
        )


def key_expiry_check(expires_at: datetime | None) -> None:
    if expires_at is not None and expires_at <= timezone.now():
        raise Invalid("The expiry must be in the future.", code="expiry_in_past", field="expires_at")


def api_key_revoke(*, key: ApiKey) -> None:
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


@transaction.atomic
def api_key_pause(*, principal: Principal, key_id: int, paused: bool) -> ApiKey:
    """Pause (or resume) a live key of the principal's tenant (admins): a paused key's requests are
    refused with `key_paused` until it is resumed. A revoked key stays revoked (`key_revoked`). Audited."""
    require_tenant_wide(principal, ADMIN)
    key = ApiKey.objects.select_for_update().filter(tenant_id=principal.tenant_id, pk=key_id).first()
    if key is None:
        raise NotFound("No API key with that id is visible to you.")
    if key.revoked_at is not None:
        raise DomainError("This key is revoked for good; create a new one.", code="key_revoked", status=409)
    if paused != (key.paused_at is not None):
        key.paused_at = timezone.now() if paused else None
        key.save(update_fields=["paused_at"])
        action = "api_key.pause" if paused else "api_key.resume"
        audit(principal, action, outcome="paused" if paused else "resumed", target=key, after={"prefix": key.prefix})
    return key


def principal_for_key(raw: str) -> Principal | None:
    """The principal of a bearer key, or None for a missing, unknown, revoked, paused or expired key (the
    MCP door, whose transport answers 401; the REST API answers `key_paused` / `key_expired`)."""
    if not raw or not raw.startswith(KEY_PREFIX):
        return None
    try:
        return _key_principal(raw)
    except (KeyPaused, KeyExpired):
        return None


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
        try:
            principal = _key_principal(raw)
        except DomainError:
            _remember(key_hash, None)
            raise
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
    try:
        principal = _principal(row[:n_key])
    except DomainError:
        _remember(key_hash, None)  # paused or expired: nothing starts ahead of its next statement
        raise
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
    """The key's principal; KeyPaused or KeyExpired for a key that exists but may not be used now."""
    key_id, tenant_id, agent_id, is_admin, allowed_user_ids, last_used_at, agent_name = row[:7]
    paused_at, expires_at, read_only = row[7:10]
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise KeyExpired("This API key has expired; ask an admin for a new one.")
    if paused_at is not None:
        raise KeyPaused("This API key is paused by an admin; its requests are refused until it is resumed.")
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
        read_only=bool(read_only),
    )
