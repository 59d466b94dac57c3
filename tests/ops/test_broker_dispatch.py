"""A pending extraction batch is sent to the broker once: the sweeper sends it again only when its
message is lost (taken from the queue, and the batch still not claimed), never while it waits in a
slow queue. On the embedded broker of this run's test database, with the sweeper run in-process."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from extraction import pipeline
from extraction.broker import queue_stats
from memory_admin.celery import app
from memory_admin.models import ExtractionBatch, Thread
from tests.ops.test_broker_stats import embedded_broker  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)


def waiting() -> int:
    return queue_stats()["interactive"]["depth"]


@pytest.fixture
def pending_batch(api, embedded_broker, settings):  # noqa: F811 - the fixture imported above
    """One planned, dispatched batch whose message waits in the queue (no worker runs)."""
    settings.EXTRACTION_REDISPATCH_SECONDS = 0  # any dispatch is old enough to be redone, if lost
    said = [{"role": "user", "content": "I sail a small boat on the lake every weekend."}]
    r = api.post("users/alice/messages", {"thread_id": "t1", "messages": said})
    assert r.status_code == 202, r.content
    Thread.objects.update(extract_due_at=timezone.now() - timedelta(seconds=1))
    assert pipeline.sweep() == {"planned": 1, "recovered": 0}
    return ExtractionBatch.objects.get()


def test_a_batch_waiting_in_the_queue_is_not_sent_again_by_later_sweeps(pending_batch):
    assert pending_batch.status == "pending" and pending_batch.dispatched_at is not None
    assert waiting() == 1
    for _ in range(10):
        assert pipeline.sweep() == {"planned": 0, "recovered": 0}
    assert waiting() == 1


def test_a_message_taken_but_never_run_is_sent_again_once(pending_batch):
    with app.connection_for_read() as conn:  # a worker takes it and dies before claiming the batch
        assert conn.default_channel.basic_get("interactive", no_ack=True) is not None
    assert waiting() == 0
    assert pipeline.sweep() == {"planned": 0, "recovered": 1}
    assert waiting() == 1
    batch = ExtractionBatch.objects.get()
    assert batch.status == "pending" and batch.dispatched_at > pending_batch.dispatched_at
    assert pipeline.sweep() == {"planned": 0, "recovered": 0}
    assert waiting() == 1


def test_a_claimed_batch_is_left_to_its_worker_and_a_retry_is_sent_once(pending_batch, settings):
    settings.EXTRACTION_BACKOFF_SECONDS = 0
    with app.connection_for_read() as conn:
        conn.default_channel.basic_get("interactive", no_ack=True)
    claimed = pipeline._claim(pending_batch.pk)
    assert claimed is not None
    assert pipeline.sweep() == {"planned": 0, "recovered": 0} and waiting() == 0
    # The model failed; the batch waits for its retry, which the next sweep sends, once.
    assert pipeline._retry_or_fail(pending_batch.pk, claimed[1], "boom", retryable=True, retry_after=None) == "pending"
    assert pipeline.sweep() == {"planned": 0, "recovered": 1} and waiting() == 1
    assert pipeline.sweep() == {"planned": 0, "recovered": 0} and waiting() == 1


def test_the_episode_sweep_adds_nothing_to_an_interactive_queue_that_is_not_keeping_up(api, embedded_broker):  # noqa: F811
    from extraction.tasks import episodes_sweep

    said = [{"role": "user", "content": "I sail a small boat on the lake every weekend."}]
    assert api.post("users/alice/messages", {"thread_id": "t1", "messages": said}).status_code == 202
    assert api.post("users/alice/threads/t1/close", {"outcome": "success"}).status_code == 202
    Thread.objects.update(extract_due_at=None)  # extracted: the closed thread waits for its episode
    assert waiting() == 1  # the close task
    with connection.cursor() as cursor:  # ... sent a minute ago, and still not taken
        cursor.execute("UPDATE broker_message SET published_at = published_at - interval '60 seconds'")
    assert episodes_sweep() == 0 and waiting() == 1
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM broker_message")
    assert episodes_sweep() == 1 and waiting() == 1
