"""Lifecycle jobs (SPEC §7): the daily GC and the contradiction scan, run on beat (the Celery tasks in
`extraction.tasks`) or started by a person from the dashboard.

Every change is audited as the system (`Principal.system(tenant_id, "lifecycle")`). Nothing is
deleted: eviction and staleness are status changes, reversible by a curator. A run started from the
dashboard checks the role first and adds one audit event naming who started it, so the audit log
answers "why did 40 facts get evicted at 14:02". The GC's rules live in `selectors.lifecycle`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from pgvector.django import CosineDistance

from memory_admin.models import Contradiction, Edge, Fact, RelationEnd, Tenant
from memory_admin.selectors.access import ADMIN, CURATE, READ, Principal
from memory_admin.selectors.lifecycle import GC_RULES, gc_report, gc_rule_querysets
from memory_admin.services.audit import audit, audit_fact, fact_snapshot
from memory_admin.services.entities import relations_end
from memory_admin.services.facts import (
    close_contradictions_of,
    contradiction_record,
    contradiction_winner,
    link,
    refresh_contested,
    supersede,
)
from memory_admin.services.judge import Verdict, judge
from memory_admin.services.settings import tenant_settings

SCAN_NEIGHBOURS = 5
SCAN_COUNTS = ("checked", "queued", "auto_resolved")


# --- The daily GC -----------------------------------------------------------------------------------


def lifecycle_gc(*, tenant_id: int, dry_run: bool) -> dict[str, Any]:
    """The daily GC of SPEC §7 for one tenant. With dry_run nothing changes and the report says what
    would; the dashboard shows this report."""
    now = timezone.now()
    if dry_run:
        return gc_report(tenant_id, now)
    principal = Principal.system(tenant_id, actor="lifecycle")
    with transaction.atomic():
        candidates = {key: list(qs) for key, qs in gc_rule_querysets(tenant_id, now).items()}
        for rule in GC_RULES:
            for fact in candidates[rule.key]:
                _apply_rule(principal, fact, rule.new_status, rule.reason, now)
            # The rule's key is the relation's closing reason (RelationEnd holds the same names).
            relations_end(fact_ids=[f.pk for f in candidates[rule.key]], reason=RelationEnd(rule.key))
    return gc_report(tenant_id, now, dry_run=False, candidates=candidates)


def _apply_rule(principal: Principal, fact: Fact, status: str, reason: str, now: datetime) -> None:
    before = fact_snapshot(fact)
    evicted = status == Fact.Status.EVICTED
    Fact.objects.filter(pk=fact.pk).update(
        status=status, status_reason=reason, updated_at=now, **({"pinned": False} if evicted else {})
    )
    fact.status = status
    if evicted:
        close_contradictions_of(principal, fact, note=f"evicted: {reason}")
    audit_fact(principal, "fact.lifecycle", fact, outcome=status, before=before, reason=reason)


def lifecycle_gc_all(*, dry_run: bool = False) -> dict[str, int]:
    totals: dict[str, int] = {rule.key: 0 for rule in GC_RULES}
    for tenant_id in Tenant.objects.values_list("pk", flat=True):
        report = lifecycle_gc(tenant_id=tenant_id, dry_run=dry_run)
        for rule, n in report["counts"].items():
            totals[rule] += n
    return totals


def lifecycle_gc_preview(*, principal: Principal) -> dict[str, Any]:
    """What the daily GC would do now for the principal's tenant; changes nothing."""
    principal.require(READ)
    return lifecycle_gc(tenant_id=principal.tenant_id, dry_run=True)


def lifecycle_gc_run(*, principal: Principal) -> dict[str, Any]:
    """Run the daily GC now (admins only); returns the report of what it changed."""
    principal.require(ADMIN)
    report = lifecycle_gc(tenant_id=principal.tenant_id, dry_run=False)
    audit(
        principal,
        "lifecycle.gc",
        outcome="ran",
        target_type="tenant",
        target_id=str(principal.tenant_id),
        after={"counts": report["counts"], "total": report["total"]},
        reason="GC started from the dashboard",
    )
    return report


# --- The contradiction scan -------------------------------------------------------------------------


