"""Lifecycle jobs on beat (SPEC §7): the daily GC, the contradiction scan, broker housekeeping.

Every change is audited as the system (`Principal.system(tenant_id, "lifecycle")`). Nothing is
deleted: eviction and staleness are status changes, reversible by a curator.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from pgvector.django import CosineDistance

from memory_admin import scoring
from memory_admin.models import Contradiction, Edge, Fact, Tenant
from memory_admin.selectors.access import Principal
from memory_admin.services.audit import audit, fact_snapshot
from memory_admin.services.facts import _close_contradictions_of, _supersede, refresh_contested
from memory_admin.services.judge import judge
from memory_admin.services.settings import tenant_settings

log = logging.getLogger(__name__)

SOFT_TTL_UNREAD_DAYS = 30
LOW_CONFIDENCE = 0.3
LOW_CONFIDENCE_DAYS = 60
REPORT_LIMIT = 200
SCAN_NEIGHBOURS = 5

RULES = {
    "hard_ttl": "hard TTL expired",
    "soft_ttl_unread": f"soft TTL expired and unread for {SOFT_TTL_UNREAD_DAYS} days",
    "low_confidence": f"effective confidence below {LOW_CONFIDENCE} for {LOW_CONFIDENCE_DAYS} days",
}


def _gc_candidates(tenant_id: int, now: datetime) -> list[tuple[Fact, str, str]]:
    """(fact, rule, new status) for every fact the GC would change, first rule that applies wins."""
    live = Fact.objects.filter(tenant_id=tenant_id, status__in=[Fact.Status.ACTIVE, Fact.Status.STALE])
    out: list[tuple[Fact, str, str]] = []
    seen: set = set()
    # A hard TTL is a promise to forget: it applies to pinned facts too.
    for fact in live.filter(hard_expires_at__lte=now).select_related("memory_user"):
        out.append((fact, "hard_ttl", Fact.Status.EVICTED))
        seen.add(fact.pk)
    last_read = Coalesce("last_accessed_at", "created_at")
    soft = (live.filter(soft_expires_at__lte=now, pinned=False)
            .annotate(last_read=last_read).filter(last_read__lte=now - timedelta(days=SOFT_TTL_UNREAD_DAYS))
            .exclude(pk__in=seen).select_related("memory_user"))
    for fact in soft:
        out.append((fact, "soft_ttl_unread", Fact.Status.EVICTED))
        seen.add(fact.pk)
    # "Below 0.3 for 60 days": effective confidence only falls between reads, so it has been below
    # the line for 60 days exactly when it was already below it 60 days ago and nothing read it since.
    cutoff = now - timedelta(days=LOW_CONFIDENCE_DAYS)
    low = (scoring.annotate_scores(live.filter(status=Fact.Status.ACTIVE, pinned=False))
           .annotate(last_read=last_read)
           .filter(eff_conf__lt=LOW_CONFIDENCE, last_read__lte=cutoff)
           .exclude(pk__in=seen).select_related("memory_user"))
    for fact in low:
        if scoring.effective_confidence(fact, now=cutoff) < LOW_CONFIDENCE:
            out.append((fact, "low_confidence", Fact.Status.STALE))
    return out


def lifecycle_gc(*, tenant_id: int, dry_run: bool) -> dict[str, Any]:
    """The daily GC of SPEC §7 for one tenant. With dry_run nothing changes and the report says what
    would; the dashboard shows exactly this dict."""
    now = timezone.now()
    principal = Principal.system(tenant_id, actor="lifecycle")
    with transaction.atomic():
        candidates = _gc_candidates(tenant_id, now)
        if not dry_run:
            for fact, rule, status in candidates:
                before = fact_snapshot(fact)
                Fact.objects.filter(pk=fact.pk).update(status=status, status_reason=RULES[rule],
                                                       updated_at=now, **({"pinned": False}
                                                                          if status == Fact.Status.EVICTED else {}))
                fact.status = status
                if status == Fact.Status.EVICTED:
                    _close_contradictions_of(principal, fact, note=f"evicted: {RULES[rule]}")
                audit(principal, "fact.lifecycle", outcome=status, target=fact, before=before,
                      after=fact_snapshot(fact), reason=RULES[rule])
    counts = {rule: sum(1 for _, r, _ in candidates if r == rule) for rule in RULES}
    return {
        "tenant_id": tenant_id,
        "dry_run": dry_run,
        "ran_at": now.isoformat(),
        "counts": counts,
        "total": len(candidates),
        "rules": RULES,
        "facts": [
            {"id": str(f.pk), "user_id": f.memory_user.external_id if f.memory_user_id else None,
             "content": f.content[:120], "rule": rule, "reason": RULES[rule], "new_status": status,
             "pinned": f.pinned}
            for f, rule, status in candidates[:REPORT_LIMIT]
        ],
        "truncated": len(candidates) > REPORT_LIMIT,
    }


def lifecycle_gc_all(*, dry_run: bool = False) -> dict[str, Any]:
    totals: dict[str, int] = {rule: 0 for rule in RULES}
    for tenant_id in Tenant.objects.values_list("pk", flat=True):
        report = lifecycle_gc(tenant_id=tenant_id, dry_run=dry_run)
        for rule, n in report["counts"].items():
            totals[rule] += n
    return totals


def contradiction_scan(*, tenant_id: int, since: datetime | None = None) -> dict[str, Any]:
    """Find contradictions among active facts that the write path did not catch (facts merged or
    edited later, a changed judge, old data). Facts changed since `since` (all when None) are compared
    with their semantic neighbours; pairs that already have a Contradiction (any status: a dismissed
    pair stays dismissed) are skipped. Resolution follows the write path: a confidence gap of at
    least the tenant's auto_resolve_gap supersedes the weaker fact, otherwise the pair is queued."""
    tenant = tenant_settings(tenant_id)
    principal = Principal.system(tenant_id, actor="contradiction-scan")
    active = Fact.objects.filter(tenant_id=tenant_id, status=Fact.Status.ACTIVE, memory_user__isnull=False,
                                 embedding__isnull=False)
    subjects = active if since is None else active.filter(updated_at__gte=since)
    report = {"tenant_id": tenant_id, "checked": 0, "queued": 0, "auto_resolved": 0}
    for fact in subjects.select_related("memory_user").order_by("created_at"):
        report["checked"] += 1
        neighbours = (active.filter(memory_user_id=fact.memory_user_id, task_ref=fact.task_ref)
                      .exclude(pk=fact.pk)
                      .annotate(distance=CosineDistance("embedding", fact.embedding))
                      .filter(distance__lte=1 - tenant.contradiction_similarity)
                      .order_by("distance")[:SCAN_NEIGHBOURS])
        for other in neighbours:
            known = Contradiction.objects.filter(Q(fact_a=fact, fact_b=other) | Q(fact_a=other, fact_b=fact))
            if known.exists():
                continue
            verdict = judge(other.content, fact.content, tenant_id=tenant_id)
            if not verdict.contradictory:
                continue
            outcome = _record_contradiction(principal, tenant.auto_resolve_gap, older=other, newer=fact,
                                            similarity=1 - other.distance, verdict=verdict)
            report[outcome] += 1
            if outcome == "auto_resolved":
                break  # one of the two is no longer active
    return report


