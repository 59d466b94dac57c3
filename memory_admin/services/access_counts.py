"""Access counts off the request path (SPEC: reads update access counts without a write per row per
request).

A read adds its fact ids to an in-process accumulator; a background thread writes everything
accumulated every ACCESS_COUNT_FLUSH_SECONDS as one UPDATE ... FROM (VALUES ...) (a fact read n times
gets +n, and the time of its latest read), and once more at process exit. With the setting at 0 (the
test suite) every read is written at once, in the caller's transaction, as before.

The same accumulator counts requests per tenant, UTC day and kind (search, context, fact read) for the
overview's usage chart: `record_usage` adds to it, and the flush writes those counts into usage_day as
one upsert (INSERT ... ON CONFLICT DO UPDATE), in the transaction of the fact UPDATE.

The same accumulator keeps the access log (models.FactRead): which API key read which fact, through
which door (a search hit, a context block, each by REST or MCP), when. Reads of one fact by one key
through one door between two flushes are one row (with their count and the latest time); the flush
writes them as one INSERT ... SELECT, so a read costs the request a dictionary update, not a statement.
`access_log_prune` (the beat, daily) removes rows older than ACCESS_LOG_RETENTION_DAYS.

Counts and log rows accumulated in a process that dies without exiting (SIGKILL) are lost (at most a
flush interval's worth): the log is an operator's view of who read what, not a tamper-proof trail
(the audit log is that, for writes).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import BigIntegerField, F, Value
from django.db.models.functions import Cast, Least
from django.utils import timezone

from memory_admin.models import Fact

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper

    from memory_admin.selectors.access import Principal

log = logging.getLogger(__name__)
MAX_ACCESS_COUNT = 2**31 - 1  # the column is an int4

_lock = threading.Lock()
_pending: dict[str, tuple[int, datetime]] = {}  # fact id → (reads, latest read)
_usage: dict[tuple[int, date, str], int] = {}  # (tenant id, day, kind) → requests
_log: dict[tuple[str, int, str], tuple[int, datetime]] = {}  # (fact id, key id, via) → (reads, latest)
# The door of the reads made in this context: "mcp" inside an MCP tool call (mcp_server), else REST.
_door: contextvars.ContextVar[str] = contextvars.ContextVar("read_door", default="")


@contextlib.contextmanager
def reads_through_mcp() -> Iterator[None]:
    """Reads made inside this block are logged as an MCP tool's (`mcp_search`, `mcp_context`)."""
    token = _door.set("mcp_")
    try:
        yield
    finally:
        _door.reset(token)


_flusher: tuple[int, threading.Thread] | None = None  # (pid, thread): a forked worker starts its own


def _interval() -> float:
    return float(getattr(settings, "ACCESS_COUNT_FLUSH_SECONDS", 1.0))


def record_access(fact_ids: Iterable[UUID], principal: Principal | None = None, via: str = "") -> None:
    """Count one read of each fact: at once when the interval is 0, else at the next flush. With the
    reading principal and the door (`search`, `context`), a key's reads also go to the access log."""
    ids = list(fact_ids)
    if not ids:
        return
    now = timezone.now()
    key_id = principal.api_key_id if principal is not None and via else None
    door = _door.get() + via
    if _interval() <= 0:
        # Saturating: a count at the int4 limit stays there rather than failing the read.
        count = Least(Cast(F("access_count"), BigIntegerField()) + 1, Value(MAX_ACCESS_COUNT))
        Fact.objects.filter(pk__in=ids).update(access_count=count, last_accessed_at=now)
        if key_id is not None:
            with connection.cursor() as cursor:
                _insert_log(cursor, [((str(fact_id), key_id, door), (1, now)) for fact_id in ids])
        return
    keys = [str(fact_id) for fact_id in ids]  # once: the counts and the log share them
    with _lock:
        for key in keys:
            reads, _ = _pending.get(key, (0, now))
            _pending[key] = (reads + 1, now)
        if key_id is not None:
            for key in keys:
                entry = (key, key_id, door)
                _log[entry] = (_log.get(entry, (0, now))[0] + 1, now)
    _ensure_flusher()


def _insert_log(cursor: CursorWrapper, rows: list[tuple[tuple[str, int, str], tuple[int, datetime]]]) -> None:
    # Joined to the fact (its owner, and a fact erased since the read drops its rows) and to the key
    # (its tenant: a global fact has none of its own).
    values = ", ".join(["(%s::uuid, %s::int8, %s::varchar, %s::int, %s::timestamptz)"] * len(rows))
    cursor.execute(
        "INSERT INTO memory_admin_factread (tenant_id, fact_id, memory_user_id, api_key_id, via, reads, read_at)"
        " SELECT k.tenant_id, f.id, f.memory_user_id, k.id, v.via, v.n, v.t"
        f" FROM (VALUES {values}) AS v(fact_id, key_id, via, n, t)"
        " JOIN memory_admin_fact AS f ON f.id = v.fact_id JOIN memory_admin_apikey AS k ON k.id = v.key_id",
        [x for (fact_id, key_id, via), (n, at) in rows for x in (fact_id, key_id, via, n, at)],
    )


