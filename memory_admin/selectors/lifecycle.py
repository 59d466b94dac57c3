"""The daily GC's rules (SPEC §7), each written once as a queryset over scoring.py's SQL forms: the GC
(services.lifecycle) changes what they select, its dry run and the lifecycle page report it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import FloatField, Q, QuerySet
from django.db.models.expressions import RawSQL

from memory_admin.models import Fact
from memory_admin.scoring import annotate_scores, effective_confidence_sql, last_access_expression

SOFT_TTL_UNREAD_DAYS = 30
LOW_CONFIDENCE = 0.3
LOW_CONFIDENCE_DAYS = 60
REPORT_LIMIT = 200


@dataclass(frozen=True)
class GcRule:
    key: str
    reason: str  # the changed fact's status_reason, and the report's words
    new_status: str
    effect: str  # what the lifecycle page says the rule does


GC_RULES = (
    GcRule("hard_ttl", "hard TTL expired", Fact.Status.EVICTED, "evicted"),
    GcRule(
        "soft_ttl_unread",
        f"soft TTL expired and unread for {SOFT_TTL_UNREAD_DAYS} days",
        Fact.Status.EVICTED,
        "evicted",
    ),
    GcRule(
        "low_confidence",
        f"effective confidence below {LOW_CONFIDENCE} for {LOW_CONFIDENCE_DAYS} days",
        Fact.Status.STALE,
        "marked stale",
    ),
)
RULES = {rule.key: rule for rule in GC_RULES}


def gc_rule_querysets(tenant_id: int, now: datetime) -> dict[str, QuerySet[Fact]]:
    """The GC's rules for one tenant, in order, each excluding what an earlier rule already takes
    (the first rule that applies wins), ordered oldest first."""
    live = Fact.objects.filter(tenant_id=tenant_id, status__in=[Fact.Status.ACTIVE, Fact.Status.STALE])
    # A hard TTL is a promise to forget: it applies to pinned facts too.
    hard = Q(hard_expires_at__lte=now)
    soft = Q(soft_expires_at__lte=now, pinned=False) & Q(last_read__lte=now - timedelta(days=SOFT_TTL_UNREAD_DAYS))
    # "Below 0.3 for 60 days": effective confidence only falls between reads, so it has been below
    # the line for 60 days exactly when it was already below it 60 days ago and nothing read it since.
    cutoff = now - timedelta(days=LOW_CONFIDENCE_DAYS)
    # The SQL is scoring's constant form; the only value is a bound parameter.
    at_cutoff = RawSQL(effective_confidence_sql(now="%s::timestamptz"), (cutoff,), output_field=FloatField())  # noqa: S611
    annotated = live.annotate(last_read=last_access_expression())
    low = (
        annotate_scores(annotated.active().filter(pinned=False).exclude(hard).exclude(soft))
        .annotate(conf_at_cutoff=at_cutoff)
        .filter(eff_conf__lt=LOW_CONFIDENCE, last_read__lte=cutoff, conf_at_cutoff__lt=LOW_CONFIDENCE)
    )
    rules = {
        "hard_ttl": live.filter(hard),
        "soft_ttl_unread": annotated.filter(soft).exclude(hard),
        "low_confidence": low,
    }
    return {key: qs.select_related("memory_user").order_by("created_at", "pk") for key, qs in rules.items()}


def gc_report_row(fact: Fact, rule: GcRule) -> dict[str, Any]:
    """One fact of a GC report."""
    return {
        "id": str(fact.pk),
        "user_id": fact.memory_user.external_id if fact.memory_user_id else None,
        "content": fact.content[:120],
        "rule": rule.key,
        "reason": rule.reason,
        "new_status": rule.new_status,
        "pinned": fact.pinned,
    }


def gc_report(
    tenant_id: int,
    now: datetime,
    *,
    count_cap: int | None = None,
    dry_run: bool = True,
    candidates: dict[str, list[Fact]] | None = None,
) -> dict[str, Any]:
    """What the GC would do at `now` (or, given the `candidates` it changed, what it did): a count per
    rule (stopping at `count_cap`, listed in `capped`, when one is given) and the first REPORT_LIMIT
    facts. Two queries per rule for a dry run."""
    querysets = gc_rule_querysets(tenant_id, now) if candidates is None else {}
    counts: dict[str, int] = {}
    facts: list[dict[str, Any]] = []
    for rule in GC_RULES:
        if candidates is None:
            qs = querysets[rule.key]
            counts[rule.key] = (qs.order_by()[:count_cap] if count_cap else qs.order_by()).count()
            shown = qs[: REPORT_LIMIT - len(facts)] if counts[rule.key] and len(facts) < REPORT_LIMIT else []
        else:
            counts[rule.key] = len(candidates[rule.key])
            shown = candidates[rule.key][: max(0, REPORT_LIMIT - len(facts))]
        facts.extend(gc_report_row(fact, rule) for fact in shown)
    total = sum(counts.values())
    return {
        "tenant_id": tenant_id,
        "dry_run": dry_run,
        "ran_at": now.isoformat(),
        "counts": counts,
        "capped": [key for key, n in counts.items() if count_cap and n >= count_cap],
        "total": total,
        "rules": {rule.key: rule.reason for rule in GC_RULES},
        "facts": facts,
        "truncated": total > len(facts),
    }
