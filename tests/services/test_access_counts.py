"""Deferred access counts: reads accumulate in process and one statement writes them."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory_admin.models import Fact, MemoryUser
from memory_admin.services import access_counts


def _facts(tenant, n):
    user = MemoryUser.objects.create(tenant=tenant, external_id="acc")
    return [Fact.objects.create(tenant=tenant, memory_user=user, scope="user", content=f"fact {i}",
                                content_hash=f"h{i}", confidence=0.9, source="user_stated",
                                valid_from=timezone.now()) for i in range(n)]


def test_deferred_reads_are_written_by_one_statement_per_flush(tenant, settings, monkeypatch):
    settings.ACCESS_COUNT_FLUSH_SECONDS = 1.0
    monkeypatch.setattr(access_counts, "_ensure_flusher", lambda: None)  # the test flushes by itself
    a, b, c = _facts(tenant, 3)
    with CaptureQueriesContext(connection) as reads:
        access_counts.record_access([a.pk, b.pk])
        access_counts.record_access([a.pk])
    assert reads.captured_queries == []  # nothing written on the request path
    assert Fact.objects.get(pk=a.pk).access_count == 0
    with CaptureQueriesContext(connection) as ctx:
        assert access_counts.flush() == 2
    assert len([q for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]) == 1
    counts = dict(Fact.objects.filter(pk__in=[a.pk, b.pk, c.pk]).values_list("pk", "access_count"))
    assert counts == {a.pk: 2, b.pk: 1, c.pk: 0}
    assert Fact.objects.get(pk=a.pk).last_accessed_at is not None
    assert Fact.objects.get(pk=c.pk).last_accessed_at is None
    assert access_counts.flush() == 0


def test_immediate_when_interval_is_zero(tenant, settings):
    settings.ACCESS_COUNT_FLUSH_SECONDS = 0
    (a,) = _facts(tenant, 1)
    access_counts.record_access([a.pk])
    assert Fact.objects.get(pk=a.pk).access_count == 1