def access_log_prune(*, now: datetime | None = None, batch: int = 10_000) -> int:
    """Remove access-log rows older than ACCESS_LOG_RETENTION_DAYS (the beat's daily task), in batches so
    that no statement holds many locks; returns the rows removed."""
    days = float(getattr(settings, "ACCESS_LOG_RETENTION_DAYS", 90))
    cutoff = (now or timezone.now()) - timedelta(days=days)
    removed = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM memory_admin_factread WHERE id IN"
                " (SELECT id FROM memory_admin_factread WHERE read_at < %s LIMIT %s)",
                [cutoff, batch],
            )
            removed += cursor.rowcount
            if cursor.rowcount < batch:
                return removed


def record_usage(tenant_id: int, kind: str) -> None:
    """Count one request of `kind` (search, context, fact) for the tenant's usage chart: at once when
    the interval is 0, else at the next flush."""
    key = (tenant_id, timezone.localdate(), kind)
    if _interval() <= 0:
        with connection.cursor() as cursor:
            _upsert_usage(cursor, [(key, 1)])
        return
    with _lock:
        _usage[key] = _usage.get(key, 0) + 1
    _ensure_flusher()


def _upsert_usage(cursor: CursorWrapper, rows: list[tuple[tuple[int, date, str], int]]) -> None:
    # Joined to the tenant so that a tenant deleted since the request drops its counts instead of
    # failing the flush (and with it the facts' access counts) for good.
    values = ", ".join(["(%s::int8, %s::date, %s::varchar, %s::int8)"] * len(rows))
    cursor.execute(
        "INSERT INTO memory_admin_usage_day (tenant_id, day, kind, count)"
        f" SELECT v.tenant_id, v.day, v.kind, v.n FROM (VALUES {values}) AS v(tenant_id, day, kind, n)"
        " JOIN memory_admin_tenant AS t ON t.id = v.tenant_id"
        " ON CONFLICT (tenant_id, day, kind) DO UPDATE SET count = memory_admin_usage_day.count + EXCLUDED.count",
        [x for (tenant_id, day, kind), n in rows for x in (tenant_id, day, kind, n)],
    )


def flush() -> int:
    """Write what has accumulated (one UPDATE of the facts, one upsert of the usage counts); the
    number of facts written."""
    with _lock:
        batch = sorted(_pending.items())
        _pending.clear()
        usage = sorted(_usage.items())
        _usage.clear()
        logged = list(_log.items())
        _log.clear()
    if not batch and not usage and not logged:
        return 0
    values = ", ".join(["(%s::uuid, %s::int, %s::timestamptz)"] * len(batch))
    params = [x for fact_id, (reads, at) in batch for x in (fact_id, reads, at)]
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            if batch:
                cursor.execute(
                    "UPDATE memory_admin_fact AS f"
                    f" SET access_count = LEAST(f.access_count::int8 + v.n, {MAX_ACCESS_COUNT}),"
                    " last_accessed_at = GREATEST(COALESCE(f.last_accessed_at, v.t), v.t)"
                    f" FROM (VALUES {values}) AS v(id, n, t) WHERE f.id = v.id",
                    params,
                )
            if usage:
                _upsert_usage(cursor, usage)
            if logged:
                _insert_log(cursor, logged)
    except Exception:
        # A failed flush (deadlock with a write, a restart of the database) puts the counts back.
        log.exception("access counts: flush of %d facts failed; retried at the next flush", len(batch))
        with _lock:
            for fact_id, (reads, at) in batch:
                old_reads, old_at = _pending.get(fact_id, (0, at))
                _pending[fact_id] = (reads + old_reads, max(at, old_at))
            for key, n in usage:
                _usage[key] = _usage.get(key, 0) + n
            for entry, (n, at) in logged:
                old_n, old_at = _log.get(entry, (0, at))
                _log[entry] = (n + old_n, max(at, old_at))
        return 0
    return len(batch)


def _run() -> None:
    while True:
        time.sleep(max(_interval(), 0.05))
        try:
            flush()
        finally:
            connection.close_if_unusable_or_obsolete()


def _ensure_flusher() -> None:
    global _flusher
    pid = os.getpid()
    if _flusher is not None and _flusher[0] == pid and _flusher[1].is_alive():
        return
    with _lock:
        if _flusher is not None and _flusher[0] == pid and _flusher[1].is_alive():
            return
        thread = threading.Thread(target=_run, name="access-counts", daemon=True)
        _flusher = (pid, thread)
        thread.start()


def _at_exit() -> None:
    if (_pending or _usage or _log) and _flusher is not None and _flusher[0] == os.getpid():
        try:
            flush()
        except Exception:  # noqa: BLE001 - exiting anyway
            log.exception("access counts: final flush failed")


atexit.register(_at_exit)
