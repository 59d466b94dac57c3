"""queue_stats(): what waits in each of the three queues, and for how long, on the embedded broker
(this run's test database) and on a real redis-server; an unreachable broker answers {} at once."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from django.db import connection

from extraction.broker import QUEUES, queue_stats
from memory_admin.celery import app
from tests.ops.cluster import free_port


def send(url: str, counts: dict[str, int]) -> None:
    with app.connection_for_write(url) as conn:
        for queue, n in counts.items():
            for _ in range(n):
                app.send_task("extraction.sweep", queue=queue, connection=conn)


def broker_url_of_test_database() -> str:
    db = connection.settings_dict
    if db["PORT"] or not db["HOST"].startswith("/"):
        return f"pg+postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    return f"pg+postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}"


def use_broker(url: str) -> None:
    """Point this process's app (its sends) and queue_stats() at `url`. The app's connection pools are
    dropped the way Celery drops them after a fork (celery.app.base.Celery._after_fork)."""
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def embedded_broker(settings, transactional_db):
    """The embedded transport on this run's test database (not the development one the settings name),
    its queue table emptied; this process sends through it."""
    url = broker_url_of_test_database()
    before = app.conf.broker_url
    settings.CELERY_BROKER_URL = url
    use_broker(url)
    with app.connection_for_write(url) as conn:
        conn.connect()  # creates the table
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM broker_message")
    yield url
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM broker_message")
    use_broker(before)


def test_depth_and_age_of_the_oldest_message_per_queue_on_the_embedded_broker(embedded_broker):
    send(embedded_broker, {"control": 3, "interactive": 1})
    time.sleep(0.5)
    send(embedded_broker, {"interactive": 2})
    stats = queue_stats()
    assert set(stats) == set(QUEUES)
    assert stats["control"]["depth"] == 3 and stats["interactive"]["depth"] == 3
    assert stats["bulk"] == {"depth": 0, "oldest_age_seconds": None}
    # The oldest interactive message is the first one, sent half a second before the others.
    assert 0.5 <= stats["interactive"]["oldest_age_seconds"] < 30
    assert 0.5 <= stats["control"]["oldest_age_seconds"] < 30


def test_a_fetched_message_no_longer_counts_as_waiting(embedded_broker):
    send(embedded_broker, {"bulk": 2})
    with app.connection_for_read(embedded_broker) as conn:
        message = conn.default_channel.basic_get("bulk", no_ack=True)
    assert message is not None and message.headers["task"] == "extraction.sweep"
    assert queue_stats()["bulk"]["depth"] == 1


def test_an_unreachable_broker_gives_an_empty_answer_without_raising(settings):
    settings.CELERY_BROKER_URL = f"pg+postgresql://nobody@127.0.0.1:{free_port()}/nothing"
    started = time.monotonic()
    assert queue_stats() == {}
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    assert queue_stats() == {}
    assert time.monotonic() - started < 10


@pytest.fixture
def redis_url(settings):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: run `bash .ci/bootstrap --browser` (Debian's redis-server)")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        settings.CELERY_BROKER_URL = url
        yield url
    finally:
        server.terminate()
        server.wait(10)


def test_depth_and_age_per_queue_on_redis(redis_url):
    send(redis_url, {"interactive": 1})
    time.sleep(0.5)
    send(redis_url, {"interactive": 1, "bulk": 4})
    stats = queue_stats()
    assert stats["interactive"]["depth"] == 2 and stats["bulk"]["depth"] == 4
    assert stats["control"] == {"depth": 0, "oldest_age_seconds": None}
    assert 0.5 <= stats["interactive"]["oldest_age_seconds"] < 30
    assert 0 <= stats["bulk"]["oldest_age_seconds"] < 0.5
