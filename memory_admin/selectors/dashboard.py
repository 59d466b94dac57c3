"""Reads behind the dashboard pages. Every queryset starts from `visible(principal, ...)`, so the
tenant (and, for members, the memory user) filter is inside the SQL; every list is built to run a
bounded number of queries whatever its length."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, F, FloatField, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce, Floor, Least, TruncDate
from django.utils import timezone

from memory_admin.models import (
    AuditEvent,
    Contradiction,
    Edge,
    ExtractionBatch,
    Fact,
    LlmCall,
    MemoryUser,
    PiiBlock,
)
from memory_admin.scoring import (
    EVICTION_THRESHOLD,
    STALE_THRESHOLD,
    annotate_scores,
    effective_confidence_sql,
    staleness_sql,
)
from memory_admin.selectors.access import Principal, visible

OVERVIEW_DAYS = 14
# Outcomes of the write path, in the order the overview stacks them.
WRITE_OUTCOMES = (
    "created", "updated", "deduplicated", "merged", "superseded_existing", "queued_for_review", "overruled",
    "quarantined", "rejected_low_confidence", "blocked", "redacted", "flagged", "capped",
)


# --- Overview -------------------------------------------------------------------------------------

def _days(n: int) -> list[date]:
    today = timezone.localdate()
    return [today - timedelta(days=i) for i in range(n - 1, -1, -1)]


def _since(n: int) -> datetime:
    return timezone.make_aware(datetime.combine(_days(n)[0], time.min))


def outcome_color(outcome: str) -> int:
    return WRITE_OUTCOMES.index(outcome) if outcome in WRITE_OUTCOMES else len(WRITE_OUTCOMES) - 1


def writes_per_day(principal: Principal, days: int = OVERVIEW_DAYS) -> dict[str, Any]:
    """Write-path outcomes per day from the audit log (every write, including refusals, is audited)."""
    rows = (
        visible(principal, AuditEvent.objects.all())
        .filter(action__endswith=".write", created_at__gte=_since(days))
        .annotate(day=TruncDate("created_at"))
        .values("day", "outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    table: dict[date, dict[str, int]] = {d: {} for d in _days(days)}
    totals: dict[str, int] = {}
    for row in rows:
        table.setdefault(row["day"], {})[row["outcome"]] = row["n"]
        totals[row["outcome"]] = totals.get(row["outcome"], 0) + row["n"]
    total = sum(totals.values())
    deduped = totals.get("deduplicated", 0) + totals.get("merged", 0)
    return {
        "table": table,
        "totals": totals,
        "total": total,
        "dedup_rate": (deduped / total) if total else None,
        "outcomes": [o for o in WRITE_OUTCOMES if o in totals] + sorted(set(totals) - set(WRITE_OUTCOMES)),
    }


def open_contradictions(principal: Principal) -> dict[str, Any]:
    now = timezone.now()
    qs = visible(principal, Contradiction.objects.filter(status=Contradiction.Status.OPEN))
    buckets = qs.aggregate(
        total=Count("id"),
        under_1d=Count("id", filter=Q(created_at__gte=now - timedelta(days=1))),
        d1_7=Count("id", filter=Q(created_at__lt=now - timedelta(days=1), created_at__gte=now - timedelta(days=7))),
        d7_30=Count("id", filter=Q(created_at__lt=now - timedelta(days=7), created_at__gte=now - timedelta(days=30))),
        over_30d=Count("id", filter=Q(created_at__lt=now - timedelta(days=30))),
    )
    oldest = qs.order_by("created_at").values_list("created_at", flat=True).first()
    return {
        "total": buckets.pop("total"),
        "buckets": [("< 1 day", buckets["under_1d"]), ("1–7 days", buckets["d1_7"]),
                    ("7–30 days", buckets["d7_30"]), ("> 30 days", buckets["over_30d"])],
        "oldest": oldest,
    }


# Above this many fact rows (all tenants) the overview's distributions read a sample of the table's
# pages (TABLESAMPLE SYSTEM) instead of scoring every active fact: ~5,000 rows whatever the size
# (ten bins, each within about 1.5 points). Scoring is numeric maths, ~15 µs a row.
SCORE_SAMPLE_ABOVE = 100_000
SCORE_SAMPLE_ROWS = 5_000
SCORE_SAMPLE_MIN = 500


def _table_rows(model) -> float:
    """The planner's row estimate of a table (kept by ANALYZE/autovacuum): free, never a scan."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [model._meta.db_table])
        row = cursor.fetchone()
    return float(row[0]) if row and row[0] and row[0] > 0 else 0.0


