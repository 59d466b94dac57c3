"""The embedded broker: a kombu transport on Postgres itself (psycopg 3), and what the queues hold.

kombu's stock SQLAlchemy transport delivered ~2 tasks a second to a worker: it fetches one message per
poll and, whenever the worker's prefetch window is full (always, with `acks_late` and a prefetch of
one), sleeps its whole polling interval before looking again. A worker drawing entities for every
fact write fell behind any client writing more than two facts a second. This transport keeps the
queue in one table, `broker_message`, and:

* fetches as many messages as the worker may take in one statement (`DELETE ... WHERE id IN (SELECT
  ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING`), `control` first, then `interactive`, then the rest
  (`bulk` goes first every fourth fetch, so a steady stream of interactive work cannot starve it);
* wakes on Postgres' LISTEN/NOTIFY (every publish notifies `broker_message`) and on the worker's own
  acknowledgements (a task finished: there is room to fetch), instead of sleeping a fixed interval;
  `polling_interval` only bounds the wait when no notification comes (one lost with a connection);
* stores the time each message was published, so `queue_stats()` gives each queue's depth and the
  age of its oldest message in one query.

What the SQLAlchemy transport needed fixing for, and this one keeps fixed:

* Outage recovery. Every psycopg error counts as a connection error, and so does amqp's "channel
  disconnected" (a producer whose channel an earlier failed publish closed), so kombu's `ensure()`
  reconnects and revives the producer, and the worker's consumer reconnects, instead of failing the
  same way forever (beat used to log `SchedulingError ... channel disconnected` every tick). A
  connection that failed is thrown away, never reused in its failed state; connecting checks the
  database, so a consumer retries with backoff while Postgres is down.
* Connections per process: a prefork child inherits its parent's connections, whose sockets the
  parent keeps using (publishing through them from a child lost messages). Each connection belongs
  to the process that opened it: another process opens its own and never closes (or finalises) the
  inherited one, which would end the parent's session.
* The table is created on first use under an advisory lock, so a worker and beat starting together
  on a fresh database do not race.

Delivery is at most once per fetch: a fetched message is deleted at once, and `acks_late` returns it
to the queue only on a graceful shutdown. A SIGKILLed worker loses what it held. Extraction never
relies on the broker for durability: the pending state lives in the database and the beat-driven
sweeper re-dispatches lost work (see `extraction.pipeline`). Redis (`CELERY_BROKER_URL=redis://...`)
is the scale-out path and does not go through this module's transport.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import select
import threading
import time
from queue import Empty

import psycopg
from amqp.exceptions import RecoverableConnectionError
from kombu.transport import virtual
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

TABLE = "broker_message"
NOTIFY_CHANNEL = "broker_message"
# The queues the product routes to (memory_admin/celery.py); queue_stats() always reports these.
QUEUES = ("control", "interactive", "bulk")
# Fetch order: control (heartbeats, sweeps) never waits behind anything, interactive work before bulk.
QUEUE_ORDER = ("control", "interactive")
BULK_QUEUES = ("bulk",)
# When the worker sets no prefetch limit, at most this many messages per fetch.
FETCH_MAX = 100

# No primary key: the only index is (queue, id), so every fetch reads its queue's head through it,
# whatever the planner's statistics say (a fresh table's would make it scan an id index and filter
# by queue: every row of a 10,000-message backlog, on every fetch of an empty control queue).
# Rows are deleted by ctid.
_DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id bigint GENERATED ALWAYS AS IDENTITY,
    queue text NOT NULL,
    payload text NOT NULL,
    published_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {TABLE}_queue_id ON {TABLE} (queue, id);
"""
_PUT = f"""
WITH m AS (INSERT INTO {TABLE} (queue, payload) VALUES (%s, %s) RETURNING queue) SELECT pg_notify(%s, queue) FROM m
"""
# Per queue, in the given order, by the (queue, id) index: a queue table is mostly dead rows between
# vacuums, and a scan by id alone would read them all on every fetch.
_FETCH = f"""
WITH picked AS (
    SELECT m.row, m.id FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, rank)
    CROSS JOIN LATERAL (
        SELECT ctid AS row, id FROM {TABLE} WHERE queue = q.name ORDER BY id LIMIT %(n)s FOR UPDATE SKIP LOCKED
    ) AS m
    ORDER BY q.rank, m.id LIMIT %(n)s
)
DELETE FROM {TABLE} AS b USING picked WHERE b.ctid = picked.row RETURNING b.id, b.queue, b.payload
"""
_STATS = f"""
SELECT queue, count(*), extract(epoch FROM clock_timestamp() - min(published_at))::float8
FROM {TABLE} WHERE queue = ANY(%s) GROUP BY queue
"""

