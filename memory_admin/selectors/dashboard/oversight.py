"""Oversight: PII blocks, the audit log and the lifecycle's dry run."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from memory_admin.models import AuditEvent, MemoryUser, PiiBlock
from memory_admin.selectors.access import Principal, visible
from memory_admin.selectors.lifecycle import gc_report

# --- PII blocks -----------------------------------------------------------------------------------


def _user_and_days(qs: QuerySet, filters: dict[str, str]) -> QuerySet:
    """The `user` (part of its id) and `since`/`until` (whole local days) filters of the PII and audit
    lists. The days are a range on created_at itself: `created_at__date` casts every row and cannot use
    the index."""
    if filters.get("user"):
        qs = qs.filter(memory_user__external_id__icontains=filters["user"])
    if filters.get("since"):
        qs = qs.filter(created_at__gte=_day_start(filters["since"]))
    if filters.get("until"):
        qs = qs.filter(created_at__lt=_day_start(filters["until"]) + timedelta(days=1))
    return qs


def pii_blocks(principal: Principal, filters: dict[str, str]) -> QuerySet[PiiBlock]:
    qs = visible(principal, PiiBlock.objects.all())
    if filters.get("kind"):
        qs = qs.filter(kinds__contains=[filters["kind"]])
    if filters.get("route"):
        qs = qs.filter(route=filters["route"])
    if filters.get("action"):
        qs = qs.filter(action=filters["action"])
    if filters.get("agent"):
        qs = qs.filter(Q(agent__name__icontains=filters["agent"]) | Q(actor__icontains=filters["agent"]))
    qs = _user_and_days(qs, filters)
    repeats = (
        PiiBlock.objects.filter(tenant_id=OuterRef("tenant_id"), fingerprint=OuterRef("fingerprint"))
        .order_by()
        .values("fingerprint")
        .annotate(n=Count("id"))
        .values("n")
    )
    return (
        qs.annotate(repeat_count=Subquery(repeats)).select_related("agent", "memory_user").order_by("-created_at", "pk")
    )


# --- Audit log ------------------------------------------------------------------------------------


def audit_events(principal: Principal, filters: dict[str, str], memory_user: MemoryUser | None = None):
    qs = visible(principal, AuditEvent.objects.all())
    if memory_user is not None:
        qs = qs.filter(memory_user=memory_user)
    for name in ("actor", "action"):
        if filters.get(name):
            qs = qs.filter(**{f"{name}__icontains": filters[name]})
    if filters.get("outcome"):
        # Exact, so the (tenant, outcome, -created_at) index serves it.
        qs = qs.filter(outcome=filters["outcome"])
    if filters.get("actor_type"):
        qs = qs.filter(actor_type=filters["actor_type"])
    if filters.get("target"):
        qs = qs.filter(Q(target_id__startswith=filters["target"]) | Q(target_type=filters["target"]))
    qs = _user_and_days(qs, filters)
    # Read off the (tenant, -created_at) index; "-pk" only orders ties (an incremental sort of a
    # few rows), so no event is skipped or shown twice between pages.
    return qs.select_related("memory_user").order_by("-created_at", "-pk")


def _day_start(day: str) -> datetime:
    return timezone.make_aware(datetime.combine(date.fromisoformat(day), time.min))


# --- Lifecycle: the GC's dry run, bounded -----------------------------------------------------------

# At 1M facts most old unread facts have faded: ~800,000 candidates. The page counts each rule up to
# GC_COUNT_CAP (shown as "10000+") and lists the first few candidates.
GC_COUNT_CAP = 10_000


def gc_preview(principal: Principal) -> dict[str, Any]:
    """What the daily GC would do now: its dry-run report, with each rule's count bounded by GC_COUNT_CAP
    (`capped` names the rules that reached it). 2 queries per rule."""
    now = timezone.now()
    # The report carries its time as ISO text (it is also a task's JSON result); the page shows `now`.
    return {**gc_report(principal.tenant_id, now, count_cap=GC_COUNT_CAP), "ran_at": now}