def score_distributions(principal: Principal) -> dict[str, Any]:
    """Active facts in ten bins of effective confidence and of staleness (two queries: table size, bins).

    On a big table the bins come from a page sample (about SCORE_SAMPLE_ROWS rows, the same pages all
    day) scaled up to the whole, and `sample_percent` says so; scoring a million facts takes seconds."""
    percent = None
    rows = _table_rows(Fact)
    if not principal.restricted and rows > max(SCORE_SAMPLE_ABOVE, 0):
        percent = round(min(100.0, 100.0 * SCORE_SAMPLE_ROWS / rows), 3)
        sql = (f"SELECT LEAST(FLOOR({effective_confidence_sql()} * 10), 9)::int, "
               f"LEAST(FLOOR({staleness_sql()} * 10), 9)::int, count(*) "
               "FROM memory_admin_fact TABLESAMPLE SYSTEM (%s) REPEATABLE (%s) "
               "WHERE (memory_admin_fact.tenant_id = %s OR memory_admin_fact.scope = 'global') "
               "AND memory_admin_fact.status = 'active' GROUP BY 1, 2")
        with connection.cursor() as cursor:
            cursor.execute(sql, [percent, timezone.localdate().toordinal(), principal.tenant_id])
            binned = cursor.fetchall()
        if sum(n for _, _, n in binned) < SCORE_SAMPLE_MIN:
            percent = None  # a small tenant in a big table: too few sampled rows; score it exactly
    if percent is None:
        qs = annotate_scores(visible(principal, Fact.objects.filter(status=Fact.Status.ACTIVE)))
        qs = qs.annotate(
            cbin=Least(Floor(F("eff_conf") * 10), Value(9), output_field=IntegerField()),
            sbin=Least(Floor(F("stale_score") * 10), Value(9), output_field=IntegerField()),
        )
        binned = list(qs.values_list("cbin", "sbin").annotate(n=Count("id")).order_by())
    scale = 100.0 / percent if percent else 1.0
    conf = [0] * 10
    stale = [0] * 10
    for cbin, sbin, n in binned:
        conf[int(cbin or 0)] += n
        stale[int(sbin or 0)] += n
    conf = [round(n * scale) for n in conf]
    stale = [round(n * scale) for n in stale]
    return {"confidence": conf, "staleness": stale, "active": sum(conf),
            "stale": sum(stale[int(STALE_THRESHOLD * 10):]), "evictable": stale[9],
            "sample_percent": percent}


def pii_per_day(principal: Principal, days: int = OVERVIEW_DAYS) -> dict[date, int]:
    rows = (
        visible(principal, PiiBlock.objects.filter(created_at__gte=_since(days)))
        .annotate(day=TruncDate("created_at")).values("day").annotate(n=Count("id")).order_by()
    )
    out = {d: 0 for d in _days(days)}
    for row in rows:
        out[row["day"]] = row["n"]
    return out


def llm_per_day(principal: Principal, days: int = OVERVIEW_DAYS) -> dict[date, dict[str, Any]]:
    rows = (
        visible(principal, LlmCall.objects.filter(created_at__gte=_since(days)))
        .annotate(day=TruncDate("created_at")).values("day")
        .annotate(calls=Count("id"), tokens=Coalesce(Sum(F("prompt_tokens") + F("completion_tokens")), 0),
                  cost=Coalesce(Sum("cost_usd", output_field=FloatField()), 0.0, output_field=FloatField()),
                  failed=Count("id", filter=Q(ok=False)))
        .order_by()
    )
    out = {d: {"calls": 0, "tokens": 0, "cost": 0.0, "failed": 0} for d in _days(days)}
    for row in rows:
        out[row["day"]] = {k: row[k] for k in ("calls", "tokens", "cost", "failed")}
    return out


def failed_batches(principal: Principal, limit: int = 5) -> tuple[int, list[ExtractionBatch]]:
    qs = visible(principal, ExtractionBatch.objects.filter(status=ExtractionBatch.Status.FAILED))
    return qs.count(), list(qs.select_related("memory_user", "thread").order_by("-created_at")[:limit])