# Connections a forked process inherited: kept referenced so that they are never finalised here
# (libpq's PQfinish would end the parent's session on the shared socket).
_inherited: list[psycopg.Connection] = []
_tables_ready: set[tuple[str, int]] = set()
_tables_lock = threading.Lock()


def conninfo(url: str) -> str:
    """A libpq URL from the broker URL's remainder: `postgresql+psycopg://...` (the form the
    `sqla+` URLs carried) and `postgres://...` both become `postgresql://...`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    return "postgresql://" + rest if scheme.split("+")[0] in ("postgresql", "postgres") else url


def _connect(dsn: str) -> psycopg.Connection:
    # Asynchronous commit: a fetch or publish does not wait for its WAL flush (most of its cost on a busy
    # disk). An operating-system crash may then forget the last fraction of a second: a fetched message
    # comes back (tasks are idempotent) or a published one is lost (the sweepers dispatch again).
    conn = psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=5,
        application_name="memory-admin broker",
        options="-c synchronous_commit=off",
    )
    key = (dsn, os.getpid())
    if key not in _tables_ready:
        with _tables_lock:
            if key not in _tables_ready:
                with conn.transaction():
                    # One creator at a time: CREATE ... IF NOT EXISTS alone still races on a fresh database.
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [TABLE])
                    conn.execute(_DDL)
                _tables_ready.add(key)
    return conn


class _Owned:
    """One psycopg connection, opened lazily by and for the current process only."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.conn: psycopg.Connection | None = None
        self.pid = 0

    def get(self) -> psycopg.Connection:
        if self.conn is not None and self.pid != os.getpid():
            _inherited.append(self.conn)  # the parent's: never closed from here
            self.conn = None
        if self.conn is None or self.conn.closed:
            self.conn = _connect(self.dsn)
            self.pid = os.getpid()
        return self.conn

    def drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        if self.pid != os.getpid():
            _inherited.append(conn)
            return
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - it failed already; only forget it
            log.debug("closing a broker connection failed", exc_info=True)


