"""Deferred access counts: reads accumulate in process and one statement writes them."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory_admin.models import Fact, MemoryUser
from memory_admin.services import access_counts


def _facts(tenant, n):
    user = MemoryUser.objects.create(tenant=tenant, external_id="acc")
    return [
        Fact.objects.create(
            tenant=tenant,
            memory_user=user,
            scope="user",
            content=f"fact {i}",
            content_hash=f"h{i}",
            confidence=0.9,
            source="user_stated",
            valid_from=timezone.now(),
        )
        for i in range(n)
    ]


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


def test_usage_counts_are_one_upsert_per_flush(tenant, other_tenant, settings, monkeypatch):
    from memory_admin.models import UsageDay

    settings.ACCESS_COUNT_FLUSH_SECONDS = 1.0
    monkeypatch.setattr(access_counts, "_ensure_flusher", lambda: None)
    with CaptureQueriesContext(connection) as reads:
        for kind in ("search", "search", "context", "fact"):
            access_counts.record_usage(tenant.pk, kind)
        access_counts.record_usage(other_tenant.pk, "search")
    assert reads.captured_queries == []
    with CaptureQueriesContext(connection) as ctx:
        assert access_counts.flush() == 0  # no fact read, only requests
    assert len([q for q in ctx.captured_queries if q["sql"].startswith("INSERT")]) == 1
    access_counts.record_usage(tenant.pk, "search")
    access_counts.flush()  # adds to the day's row
    counts = dict(UsageDay.objects.filter(tenant=tenant).values_list("kind", "count"))
    assert counts == {"search": 3, "context": 1, "fact": 1}
    assert UsageDay.objects.get(tenant=other_tenant).count == 1


def test_usage_of_a_deleted_tenant_does_not_block_the_flush(tenant, settings, monkeypatch):
    from memory_admin.models import Tenant

    settings.ACCESS_COUNT_FLUSH_SECONDS = 1.0
    monkeypatch.setattr(access_counts, "_ensure_flusher", lambda: None)
    (a,) = _facts(tenant, 1)
    gone = Tenant.objects.create(slug="gone", name="gone")
    access_counts.record_usage(gone.pk, "search")
    gone.delete()
    access_counts.record_access([a.pk])
    assert access_counts.flush() == 1
    assert Fact.objects.get(pk=a.pk).access_count == 1
    assert access_counts._usage == {}