# --- Charts: geometry computed here, drawn by templates (so every label is auto-escaped) -----------

CHART_W, CHART_H, PAD_L, PAD_B = 560, 160, 36, 20


@dataclass
class Bar:
    x: float
    y: float
    w: float
    h: float
    label: str
    value: float
    series: int = 0


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


def bar_chart(labels: list[str], series: list[list[float]], names: list[str] | None = None,
              colors: list[int] | None = None) -> dict[str, Any]:
    """Stacked bars: `series[i][j]` is series i at label j; `colors[i]` picks series i's palette slot so
    that one outcome keeps its colour from day to day and chart to chart."""
    colors = colors or list(range(len(series)))
    n = max(1, len(labels))
    totals = [sum(s[j] for s in series) for j in range(len(labels))]
    top = _nice_max(max(totals, default=0))
    plot_w, plot_h = CHART_W - PAD_L, CHART_H - PAD_B
    slot = plot_w / n
    width = max(2.0, slot * 0.72)
    bars: list[Bar] = []
    for j, label in enumerate(labels):
        base = 0.0
        for i, s in enumerate(series):
            if not s[j]:
                continue
            h = plot_h * s[j] / top
            bars.append(Bar(x=round(PAD_L + j * slot + (slot - width) / 2, 1),
                            y=round(plot_h - base - h, 1), w=round(width, 1), h=round(h, 1),
                            label=f"{label}: {names[i] + ' ' if names else ''}{s[j]:g}", value=s[j], series=colors[i]))
            base += h
    step = max(1, n // 7)
    ticks = [{"x": round(PAD_L + j * slot + slot / 2, 1), "label": labels[j]} for j in range(0, len(labels), step)]
    return {"w": CHART_W, "h": CHART_H, "plot_h": plot_h, "pad_l": PAD_L, "bars": bars, "ticks": ticks,
            "top": f"{top:g}", "mid": f"{top / 2:g}", "mid_y": plot_h / 2,
            "legend": list(zip(names, colors, strict=True)) if names and len(names) > 1 else [],
            "empty": not any(totals)}


# --- Memory users ---------------------------------------------------------------------------------

USER_SORTS = {
    "name": ("external_id",),
    "facts": ("-fact_count", "external_id"),
    "contradictions": ("-open_contradictions", "external_id"),
    "staleness": (F("avg_staleness").desc(nulls_last=True), "external_id"),
    "recent": ("-created_at",),
}


# Ranking by an aggregate over facts (count, mean staleness) reads every fact of every user ranked:
# at 10,000 users × 100 facts that is seconds. Past this many users it ranks the newest ones only
# (the page says so; a search narrows the window to the users it matches).
# Per sort: counting reads an index (~0.1 ms a user); mean staleness reads every fact (~1 ms a user).
USER_RANK_WINDOW = {"facts": 1000, "staleness": 150}


def _with_user_stats(qs: QuerySet[MemoryUser]) -> QuerySet[MemoryUser]:
    facts = Fact.objects.filter(memory_user=OuterRef("pk"), status=Fact.Status.ACTIVE).order_by()
    open_ = Contradiction.objects.filter(memory_user=OuterRef("pk"), status=Contradiction.Status.OPEN).order_by()
    return qs.annotate(
        fact_count=Coalesce(Subquery(facts.values("memory_user").annotate(n=Count("id")).values("n")), 0),
        open_contradictions=Coalesce(Subquery(open_.values("memory_user").annotate(n=Count("id")).values("n")), 0),
        # Raw SQL: the staleness formula is defined once, in scoring.py, over a named table alias.
        avg_staleness=RawSQL(  # noqa: S611 -- constant SQL from scoring.py, no user input
            f"(SELECT avg({staleness_sql('sf')}) FROM memory_admin_fact sf "
            "WHERE sf.memory_user_id = memory_admin_memoryuser.id AND sf.status = 'active')",
            (), output_field=FloatField(),
        ),
    )


def memory_users(principal: Principal, *, q: str = "", sort: str = "facts") -> tuple[QuerySet, dict[str, int] | None]:
    """The ids of the memory users to list, in order (page through these, then read a page's rows
    with `memory_user_rows`), and the ranking window when an aggregate sort was bounded: None, or
    {"ranked": n, "total": m}.

    Paging ids keeps OFFSET cheap: a deep page no longer computes every skipped user's statistics."""
    sort = sort if sort in USER_SORTS else "facts"
    qs = visible(principal, MemoryUser.objects.filter(erased_at__isnull=True))
    if q:
        qs = qs.filter(Q(external_id__icontains=q) | Q(display_name__icontains=q))
    window = None
    if sort in USER_RANK_WINDOW:
        total = qs.count()
        if total > USER_RANK_WINDOW[sort]:
            newest = qs.order_by("-created_at", "-pk").values("pk")[:USER_RANK_WINDOW[sort]]
            qs = qs.filter(pk__in=Subquery(newest))
            window = {"ranked": USER_RANK_WINDOW[sort], "total": total}
    if sort in ("facts", "staleness", "contradictions"):
        qs = _with_user_stats(qs)
    return qs.order_by(*USER_SORTS[sort], "pk").values_list("pk", flat=True), window


def memory_user_rows(principal: Principal, ids: list[int]) -> list[MemoryUser]:
    """One page of memory users with their active-fact count, open contradictions and mean staleness,
    in the order of `ids` (one query, over these rows only)."""
    rows = {u.pk: u for u in _with_user_stats(visible(principal, MemoryUser.objects.filter(pk__in=ids)))}
    return [rows[pk] for pk in ids if pk in rows]


# --- Facts ----------------------------------------------------------------------------------------

def fact_rows(principal: Principal, memory_user: MemoryUser | None, filters: dict[str, str]) -> QuerySet[Fact]:
    """The facts tab: filters by status/category/kind/source/stale/text, with scores computed in SQL."""
    qs = visible(principal, Fact.objects.all())
    if memory_user is not None:
        qs = qs.filter(memory_user=memory_user)
    status = filters.get("status", "active")
    if status and status != "all":
        qs = qs.filter(status=status)
    for name in ("category", "kind", "source"):
        if filters.get(name):
            qs = qs.filter(**{name: filters[name]})
    if filters.get("q"):
        qs = qs.filter(Q(content__icontains=filters["q"]) | Q(key__icontains=filters["q"]))
    qs = annotate_scores(qs)
    if filters.get("stale") == "yes":
        qs = qs.filter(Q(status=Fact.Status.STALE) | Q(stale_score__gt=STALE_THRESHOLD))
    elif filters.get("stale") == "no":
        qs = qs.exclude(status=Fact.Status.STALE).filter(stale_score__lte=STALE_THRESHOLD)
    return qs.select_related("memory_user").order_by("-pinned", "-created_at", "-pk")


def fact_with_scores(principal: Principal, fact_id) -> Fact:
    from memory_admin.selectors.access import get_visible

    return get_visible(
        principal,
        annotate_scores(Fact.objects.select_related("memory_user", "message", "message__thread", "batch",
                                                    "superseded_by_notebook", "agent")),
        pk=fact_id,
    )


def fact_edges(principal: Principal, fact: Fact) -> list[Edge]:
    return list(
        visible(principal, Edge.objects.filter(Q(src_fact=fact) | Q(dst_fact=fact)))
        .select_related("src_fact", "dst_fact", "src_episode", "dst_episode").order_by("created_at")[:200]
    )


# --- Beliefs as of a date -------------------------------------------------------------------------

LEAVING_ACTIONS = ("fact.forget", "fact.evict", "fact.lifecycle", "quarantine.discard", "user.erase")


def beliefs_as_of(principal: Principal, memory_user: MemoryUser, moment: datetime, limit: int = 500) -> list[Fact]:
    """Facts that were active at `moment`: already written and true (valid_from), not yet replaced.

    A fact leaves the active set when its successor is written (superseded_by's created_at), when the
    notebook overrules it (the revision's time), or when it is forgotten or evicted (the audit event of
    that change; updated_at when there is none). Stale facts are still served (at half weight), so they
    still count as beliefs. A fact whose successor is older than
    itself was overruled on arrival and was never believed. Three queries whatever the count."""
    candidates = list(
        visible(principal, Fact.objects.filter(memory_user=memory_user))
        .filter(created_at__lte=moment, valid_from__lte=moment)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=moment))
        .exclude(status=Fact.Status.QUARANTINED)
        .select_related("superseded_by", "superseded_by_notebook")
        .order_by("-valid_from")
    )
    leaving_ids = [str(f.pk) for f in candidates if f.status == Fact.Status.EVICTED]
    left_at: dict[str, datetime] = {}
    if leaving_ids:
        for target_id, at in (
            visible(principal, AuditEvent.objects.filter(target_type="fact", target_id__in=leaving_ids))
            .filter(action__in=LEAVING_ACTIONS, outcome="evicted")
            .order_by("created_at").values_list("target_id", "created_at")
        ):
            left_at.setdefault(target_id, at)
    believed = []
    for fact in candidates:
        if fact.superseded_by_id:
            end = fact.superseded_by.created_at
        elif fact.superseded_by_notebook_id:
            end = fact.superseded_by_notebook.created_at
        elif fact.status == Fact.Status.EVICTED:
            end = left_at.get(str(fact.pk), fact.updated_at)
        else:
            end = None
        if end is not None and end <= fact.created_at:
            continue  # overruled on arrival: never believed
        if end is None or end > moment:
            believed.append(fact)
        if len(believed) >= limit:
            break
    return believed


