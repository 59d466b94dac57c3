"""Fixtures for extraction: a real fake-OpenAI HTTP server, settings for fast retries, and helpers
that drive the pipeline in-process the way the worker does (the multi-process tests use a real worker)."""

from __future__ import annotations

import pytest

from extraction import llm, pipeline
from memory_admin import celery as celery_module
from memory_admin.models import ExtractionBatch
from tests.fake_openai import FakeOpenAI


@pytest.fixture(scope="session")
def fake_server():
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture
def fast_retries(settings):
    settings.EXTRACTION_BACKOFF_SECONDS = 0
    settings.EXTRACTION_BACKOFF_MAX_SECONDS = 0
    settings.EXTRACTION_MAX_ATTEMPTS = 3
    settings.EXTRACTION_REDISPATCH_SECONDS = 0


@pytest.fixture
def fake_llm(fake_server, settings, fast_retries):
    """The OpenAI extractor, pointed at the fake server (1 s timeout)."""
    fake_server.reset()
    settings.OPENAI_API_KEY = "sk-test-not-a-real-key"
    settings.OPENAI_BASE_URL = fake_server.base_url
    settings.OPENAI_TIMEOUT_SECONDS = 1.0
    llm.client.cache_clear()
    yield fake_server
    llm.client.cache_clear()


@pytest.fixture
def offline(settings, fast_retries):
    settings.OPENAI_API_KEY = ""
    llm.client.cache_clear()


@pytest.fixture
def dispatched(monkeypatch):
    """In-process tests never touch the broker: dispatches are recorded instead."""
    sent: list[tuple] = []
    monkeypatch.setattr(celery_module, "dispatch", lambda task, *args: sent.append((task, *args)))
    return sent


def drain(*, now=None, rounds: int = 10) -> list[pipeline.BatchOutcome]:
    """What the sweeper and workers do, in-process, until nothing is left to run."""
    results = []
    for _ in range(rounds):
        ids = pipeline.plan_due_threads(now=now) + pipeline.recover_batches(now=now)
        ids += list(ExtractionBatch.objects.filter(status="pending").exclude(pk__in=ids).values_list("pk", flat=True))
        if not ids:
            break
        for batch_id in dict.fromkeys(ids):
            result = pipeline.run_batch(batch_id)
            if result.status != "not_claimed":
                results.append(result)
    return results