def contradiction_scan(*, tenant_id: int, since: datetime | None = None) -> dict[str, Any]:
    """Find contradictions among active facts that the write path did not catch (facts merged or
    edited later, a changed judge, old data). Facts changed since `since` (all when None) are compared
    with their semantic neighbours; pairs that already have a Contradiction (any status: a dismissed
    pair stays dismissed) are skipped. Resolution is the write path's (`contradiction_winner`): a
    confidence gap of at least the tenant's auto_resolve_gap, or a pinned side, settles the pair;
    otherwise it is queued."""
    tenant = tenant_settings(tenant_id)
    principal = Principal.system(tenant_id, actor="contradiction-scan")
    active = Fact.objects.active().filter(tenant_id=tenant_id, memory_user__isnull=False, embedding__isnull=False)
    subjects = active if since is None else active.filter(updated_at__gte=since)
    report: dict[str, Any] = {"tenant_id": tenant_id, **dict.fromkeys(SCAN_COUNTS, 0)}
    for fact in subjects.select_related("memory_user").order_by("created_at"):
        report["checked"] += 1
        neighbours = (
            active.for_user(fact.memory_user_id)
            .filter(task_ref=fact.task_ref)
            .exclude(pk=fact.pk)
            .annotate(distance=CosineDistance("embedding", fact.embedding))
            .filter(distance__lte=1 - tenant.contradiction_similarity)
            .order_by("distance")[:SCAN_NEIGHBOURS]
        )
        for other in neighbours:
            outcome = _compare(principal, tenant.auto_resolve_gap, fact, other)
            if outcome:
                report[outcome] += 1
            if outcome == "auto_resolved":
                break  # one of the two is no longer active
    return report


def _compare(principal: Principal, gap: float, fact: Fact, other: Fact) -> str | None:
    """Judge one pair the scan has not seen yet; what was done with it (None: nothing to do)."""
    known = Contradiction.objects.filter(Q(fact_a=fact, fact_b=other) | Q(fact_a=other, fact_b=fact))
    if known.exists():
        return None
    verdict = judge(other.content, fact.content, tenant_id=principal.tenant_id)
    if not verdict.contradictory:
        return None
    return _record_contradiction(
        principal, gap, standing=other, challenger=fact, similarity=1 - other.distance, verdict=verdict
    )


def _record_contradiction(
    principal: Principal, gap: float, *, standing: Fact, challenger: Fact, similarity: float, verdict: Verdict
) -> str:
    with transaction.atomic():
        a = Fact.objects.select_for_update().get(pk=standing.pk)
        b = Fact.objects.select_for_update().get(pk=challenger.pk)
        if a.status != Fact.Status.ACTIVE or b.status != Fact.Status.ACTIVE:
            return "checked"
        winner = contradiction_winner(standing=a, challenger=b, gap=gap)
        contradiction = contradiction_record(
            principal,
            fact_a=a,
            fact_b=b,
            detector=Contradiction.Detector.SCAN,
            verdict=verdict,
            similarity=similarity,
            winner=winner,
            resolved_by=principal.actor,
        )
        link(principal, Edge.Type.CONTRADICTS, b, a)
        before = {"a": fact_snapshot(a), "b": fact_snapshot(b)}
        if winner is not None:
            loser = a if winner is b else b
            supersede(loser, by=winner, reason=f"contradiction scan: a surer fact disagrees ({verdict.reason})")
            refresh_contested([a.pk, b.pk])
        else:
            Fact.objects.filter(pk__in=[a.pk, b.pk]).update(contested=True)
        audit(
            principal,
            "contradiction.scan",
            outcome="auto_resolved" if winner else "queued_for_review",
            target=contradiction,
            memory_user_id=a.memory_user_id,
            before=before,
            reason=verdict.reason,
        )
    return "auto_resolved" if winner else "queued"


def contradiction_scan_all(*, window_hours: float = 2) -> dict[str, int]:
    """Hourly: facts changed in the last `window_hours` (overlapping runs are harmless: known pairs
    are skipped)."""
    since = timezone.now() - timedelta(hours=window_hours)
    totals = dict.fromkeys(SCAN_COUNTS, 0)
    for tenant_id in Tenant.objects.values_list("pk", flat=True):
        report = contradiction_scan(tenant_id=tenant_id, since=since)
        for name in totals:
            totals[name] += report[name]
    return totals


def contradiction_scan_run(*, principal: Principal, since: datetime | None) -> dict[str, Any]:
    """Run the contradiction scan now over facts changed since `since` (all when None); curators only."""
    principal.require(CURATE)
    report = contradiction_scan(tenant_id=principal.tenant_id, since=since)
    audit(
        principal,
        "lifecycle.contradiction_scan",
        outcome="ran",
        target_type="tenant",
        target_id=str(principal.tenant_id),
        after={**{k: report[k] for k in SCAN_COUNTS}, "since": since.isoformat() if since else None},
        reason="contradiction scan started from the dashboard",
    )
    return report
