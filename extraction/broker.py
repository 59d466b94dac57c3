"""The embedded broker: Postgres through kombu's SQLAlchemy transport, with four fixes.

kombu 5.7's SQLAlchemy channel passes every transport option to `create_engine()`, including the
virtual transport's own `polling_interval`, so a worker configured with a polling interval (we use
0.5 s, the default 1 s adds a second of latency to every task) dies with
"Invalid argument(s) 'polling_interval' sent to create_engine()". It also creates its two tables
with `metadata.create_all()` on first use; a worker and beat starting together on a fresh database
race on that and one of them crashes. And its engine cache is per class, so prefork children reuse
the parent's connections after fork (messages published from a child were lost). This subclass
strips the option, retries the race and keeps one engine per process.

The fourth is recovery after a database outage. A publish that fails while Postgres is down makes
kombu close the producer's channel (`Connection.collect()` inside the declare's `ensure`), and every
later publish through that producer then fails at once with amqp's `RecoverableConnectionError:
channel disconnected`. kombu's stock transport lists only SQLAlchemy's `OperationalError` as a
connection error, so `ensure()` never treats "channel disconnected" as something a reconnect fixes:
Celery beat (which keeps one producer for its whole life) logged `SchedulingError ... channel
disconnected` every tick forever and never swept again, and the same happened to the producers
worker processes use to dispatch batches. Here the closed channel counts as a connection error, so
`ensure()` reconnects and revives the producer; a session whose connection broke mid-transaction is
thrown away instead of being reused in its failed state; and pooled connections are pinged before
use, so one killed by a Postgres restart is replaced rather than failing the next poll.

`memory_admin/celery.py` registers it under the `sqla` alias, so the broker URL stays the standard
`sqla+postgresql+psycopg://...`. Production brokers (Redis, RabbitMQ) do not go through here.

Note what this transport does *not* give: a message a worker fetched is hidden from the queue at
once, and `acks_late` only returns it on a graceful shutdown. A SIGKILLed worker loses the message.
Extraction never relies on the broker for durability: the pending state lives in the database and
the beat-driven sweeper re-dispatches (see `extraction.pipeline`).
"""

from __future__ import annotations

import os
import time

from amqp.exceptions import RecoverableConnectionError
from kombu.transport import sqlalchemy as kombu_sqla
from sqlalchemy import create_engine
from sqlalchemy.exc import DBAPIError, OperationalError, PendingRollbackError
from sqlalchemy.orm import sessionmaker

# Options the virtual transport reads itself; SQLAlchemy's create_engine() rejects them.
_NOT_FOR_ENGINE = ("polling_interval",)


class Channel(kombu_sqla.Channel):
    def _engine_from_config(self):
        options = {
            key: value
            for key, value in self.connection.client.transport_options.items()
            if key not in _NOT_FOR_ENGINE
            and key
            not in {
                "queue_tablename",
                "message_tablename",
                "callback",
                "errback",
                "max_retries",
                "interval_start",
                "interval_step",
                "interval_max",
                "retry_errors",
            }
        }
        # A connection killed by a Postgres restart is noticed at checkout and replaced.
        options.setdefault("pool_pre_ping", True)
        return create_engine(self.connection.client.hostname, **options)

    def _open(self):
        # Keyed by process too: a prefork worker child inherits the parent's engine, whose pooled
        # connections share sockets with the parent. Publishing from a child (the sweeper dispatching
        # batches) through them silently lost every message; each process needs its own engine.
        hostname = (self.connection.client.hostname, os.getpid())
        with kombu_sqla._MUTEX:
            if hostname not in self._engines:
                engine = self._engine_from_config()
                for attempt in range(5):
                    try:
                        kombu_sqla.metadata.create_all(engine)
                        break
                    except DBAPIError:
                        # Another process created the tables at the same moment: look again.
                        if attempt == 4:
                            raise
                        time.sleep(0.2 * (attempt + 1))
                self._engines[hostname] = engine, sessionmaker(bind=engine)
        return self._engines[hostname]

    def _forget_session(self) -> None:
        """Drop a session whose connection failed: reusing it would raise PendingRollbackError (not a
        connection error, so kombu would never reconnect) on every later call."""
        session, self._session = self._session, None
        if session is not None:
            try:
                session.close()
            except Exception:  # noqa: BLE001, S110 - the connection is already gone; nothing to release
                pass

    def _guarded(self, method, *args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (DBAPIError, PendingRollbackError) as exc:
            self._forget_session()
            if isinstance(exc, OperationalError):
                raise
            # Surface as a connection error: the transport reconnects rather than giving up.
            raise OperationalError(str(exc), None, exc) from exc

    def _get(self, queue):
        return self._guarded(super()._get, queue)

    def _put(self, queue, payload, **kwargs):
        return self._guarded(super()._put, queue, payload, **kwargs)

    def _purge(self, queue):
        return self._guarded(super()._purge, queue)

    def _size(self, queue):
        return self._guarded(super()._size, queue)

    def _new_queue(self, queue, **kwargs):
        return self._guarded(super()._new_queue, queue, **kwargs)


class Transport(kombu_sqla.Transport):
    Channel = Channel
    # "channel disconnected" (a producer whose channel an earlier failed publish closed) is fixed by
    # reconnecting, like any other lost connection.
    connection_errors = (OperationalError, RecoverableConnectionError)


def broker_cleanup() -> int:
    """The embedded broker keeps every delivered message as an invisible row (kombu never deletes
    them); with a sweep every 2 s that is ~43,000 rows a day. Invisible rows are dead: kombu never
    makes a row visible again (an unacked message is restored as a new row). Delete them.
    A no-op with Redis or RabbitMQ."""
    from django.conf import settings
    from django.db import connection

    if not settings.CELERY_BROKER_URL.startswith(("sqla+", "sqlalchemy+")):
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('kombu_message') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return 0
        cursor.execute("DELETE FROM kombu_message WHERE visible = false")
        return cursor.rowcount
