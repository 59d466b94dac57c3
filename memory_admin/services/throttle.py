"""Rate limits (SPEC §11: 429 with Retry-After), shared by every server process through Postgres.

Fixed windows: a bucket (an API key, a login account, a client address) counts its hits in the
current window of `seconds`; over `limit`, the caller gets RateLimited with the seconds left in the
window. Counting is one `INSERT … ON CONFLICT … RETURNING` on an UNLOGGED table, in autocommit, so
the row lock is held for one statement and the commit waits for no disk flush. Accounts and client
addresses are stored as keyed hashes, never as typed (a password typed into the user name field
must not land in the database).
"""

from __future__ import annotations

import random
import time

from django.conf import settings
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


def _login_buckets(username: str, address: str) -> list[str]:
    return [_hashed("login-user", username.strip().casefold()), _hashed("login-ip", address)]


def login_retry_after(username: str, address: str) -> int:
    """Seconds until sign-in is allowed again for this account or address (0: allowed now). Reads only."""
    limit, seconds = settings.LOGIN_FAILURE_LIMIT, settings.LOGIN_FAILURE_WINDOW_SECONDS
    if limit <= 0:
        return 0
    start, retry_after = _window(seconds)
    locked = ThrottleWindow.objects.filter(
        bucket__in=_login_buckets(username, address), window_start=start, hits__gte=limit
    ).exists()
    return retry_after if locked else 0


def login_failed(username: str, address: str) -> None:
    """Count a failed sign-in against the account and against the client address."""
    if settings.LOGIN_FAILURE_LIMIT <= 0:
        return
    for bucket in _login_buckets(username, address):
        _hit(bucket, settings.LOGIN_FAILURE_WINDOW_SECONDS)