# --- Review queues --------------------------------------------------------------------------------

def review_queue(principal: Principal, filters: dict[str, str]) -> QuerySet[Contradiction]:
    qs = visible(principal, Contradiction.objects.filter(status=Contradiction.Status.OPEN))
    if filters.get("detector"):
        qs = qs.filter(detector=filters["detector"])
    if filters.get("user"):
        qs = qs.filter(memory_user__external_id__icontains=filters["user"])
    if filters.get("category"):
        qs = qs.filter(fact_a__category=filters["category"])
    return qs.select_related("memory_user", "fact_a", "fact_b", "notebook_revision").order_by("created_at", "pk")


# Staleness is 0.4·age + 0.3·access + 0.3·contested: without the contested term it cannot pass 0.7,
# so every eviction candidate (> 0.9) is contested, and the partial index on contested active facts
# finds them without scoring the whole table.
assert 0.4 + 0.3 < EVICTION_THRESHOLD  # noqa: S101 -- the filter below relies on it


def eviction_candidates(principal: Principal) -> QuerySet[Fact]:
    qs = annotate_scores(visible(principal, Fact.objects.filter(status=Fact.Status.ACTIVE, pinned=False,
                                                                contested=True)))
    return qs.filter(stale_score__gt=EVICTION_THRESHOLD).select_related("memory_user").order_by("-stale_score", "pk")


