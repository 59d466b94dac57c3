"""Rate limits (SPEC §11: 429 with Retry-After), shared by every server process through Postgres.

Fixed windows: a bucket (an API key, a login account, a client address) counts its hits in the
current window of `seconds`; over `limit`, the caller gets RateLimited with the seconds left in the
window (sign-in has its own rules, below). Counting is one `INSERT … ON CONFLICT … RETURNING` on an
UNLOGGED table, in autocommit, so
the row lock is held for one statement and the commit waits for no disk flush. Accounts and client
addresses are stored as keyed hashes, never as typed (a password typed into the user name field
must not land in the database).
"""

from __future__ import annotations

import random
import secrets
import time

from django.conf import settings
from django.core import signing
from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.http import HttpRequest
from django.utils.crypto import salted_hmac

from memory_admin.errors import RateLimited
from memory_admin.models import ThrottleWindow

_TABLE = ThrottleWindow._meta.db_table
# Old windows are deleted by one hit in this many, so the table stays at about one row per live bucket.
_SWEEP_ONE_IN = 500
_KEEP_SECONDS = 24 * 3600


def _window(seconds: int) -> tuple[int, int]:
    """(start of the current window, seconds until it ends, at least 1)."""
    now = time.time()
    start = int(now // seconds) * seconds
    return start, max(1, int(start + seconds - now + 0.999))


def _count_sql(rows: str) -> str:
    """The one counting statement: a hit for each (bucket, window_start) row of `rows`."""
    return (
        f"INSERT INTO {_TABLE} (bucket, window_start, hits) {rows} "
        f"ON CONFLICT (bucket, window_start) DO UPDATE SET hits = {_TABLE}.hits + 1 RETURNING hits"
    )


def _sweep(cursor: CursorWrapper) -> None:
    if random.randrange(_SWEEP_ONE_IN) == 0:
        _delete_old_windows(cursor)


def _delete_old_windows(cursor: CursorWrapper) -> None:
    cursor.execute(f"DELETE FROM {_TABLE} WHERE window_start < %s", [int(time.time()) - _KEEP_SECONDS])


def _hit(bucket: str, seconds: int) -> tuple[int, int]:
    """Count one hit; (hits in this window so far, seconds until the window ends)."""
    start, retry_after = _window(seconds)
    with connection.cursor() as cursor:
        cursor.execute(_count_sql("VALUES (%s, %s, 1)"), [bucket, start])
        hits = cursor.fetchone()[0]
        _sweep(cursor)
    return hits, retry_after


def _hashed(kind: str, value: str) -> str:
    return f"{kind}:{salted_hmac('memory_admin.throttle', value).hexdigest()[:40]}"


def api_key_hit(api_key_id: int) -> None:
    """Count one API request of this key; RateLimited past API_RATE_LIMIT in API_RATE_WINDOW_SECONDS."""
    if settings.API_RATE_LIMIT <= 0:
        return
    hits, retry_after = _hit(f"api:{api_key_id}", settings.API_RATE_WINDOW_SECONDS)
    api_key_check(hits, retry_after)


def api_key_count_sql(key_id_sql: str) -> tuple[str, list, int] | None:
    """api_key_hit as a data-modifying CTE body for a statement that finds the key itself (one round
    trip per request instead of two): (SQL counting one hit of the key whose id is the SQL expression
    `key_id_sql` over the rows of `k`, its parameters, the seconds until the window ends), or None when
    the limit is off. The caller passes what RETURNING gave to `api_key_check`."""
    if settings.API_RATE_LIMIT <= 0:
        return None
    start, retry_after = _window(settings.API_RATE_WINDOW_SECONDS)
    if random.randrange(_SWEEP_ONE_IN) == 0:  # a cursor only for the one request in _SWEEP_ONE_IN that sweeps
        with connection.cursor() as cursor:
            _delete_old_windows(cursor)
    return _count_sql(f"SELECT 'api:' || {key_id_sql}, %s::int8, 1 FROM k"), [start], retry_after


def api_key_check(hits: int | None, retry_after: int) -> None:
    """RateLimited when a key's `hits` in this window are past API_RATE_LIMIT."""
    limit, seconds = settings.API_RATE_LIMIT, settings.API_RATE_WINDOW_SECONDS
    if limit > 0 and hits is not None and hits > limit:
        raise RateLimited(
            f"This key made more than {limit} requests in {seconds} s. Retry in {retry_after} s.",
            retry_after=retry_after,
            limit=limit,
            window_seconds=seconds,
        )


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or the first address of THROTTLE_CLIENT_IP_HEADER when the
    server sits behind a proxy that sets it (e.g. HTTP_X_FORWARDED_FOR)."""
    header = settings.THROTTLE_CLIENT_IP_HEADER
    if header and request.META.get(header):
        return request.META[header].split(",")[0].strip()
    return request.META.get("REMOTE_ADDR", "")


# --- sign-in (SPEC §11): slows guessing, never locks the person out --------------------------------
#
# Failures are counted per (account, address), per address and per account. An address past the limit
# (guessing across accounts), or an (account, address) pair past it, answers 429 until the window ends;
# the account's own count never refuses anyone: it only means the account is under attack, and then an
# address that has not yet failed much gets fewer tries (LOGIN_FAILURE_LIMIT // 3) for that account. So
# guessing from many addresses is slowed, while the owner signs in from their own (another) address,
# and from a browser where they signed in before (a known device, a signed cookie naming the account)
# whatever the addresses do, within the device's own count.

KNOWN_DEVICE_COOKIE = "memory_admin_device"
KNOWN_DEVICE_DAYS = 90
_DEVICE_SALT = "memory_admin.throttle.known_device"


def _account(username: str) -> str:
    return _hashed("login-user", username.strip().casefold())


def known_device_token(username: str) -> str:
    """A signed cookie value for a browser that just signed in as `username` (a hash, never the name)."""
    return signing.dumps({"a": _account(username), "d": secrets.token_hex(8)}, salt=_DEVICE_SALT)


def known_device(username: str, token: str | None) -> str | None:
    """The device id of the cookie when it was given to a browser that signed in as `username`."""
    if not token:
        return None
    try:
        value = signing.loads(token, salt=_DEVICE_SALT, max_age=KNOWN_DEVICE_DAYS * 86400)
    except signing.BadSignature:
        return None
    if not isinstance(value, dict) or value.get("a") != _account(username) or not isinstance(value.get("d"), str):
        return None
    return value["d"]


def _login_buckets(username: str, address: str, device: str | None) -> dict[str, str]:
    name = username.strip().casefold()
    buckets = {"account": _account(username)}
    if device:
        buckets["device"] = _hashed("login-device", f"{name}\x1f{device}")
    else:
        buckets["pair"] = _hashed("login-pair", f"{name}\x1f{address}")
        buckets["address"] = _hashed("login-ip", address)
    return buckets


def login_retry_after(username: str, address: str, *, device: str | None = None) -> int:
    """Seconds until this sign-in attempt may be checked (0: now). Reads only. `device`: the id of a
    known-device cookie of this account (`known_device`)."""
    limit, seconds = settings.LOGIN_FAILURE_LIMIT, settings.LOGIN_FAILURE_WINDOW_SECONDS
    if limit <= 0:
        return 0
    start, retry_after = _window(seconds)
    buckets = _login_buckets(username, address, device)
    hits = dict(
        ThrottleWindow.objects.filter(bucket__in=buckets.values(), window_start=start).values_list("bucket", "hits")
    )
    count = {kind: hits.get(bucket, 0) for kind, bucket in buckets.items()}
    if device:
        return retry_after if count["device"] >= limit else 0
    under_attack = count["account"] >= limit
    pair_limit = max(1, limit // 3) if under_attack else limit
    return retry_after if count["address"] >= limit or count["pair"] >= pair_limit else 0


def login_failed(username: str, address: str, *, device: str | None = None) -> None:
    """Count a failed sign-in against the account, and the address and pair (or the known device): one
    statement for all of them (their rows are locked in the same order by every attempt)."""
    if settings.LOGIN_FAILURE_LIMIT <= 0:
        return
    start, _ = _window(settings.LOGIN_FAILURE_WINDOW_SECONDS)
    buckets = list(_login_buckets(username, address, device).values())
    with connection.cursor() as cursor:
        cursor.execute(
            _count_sql("VALUES " + ", ".join(["(%s, %s, 1)"] * len(buckets))),
            [value for bucket in buckets for value in (bucket, start)],
        )
        _sweep(cursor)
