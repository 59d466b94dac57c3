"""Lifecycle jobs (SPEC §7): GC with a dry run, the periodic contradiction scan, broker housekeeping."""

from __future__ import annotations

from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone

from memory_admin.embedding import embed_one
from memory_admin.models import AuditEvent, Contradiction, Fact, MemoryUser
from memory_admin.services import lifecycle
from memory_admin.services.facts import content_hash

DAY = timedelta(days=1)


def make_fact(user, content, *, age_days=0, read_days_ago=None, **fields):
    now = timezone.now()
    fact = Fact.objects.create(
        tenant=user.tenant,
        memory_user=user,
        content=content,
        content_hash=content_hash(content),
        confidence=fields.pop("confidence", 0.9),
        source="user_stated",
        valid_from=now - age_days * DAY,
        embedding=embed_one(content),
        **fields,
    )
    # created_at is auto_now_add: backdate it like time passing would.
    Fact.objects.filter(pk=fact.pk).update(
        created_at=now - age_days * DAY, last_accessed_at=None if read_days_ago is None else now - read_days_ago * DAY
    )
    fact.refresh_from_db()
    return fact


def test_gc_dry_run_reports_and_changes_nothing_then_the_real_run_applies_and_audits(tenant):
    user = MemoryUser.objects.create(tenant=tenant, external_id="alice")
    now = timezone.now()
    hard = make_fact(user, "The user is at the Lisbon offsite this week", hard_expires_at=now - DAY, pinned=True)
    soft = make_fact(
        user, "The user is trying out Zed as an editor", age_days=90, read_days_ago=45, soft_expires_at=now - 10 * DAY
    )
    soft_but_read = make_fact(
        user, "The user is evaluating Linear", age_days=90, read_days_ago=3, soft_expires_at=now - 10 * DAY
    )
    faded = make_fact(user, "The user might like jazz", kind="inference", confidence=0.75, age_days=200)
    recently_faded = make_fact(
        user, "The user might enjoy hiking", kind="inference", confidence=0.75, age_days=200, read_days_ago=50
    )
    fresh = make_fact(user, "The user prefers vim")

    report = lifecycle.lifecycle_gc(tenant_id=tenant.pk, dry_run=True)
    assert report["dry_run"] is True
    assert report["counts"] == {"hard_ttl": 1, "soft_ttl_unread": 1, "low_confidence": 1}
    by_id = {f["id"]: f for f in report["facts"]}
    assert by_id[str(hard.pk)]["new_status"] == "evicted" and by_id[str(faded.pk)]["new_status"] == "stale"
    assert str(soft.pk) in by_id
    for untouched in (soft_but_read, recently_faded, fresh):
        assert str(untouched.pk) not in by_id
    assert set(Fact.objects.values_list("status", flat=True)) == {"active"}
    assert not AuditEvent.objects.filter(action="fact.lifecycle").exists()

    applied = lifecycle.lifecycle_gc(tenant_id=tenant.pk, dry_run=False)
    assert applied["counts"] == report["counts"]
    statuses = dict(Fact.objects.values_list("pk", "status"))
    assert statuses[hard.pk] == "evicted" and statuses[soft.pk] == "evicted" and statuses[faded.pk] == "stale"
    assert statuses[fresh.pk] == statuses[soft_but_read.pk] == statuses[recently_faded.pk] == "active"
    events = AuditEvent.objects.filter(action="fact.lifecycle")
    assert events.count() == 3 and set(events.values_list("actor", flat=True)) == {"lifecycle"}
    # Idempotent: nothing left to do.
    assert lifecycle.lifecycle_gc(tenant_id=tenant.pk, dry_run=False)["total"] == 0


def test_gc_is_per_tenant(tenant, other_tenant):
    user = MemoryUser.objects.create(tenant=other_tenant, external_id="bob")
    make_fact(user, "The user is at the Lisbon offsite this week", hard_expires_at=timezone.now() - DAY)
    assert lifecycle.lifecycle_gc(tenant_id=tenant.pk, dry_run=False)["total"] == 0
    assert Fact.objects.get().status == "active"


def test_the_scan_queues_contradictions_the_write_path_missed_once(tenant):
    user = MemoryUser.objects.create(tenant=tenant, external_id="alice")
    # Written around the write path (e.g. imported), so nobody compared them yet.
    a = make_fact(user, "The user lives in Berlin", confidence=0.8)
    b = make_fact(user, "The user lives in Munich", confidence=0.85)
    unrelated = make_fact(user, "The user prefers vim")
    report = lifecycle.contradiction_scan(tenant_id=tenant.pk)
    assert report["queued"] == 1 and report["auto_resolved"] == 0
    item = Contradiction.objects.get()
    assert item.detector == "scan" and item.status == "open" and {item.fact_a_id, item.fact_b_id} == {a.pk, b.pk}
    assert set(Fact.objects.filter(contested=True).values_list("pk", flat=True)) == {a.pk, b.pk}
    assert not Fact.objects.get(pk=unrelated.pk).contested
    assert AuditEvent.objects.filter(action="contradiction.scan", outcome="queued_for_review").count() == 1
    # A second run (or a dismissed pair) is not queued again.
    assert lifecycle.contradiction_scan(tenant_id=tenant.pk)["queued"] == 0
    assert Contradiction.objects.count() == 1


def test_the_scan_auto_resolves_a_large_confidence_gap(tenant):
    user = MemoryUser.objects.create(tenant=tenant, external_id="alice")
    weak = make_fact(user, "The user lives in Berlin", confidence=0.7)
    strong = make_fact(user, "The user lives in Munich", confidence=1.0)
    assert lifecycle.contradiction_scan(tenant_id=tenant.pk)["auto_resolved"] == 1
    weak.refresh_from_db()
    assert weak.status == "superseded" and weak.superseded_by_id == strong.pk
    assert Contradiction.objects.get().status == "auto_resolved"


def test_the_retry_command_retries_failed_batches(tenant, capsys, monkeypatch):
    from memory_admin import celery as celery_module
    from memory_admin.models import ExtractionBatch, Thread

    monkeypatch.setattr(celery_module, "dispatch", lambda *a: None)
    user = MemoryUser.objects.create(tenant=tenant, external_id="alice")
    thread = Thread.objects.create(tenant=tenant, memory_user=user, external_id="t")
    batch = ExtractionBatch.objects.create(
        tenant=tenant,
        memory_user=user,
        thread=thread,
        status="failed",
        error="the model server failed (500)",
        attempts=3,
    )
    call_command("extraction_retry", "--tenant", tenant.slug, "--all-failed")
    batch.refresh_from_db()
    assert batch.status == "pending" and batch.attempts == 0 and "500" in batch.error
    assert "1 batch" in capsys.readouterr().out