def quarantined(principal: Principal) -> QuerySet[Fact]:
    return (
        visible(principal, Fact.objects.filter(status=Fact.Status.QUARANTINED))
        .select_related("memory_user", "agent").order_by("created_at", "pk")
    )


# --- PII blocks -----------------------------------------------------------------------------------

def pii_blocks(principal: Principal, filters: dict[str, str]) -> QuerySet[PiiBlock]:
    qs = visible(principal, PiiBlock.objects.all())
    if filters.get("kind"):
        qs = qs.filter(kinds__contains=[filters["kind"]])
    if filters.get("route"):
        qs = qs.filter(route=filters["route"])
    if filters.get("action"):
        qs = qs.filter(action=filters["action"])
    if filters.get("agent"):
        qs = qs.filter(agent__name__icontains=filters["agent"])
    if filters.get("user"):
        qs = qs.filter(memory_user__external_id__icontains=filters["user"])
    if filters.get("since"):
        qs = qs.filter(created_at__gte=_day_start(filters["since"]))
    if filters.get("until"):
        qs = qs.filter(created_at__lt=_day_start(filters["until"]) + timedelta(days=1))
    repeats = (
        PiiBlock.objects.filter(tenant_id=OuterRef("tenant_id"), fingerprint=OuterRef("fingerprint"))
        .order_by().values("fingerprint").annotate(n=Count("id")).values("n")
    )
    return qs.annotate(repeat_count=Subquery(repeats)).select_related("agent", "memory_user").order_by(
        "-created_at", "pk")


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
    if filters.get("user"):
        qs = qs.filter(memory_user__external_id__icontains=filters["user"])
    # Whole local days as a range on created_at itself: `created_at__date` casts every row and
    # cannot use the index.
    if filters.get("since"):
        qs = qs.filter(created_at__gte=_day_start(filters["since"]))
    if filters.get("until"):
        qs = qs.filter(created_at__lt=_day_start(filters["until"]) + timedelta(days=1))
    # Read off the (tenant, -created_at) index; "-pk" only orders ties (an incremental sort of a
    # few rows), so no event is skipped or shown twice between pages.
    return qs.select_related("memory_user").order_by("-created_at", "-pk")


