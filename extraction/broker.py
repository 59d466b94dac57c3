"""The embedded broker: Postgres through kombu's SQLAlchemy transport, with three fixes.

kombu 5.7's SQLAlchemy channel passes every transport option to `create_engine()`, including the
virtual transport's own `polling_interval`, so a worker configured with a polling interval (we use
0.5 s, the default 1 s adds a second of latency to every task) dies with
"Invalid argument(s) 'polling_interval' sent to create_engine()". It also creates its two tables
with `metadata.create_all()` on first use; a worker and beat starting together on a fresh database
race on that and one of them crashes. And its engine cache is per class, so prefork children reuse
the parent's connections after fork (messages published from a child were lost). This subclass
strips the option, retries the race and keeps one engine per process.

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

from kombu.transport import sqlalchemy as kombu_sqla
from sqlalchemy import create_engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import sessionmaker

# Options the virtual transport reads itself; SQLAlchemy's create_engine() rejects them.
_NOT_FOR_ENGINE = ("polling_interval",)


class Channel(kombu_sqla.Channel):
    def _engine_from_config(self):
        options = {
            key: value
            for key, value in self.connection.client.transport_options.items()
            if key not in _NOT_FOR_ENGINE
            and key not in {"queue_tablename", "message_tablename", "callback", "errback", "max_retries",
                            "interval_start", "interval_step", "interval_max", "retry_errors"}
        }
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


class Transport(kombu_sqla.Transport):
    Channel = Channel