class QoS(virtual.QoS):
    """Acknowledging a message wakes the transport: the worker has room for the next one now."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pid = os.getpid()

    def ack(self, delivery_tag):
        super().ack(delivery_tag)
        self.channel.wake()

    def reject(self, delivery_tag, requeue=False):
        super().reject(delivery_tag, requeue=requeue)
        self.channel.wake()

    def restore_unacked_once(self, stderr=None):
        # A forked child's copy lists what its parent holds: restoring it would duplicate the messages.
        if os.getpid() != self._pid:
            return None
        return super().restore_unacked_once(stderr=stderr)


class Channel(virtual.Channel):
    QoS = QoS
    # Messages are stored as JSON text; no base64 round trip.
    body_encoding = None

    def __init__(self, connection, **kwargs):
        super().__init__(connection, **kwargs)
        self._db = _Owned(connection.dsn)
        self._fetches = itertools.count()

    def wake(self) -> None:
        transport = self.connection
        if transport is not None:
            transport.wake()

    def _run(self, sql: str, params) -> list[tuple]:
        try:
            cursor = self._db.get().execute(sql, params)
            return cursor.fetchall() if cursor.description else []
        except psycopg.Error:
            self._db.drop()
            raise

    def _order(self, queues: list[str]) -> list[str]:
        first = [q for q in QUEUE_ORDER if q in queues]
        bulk = [q for q in queues if q in BULK_QUEUES]
        rest = [q for q in queues if q not in first and q not in bulk]
        if bulk and next(self._fetches) % 4 == 3:
            return [q for q in first if q == "control"] + bulk + [q for q in first if q != "control"] + rest
        return first + rest + bulk

    def _fetch(self, queues: list[str], n: int) -> list[tuple[str, dict]]:
        rows = self._run(_FETCH, {"queues": queues, "n": n})
        rank = {q: i for i, q in enumerate(queues)}
        rows.sort(key=lambda row: (rank[row[1]], row[0]))
        return [(queue, loads(payload)) for _, queue, payload in rows]

    def _get_many(self, queues, timeout=None):
        """One fetch for as many messages as the prefetch window allows, delivered in order."""
        room = self.qos.can_consume_max_estimate()
        messages = self._fetch(self._order(list(queues)), FETCH_MAX if room is None else room)
        if not messages:
            raise Empty()
        for queue, message in messages:
            self.connection._deliver(message, queue)

    def _get(self, queue, timeout=None):
        messages = self._fetch([queue], 1)
        if not messages:
            raise Empty()
        return messages[0][1]

    def _put(self, queue, message, **kwargs):
        self._run(_PUT, [queue, dumps(message), NOTIFY_CHANNEL])

    def _size(self, queue):
        return self._run(f"SELECT count(*) FROM {TABLE} WHERE queue = %s", [queue])[0][0]

    def _purge(self, queue):
        rows = self._run(
            f"WITH d AS (DELETE FROM {TABLE} WHERE queue = %s RETURNING 1) SELECT count(*) FROM d", [queue]
        )
        return rows[0][0]

    def _new_queue(self, queue, **kwargs):
        self._db.get()  # a queue is a name in the table; connecting creates the table

    def _has_queue(self, queue, **kwargs):
        return True

    def _delete(self, queue, *args, **kwargs):
        self._purge(queue)

    def close(self):
        try:
            super().close()
        finally:
            self._db.drop()


class Transport(virtual.Transport):
    Channel = Channel
    driver_type = "postgresql"
    driver_name = "psycopg"
    # Any database error is fixed, if at all, by a new connection; "channel disconnected" (a producer
    # whose channel an earlier failed publish closed) likewise.
    connection_errors = (psycopg.Error, RecoverableConnectionError)
    channel_errors = virtual.Transport.channel_errors
    polling_interval = 1.0
    can_parse_url = True

    def __init__(self, client, **kwargs):
        super().__init__(client, **kwargs)
        self.dsn = conninfo(client.hostname)
        self._listener = _Owned(self.dsn)
        self._pipe: tuple[int, int] | None = None  # (read, write): acknowledgements wake the waiting loop
        self._pipe_pid = 0

    def _wake_pipe(self) -> tuple[int, int]:
        if self._pipe is None or self._pipe_pid != os.getpid():
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            self._pipe, self._pipe_pid = (read, write), os.getpid()
        return self._pipe

    def wake(self) -> None:
        pipe = self._pipe
        if pipe is None or self._pipe_pid != os.getpid():
            return  # nobody waits in this process
        try:
            os.write(pipe[1], b"!")
        except OSError:
            pass  # already awake (the pipe is full), or closing

    def establish_connection(self):
        channel = self.create_channel(self)
        channel._db.get()  # fails here, and is retried with backoff, while Postgres is down
        self._avail_channels.append(channel)
        return self

    def close_connection(self, connection):
        try:
            super().close_connection(connection)
        finally:
            self._listener.drop()
            pipe, self._pipe = self._pipe, None
            if pipe is not None and self._pipe_pid == os.getpid():
                for fd in pipe:
                    os.close(fd)

    def drain_events(self, connection, timeout=None):
        started = time.monotonic()
        while True:
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                pass
            waited = time.monotonic() - started
            if timeout is not None and waited >= timeout:
                raise TimeoutError()
            self._wait(self.polling_interval if timeout is None else min(self.polling_interval, timeout - waited))

    def _wait(self, seconds: float) -> None:
        """Until a message is published (NOTIFY), a message is acknowledged, or `seconds` pass."""
        wake = self._wake_pipe()[0]
        fresh = self._listener.conn is None or self._listener.pid != os.getpid()
        try:
            listener = self._listener.get()
            if fresh:
                listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
                return  # what was published before LISTEN: look again first
        except psycopg.Error:
            self._listener.drop()
            time.sleep(seconds)  # the next fetch reports the outage
            return
        readable, _, _ = select.select([listener.fileno(), wake], [], [], seconds)
        if wake in readable:
            try:
                while os.read(wake, 4096):
                    pass
            except BlockingIOError:
                pass
        if listener.fileno() in readable:
            try:
                for _ in listener.notifies(timeout=0):
                    pass
            except psycopg.Error:
                self._listener.drop()


def _queue_stats_postgres(dsn: str) -> dict[str, dict]:
    stats = {q: {"depth": 0, "oldest_age_seconds": None} for q in QUEUES}
    conn = _stats_conn(dsn)
    try:
        rows = conn.execute(_STATS, [list(QUEUES)]).fetchall()
    except psycopg.errors.UndefinedTable:
        return stats  # nothing was ever published
    except psycopg.Error:
        _stats_conns.pop((os.getpid(), dsn), None)
        raise
    for queue, depth, age in rows:
        stats[queue] = {"depth": int(depth), "oldest_age_seconds": max(0.0, float(age))}
    return stats


_stats_conns: dict[tuple[int, str], psycopg.Connection] = {}
_stats_lock = threading.Lock()


def _stats_conn(dsn: str) -> psycopg.Connection:
    conn = _stats_conns.get((os.getpid(), dsn))
    if conn is None or conn.closed:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=2, options="-c statement_timeout=2000")
        _stats_conns[(os.getpid(), dsn)] = conn
    return conn


def _queue_stats_redis(url: str) -> dict[str, dict]:
    """LLEN and the oldest message (kombu pushes on the left, the worker pops on the right) of each
    queue, in one round trip. The age comes from the `published_at` header the app adds to every task
    it sends (memory_admin/celery.py); a message sent by another client has none: age None."""
    import redis

    client = _redis_clients.get(url)
    if client is None:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        _redis_clients[url] = client
    pipe = client.pipeline(transaction=False)
    for queue in QUEUES:
        pipe.llen(queue)
        pipe.lindex(queue, -1)
    replies = pipe.execute()
    now = time.time()
    stats = {}
    for i, queue in enumerate(QUEUES):
        depth, oldest = int(replies[2 * i]), replies[2 * i + 1]
        age = None
        if oldest is not None:
            try:
                published = json.loads(oldest).get("headers", {}).get("published_at")
                age = max(0.0, now - float(published)) if published is not None else None
            except (ValueError, TypeError, AttributeError):
                age = None
        stats[queue] = {"depth": depth, "oldest_age_seconds": age}
    return stats


_redis_clients: dict[str, object] = {}


def queue_stats() -> dict[str, dict]:
    """{queue: {"depth": messages waiting, "oldest_age_seconds": age of the oldest or None}} for the
    three queues (control, interactive, bulk). One query on the embedded broker, one round trip on
    Redis. Never raises: an unreachable broker (or one of another kind, e.g. RabbitMQ) gives {}.
    Messages a worker has fetched but not finished are not counted (they are no longer waiting)."""
    from django.conf import settings

    url = settings.CELERY_BROKER_URL
    transport, _, rest = url.partition("+")
    try:
        with _stats_lock:
            if transport in ("pg", "sqla", "sqlalchemy") and "://" in rest:
                return _queue_stats_postgres(conninfo(rest))
            if url.startswith(("redis://", "rediss://")):
                return _queue_stats_redis(url)
    except Exception:  # noqa: BLE001 - health and metrics report an unknown backlog, never fail
        log.warning("queue stats unavailable", exc_info=True)
    return {}


def broker_cleanup() -> int:
    """Delete the rows left in the tables of kombu's SQLAlchemy transport, which the embedded broker
    used before this one (`kombu_message`): nothing reads them any more, and the sweepers re-dispatch
    what they held. The current table keeps no delivered rows. A no-op with Redis or RabbitMQ."""
    from django.conf import settings
    from django.db import connection

    if not settings.CELERY_BROKER_URL.startswith(("pg+", "sqla+", "sqlalchemy+")):
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('kombu_message') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return 0
        cursor.execute("DELETE FROM kombu_message")
        return cursor.rowcount