def _day_start(day: str) -> datetime:
    return timezone.make_aware(datetime.combine(date.fromisoformat(day), time.min))


# --- Lifecycle: the GC's dry run, bounded -----------------------------------------------------------

# `extraction.lifecycle.lifecycle_gc(dry_run=True)` loads every candidate into Python: at 1M facts,
# where most old unread facts have faded, that is ~800,000 rows and minutes. The page asks the same
# three rules in SQL instead: a count per rule that stops at GC_COUNT_CAP, and the first
# GC_REPORT_LIMIT candidates for the sample (tests hold it equal to the GC's own dry run).
GC_COUNT_CAP = 10_000
GC_REPORT_LIMIT = 200


def _eff_conf_at_sql(table: str = "memory_admin_fact") -> str:
    """Effective confidence at the time bound as the one SQL parameter (scoring.py's formula with
    that time for now())."""
    return effective_confidence_sql(table, now="%s::timestamptz")


def gc_rule_querysets(tenant_id: int, now: datetime) -> dict[str, QuerySet[Fact]]:
    """The GC's rules as querysets, each excluding what an earlier rule already takes (first rule wins)."""
    from extraction.lifecycle import LOW_CONFIDENCE, LOW_CONFIDENCE_DAYS, SOFT_TTL_UNREAD_DAYS

    live = Fact.objects.filter(tenant_id=tenant_id, status__in=[Fact.Status.ACTIVE, Fact.Status.STALE])
    hard = Q(hard_expires_at__lte=now)
    soft = (Q(soft_expires_at__lte=now, pinned=False)
            & Q(last_read__lte=now - timedelta(days=SOFT_TTL_UNREAD_DAYS)))
    cutoff = now - timedelta(days=LOW_CONFIDENCE_DAYS)
    # "Last access" as scoring reads it: the last read, else when the fact was stored.
    annotated = live.annotate(last_read=Coalesce("last_accessed_at", "created_at"))
    low = (
        annotate_scores(annotated.filter(status=Fact.Status.ACTIVE, pinned=False).exclude(hard).exclude(soft))
        .annotate(conf_at_cutoff=RawSQL(_eff_conf_at_sql(), (cutoff,), output_field=FloatField()))  # noqa: S611
        .filter(eff_conf__lt=LOW_CONFIDENCE, last_read__lte=cutoff, conf_at_cutoff__lt=LOW_CONFIDENCE)
    )
    return {"hard_ttl": live.filter(hard), "soft_ttl_unread": annotated.filter(soft).exclude(hard),
            "low_confidence": low}


def gc_preview(principal: Principal) -> dict[str, Any]:
    """What the daily GC would do now, in the shape of its own dry-run report, plus `capped`: the rules
    whose count reached GC_COUNT_CAP (shown as "10000+"). 2 queries per rule."""
    from extraction.lifecycle import RULES

    now = timezone.now()
    rules = gc_rule_querysets(principal.tenant_id, now)
    new_status = {"hard_ttl": Fact.Status.EVICTED, "soft_ttl_unread": Fact.Status.EVICTED,
                  "low_confidence": Fact.Status.STALE}
    counts, capped, facts = {}, [], []
    for rule, qs in rules.items():
        counts[rule] = qs.order_by()[:GC_COUNT_CAP].count()
        if counts[rule] >= GC_COUNT_CAP:
            capped.append(rule)
        room = GC_REPORT_LIMIT - len(facts)
        if room > 0 and counts[rule]:
            for f in qs.select_related("memory_user").order_by("created_at", "pk")[:room]:
                facts.append({"id": str(f.pk), "user_id": f.memory_user.external_id if f.memory_user_id else None,
                              "content": f.content[:120], "rule": rule, "reason": RULES[rule],
                              "new_status": new_status[rule], "pinned": f.pinned})
    total = sum(counts.values())
    return {"tenant_id": principal.tenant_id, "dry_run": True, "ran_at": now.isoformat(), "counts": counts,
            "capped": capped, "total": total, "rules": RULES, "facts": facts, "truncated": total > len(facts)}