def _record_contradiction(principal: Principal, gap: float, *, older: Fact, newer: Fact, similarity: float,
                          verdict) -> str:
    with transaction.atomic():
        a = Fact.objects.select_for_update().get(pk=older.pk)
        b = Fact.objects.select_for_update().get(pk=newer.pk)
        if a.status != Fact.Status.ACTIVE or b.status != Fact.Status.ACTIVE:
            return "checked"
        winner, loser = (b, a) if b.confidence >= a.confidence else (a, b)
        auto = winner.confidence - loser.confidence >= gap and not loser.pinned
        contradiction = Contradiction.objects.create(
            tenant_id=principal.tenant_id, memory_user_id=a.memory_user_id, fact_a=a, fact_b=b,
            detector=Contradiction.Detector.SCAN, judge=verdict.judge, reason=verdict.reason,
            similarity=similarity,
            **({"status": Contradiction.Status.AUTO_RESOLVED,
                "resolution": Contradiction.Resolution.KEEP_B if winner is b else Contradiction.Resolution.KEEP_A,
                "resolved_by": principal.actor, "resolved_at": timezone.now()} if auto else {}),
        )
        Edge.objects.create(tenant_id=principal.tenant_id, type=Edge.Type.CONTRADICTS, src_fact=b, dst_fact=a,
                            created_by=principal.actor)
        before = {"a": fact_snapshot(a), "b": fact_snapshot(b)}
        if auto:
            _supersede(loser, by=winner, reason=f"contradiction scan: a surer fact disagrees ({verdict.reason})")
            refresh_contested([a.pk, b.pk])
        else:
            Fact.objects.filter(pk__in=[a.pk, b.pk]).update(contested=True)
        audit(principal, "contradiction.scan", outcome="auto_resolved" if auto else "queued_for_review",
              target=contradiction, memory_user_id=a.memory_user_id, before=before, reason=verdict.reason)
    return "auto_resolved" if auto else "queued"


def contradiction_scan_all(*, window_hours: float = 2) -> dict[str, int]:
    """Hourly: facts changed in the last `window_hours` (overlapping runs are harmless: known pairs
    are skipped)."""
    since = timezone.now() - timedelta(hours=window_hours)
    totals = {"checked": 0, "queued": 0, "auto_resolved": 0}
    for tenant_id in Tenant.objects.values_list("pk", flat=True):
        report = contradiction_scan(tenant_id=tenant_id, since=since)
        for name in totals:
            totals[name] += report[name]
    return totals


def broker_cleanup() -> int:
    """The embedded broker keeps every delivered message as an invisible row (kombu never deletes
    them); with a sweep every 2 s that is ~43,000 rows a day. Invisible rows are dead: kombu never
    makes a row visible again (an unacked message is restored as a new row). Delete them.
    A no-op with Redis or RabbitMQ."""
    from django.conf import settings

    if not settings.CELERY_BROKER_URL.startswith(("sqla+", "sqlalchemy+")):
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('kombu_message') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return 0
        cursor.execute("DELETE FROM kombu_message WHERE visible = false")
        return cursor.rowcount


__all__ = ["broker_cleanup", "contradiction_scan", "contradiction_scan_all", "lifecycle_gc", "lifecycle_gc_all"]
