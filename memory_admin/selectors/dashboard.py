"""Reads behind the dashboard pages. Every queryset starts from `visible(principal, ...)`, so the
tenant (and, for members, the memory user) filter is inside the SQL; every list is built to run a
bounded number of queries whatever its length."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import connection
from django.db.models import (
    CharField,
    Count,
    F,
    FloatField,
    Func,
    IntegerField,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Coalesce, TruncDate
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
    UsageDay,
    WriteOutcome,
)
from memory_admin.scoring import (
    EVICTION_THRESHOLD,
    STALE_THRESHOLD,
    annotate_scores,
    staleness_sql,
)
from memory_admin.selectors.access import Principal, visible
from memory_admin.selectors.lifecycle import gc_report

if TYPE_CHECKING:
    from memory_admin.retrieval import Hit

OVERVIEW_DAYS = 14


def _write_outcomes() -> tuple[str, ...]:
    """The outcomes of a `….write` audit event, in the order the overview stacks them (a position is a
    colour): the write path's, with the screening's other actions (a message or notebook written
    redacted or flagged) after its refusal, `blocked`."""
    written = [o.value for o in WriteOutcome if o.audited]
    at = written.index(WriteOutcome.BLOCKED) + 1
    screened = [a for a in PiiBlock.Action.values if a not in written]
    return (*written[:at], *screened, *written[at:])


WRITE_OUTCOMES = _write_outcomes()


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
        "buckets": [
            ("< 1 day", buckets["under_1d"]),
            ("1–7 days", buckets["d1_7"]),
            ("7–30 days", buckets["d7_30"]),
            ("> 30 days", buckets["over_30d"]),
        ],
        "oldest": oldest,
    }


# Above this many fact rows (all tenants) the overview's distributions read a sample of the table's
# pages (TABLESAMPLE SYSTEM) instead of scoring every active fact: ~5,000 rows whatever the size
# (ten bins, each within about 1.5 points). Scoring is numeric maths, ~15 µs a row.
SCORE_SAMPLE_ABOVE = 100_000
SCORE_SAMPLE_ROWS = 5_000
SCORE_SAMPLE_MIN = 500


def _table_rows(model: type[Model]) -> float:
    """The planner's row estimate of a table (kept by ANALYZE/autovacuum): free, never a scan."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [model._meta.db_table])
        row = cursor.fetchone()
    return float(row[0]) if row and row[0] and row[0] > 0 else 0.0


# The ten bins of a score, as the lower bounds of bins 1..9 in float8: `width_bucket` puts x in bin i
# exactly when x >= the i-th bound, the very comparison the facts list's range filter makes (a bar and
# the list it links to count the same facts; FLOOR(x * 10) differs for a few values next to a bound).
SCORE_BIN_BOUNDS = "'{0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9}'::float8[]"


def _score_bin(field: str) -> Func:
    return Func(
        F(field),
        function="width_bucket",
        template=f"%(function)s(%(expressions)s, {SCORE_BIN_BOUNDS})",
        output_field=IntegerField(),
    )


def _page_sample(qs: QuerySet, percent: float) -> tuple[str, list[Any]]:
    """The SQL of `qs` (the access check of visible() included) reading a page sample of the fact table:
    TABLESAMPLE SYSTEM, seeded by the day, so the same pages all day and from page to page."""
    sql, params = qs.query.sql_with_params()
    table = f'FROM "{Fact._meta.db_table}"'
    at = sql.find(table)
    if at < 0 or "%s" in sql[:at]:
        raise ValueError("a page sample needs the fact table first and no parameter before it")
    sql = sql[:at] + f"{table} TABLESAMPLE SYSTEM (%s) REPEATABLE (%s)" + sql[at + len(table) :]
    return sql, [percent, timezone.localdate().toordinal(), *params]


def _score_sample_percent(principal: Principal) -> float | None:
    """The percent of the fact table's pages the score distributions read, or None when they score
    every active fact (a small table, or a principal restricted to some users)."""
    rows = _table_rows(Fact)
    if principal.restricted or rows <= max(SCORE_SAMPLE_ABOVE, 0):
        return None
    return round(min(100.0, 100.0 * SCORE_SAMPLE_ROWS / rows), 3)


def score_distributions(principal: Principal) -> dict[str, Any]:
    """Active facts in ten bins of effective confidence and of staleness (two queries: table size, bins).

    On a big table the bins come from a page sample (about SCORE_SAMPLE_ROWS rows, the same pages all
    day) scaled up to the whole, and `sample_percent` says so; scoring a million facts takes seconds."""
    qs = (
        annotate_scores(visible(principal, Fact.objects.active()))
        .annotate(cbin=_score_bin("eff_conf"), sbin=_score_bin("stale_score"))
        .values_list("cbin", "sbin")
        .annotate(n=Count("id"))
        .order_by()
    )
    percent = _score_sample_percent(principal)
    binned = []
    if percent is not None:
        with connection.cursor() as cursor:
            cursor.execute(*_page_sample(qs, percent))
            binned = cursor.fetchall()
        if sum(n for _, _, n in binned) < SCORE_SAMPLE_MIN:
            percent = None  # a small tenant in a big table: too few sampled rows; score it exactly
    if percent is None:
        binned = list(qs)
    scale = 100.0 / percent if percent else 1.0
    conf = [0] * 10
    stale = [0] * 10
    for cbin, sbin, n in binned:
        conf[int(cbin or 0)] += n
        stale[int(sbin or 0)] += n
    conf = [round(n * scale) for n in conf]
    stale = [round(n * scale) for n in stale]
    return {
        "confidence": conf,
        "staleness": stale,
        "active": sum(conf),
        "stale": sum(stale[int(STALE_THRESHOLD * 10) :]),
        "evictable": stale[9],
        "sample_percent": percent,
    }


def score_band_rows(principal: Principal, filters: dict[str, str]) -> tuple[QuerySet[Fact], dict[str, Any] | None]:
    """The tenant-wide facts list (fact_rows without a user; where the bars of the overview's
    distributions lead), and, when those bars are estimated from a page sample, the sample: then the
    list is the facts of the sampled pages only (what a bar was counted from), `ids` gives them in the
    list's order, and `estimate` the bar's own number, scaled up. One query, two for a sparse band."""
    rows = fact_rows(principal, None, filters)
    percent = None if filters.get("user") else _score_sample_percent(principal)
    if percent is None:
        return rows, None
    with connection.cursor() as cursor:
        cursor.execute(*_page_sample(rows.values_list("pk"), percent))
        ids = [row[0] for row in cursor.fetchall()]
        if len(ids) < SCORE_SAMPLE_MIN:  # did the overview score this tenant exactly? (see score_distributions)
            active = visible(principal, Fact.objects.active()).values_list("pk").order_by()
            sql, params = _page_sample(active, percent)
            cursor.execute(f"SELECT count(*) FROM ({sql}) AS s", params)  # noqa: S608 -- ORM-compiled SQL
            if cursor.fetchone()[0] < SCORE_SAMPLE_MIN:
                return rows, None
    return rows, {"percent": percent, "ids": ids, "sampled": len(ids), "estimate": round(len(ids) * 100.0 / percent)}


def pii_per_day(principal: Principal, days: int = OVERVIEW_DAYS) -> dict[date, int]:
    rows = (
        visible(principal, PiiBlock.objects.filter(created_at__gte=_since(days)))
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(n=Count("id"))
        .order_by()
    )
    out = {d: 0 for d in _days(days)}
    for row in rows:
        out[row["day"]] = row["n"]
    return out


def llm_per_day(principal: Principal, days: int = OVERVIEW_DAYS) -> dict[date, dict[str, Any]]:
    rows = (
        visible(principal, LlmCall.objects.filter(created_at__gte=_since(days)))
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(
            calls=Count("id"),
            tokens=Coalesce(Sum(F("prompt_tokens") + F("completion_tokens")), 0),
            cost=Coalesce(Sum("cost_usd", output_field=FloatField()), 0.0, output_field=FloatField()),
            failed=Count("id", filter=Q(ok=False)),
        )
        .order_by()
    )
    out = {d: {"calls": 0, "tokens": 0, "cost": 0.0, "failed": 0} for d in _days(days)}
    for row in rows:
        out[row["day"]] = {k: row[k] for k in ("calls", "tokens", "cost", "failed")}
    return out


USAGE_KINDS = ("search", "context", "fact")


def usage_per_day(principal: Principal, days: int = OVERVIEW_DAYS) -> dict[date, dict[str, int]]:
    """Searches, context requests and fact reads per day (services.access_counts counts them, one
    row per tenant, day and kind): do agents actually use the memory?"""
    out = {d: dict.fromkeys(USAGE_KINDS, 0) for d in _days(days)}
    rows = visible(principal, UsageDay.objects.filter(day__gte=_days(days)[0])).values_list("day", "kind", "count")
    for day, kind, n in rows:
        if day in out and kind in USAGE_KINDS:
            out[day][kind] = n
    return out


BATCH_STATES = ("done", "failed", "running", "pending")


def batches_per_day(principal: Principal, days: int = OVERVIEW_DAYS) -> dict[date, dict[str, int]]:
    """Extraction batches per day by status. The offline rules extractor makes no model calls, so the
    LLM call counts alone would read as "no extraction" while batches are done."""
    rows = (
        visible(principal, ExtractionBatch.objects.filter(created_at__gte=_since(days)))
        .annotate(day=TruncDate("created_at"))
        .values("day", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    out = {d: dict.fromkeys(BATCH_STATES, 0) for d in _days(days)}
    for row in rows:
        out.setdefault(row["day"], dict.fromkeys(BATCH_STATES, 0))[row["status"]] = row["n"]
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
    link: str | None = None


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


def bar_chart(
    labels: list[str],
    series: list[list[float]],
    names: list[str] | None = None,
    colors: list[int] | None = None,
    links: list[list[str | None]] | None = None,
) -> dict[str, Any]:
    """Stacked bars: `series[i][j]` is series i at label j; `colors[i]` picks series i's palette slot so
    that one outcome keeps its colour from day to day and chart to chart."""
    colors = colors or list(range(len(series)))
    n = max(1, len(labels))
    totals = [sum(s[j] for s in series) for j in range(len(labels))]
    top = _nice_max(max(totals, default=0))
    # Room for the y axis labels (about 6 px a character at 10 px): "0.0005" does not fit in PAD_L.
    pad_l = max(PAD_L, 6 * max(len(f"{top:g}"), len(f"{top / 2:g}")) + 8)
    plot_w, plot_h = CHART_W - pad_l, CHART_H - PAD_B
    slot = plot_w / n
    width = max(2.0, slot * 0.72)
    bars: list[Bar] = []
    for j, label in enumerate(labels):
        base = 0.0
        for i, s in enumerate(series):
            if not s[j]:
                continue
            h = plot_h * s[j] / top
            bars.append(
                Bar(
                    x=round(pad_l + j * slot + (slot - width) / 2, 1),
                    y=round(plot_h - base - h, 1),
                    w=round(width, 1),
                    h=round(h, 1),
                    label=f"{label}: {names[i] + ' ' if names else ''}{s[j]:g}",
                    value=s[j],
                    series=colors[i],
                    link=links[i][j] if links else None,
                )
            )
            base += h
    step = max(1, n // 7)
    ticks = [{"x": round(pad_l + j * slot + slot / 2, 1), "label": labels[j]} for j in range(0, len(labels), step)]
    # Totals written above the bars when they fit (up to a month of days), and every value as a table.
    values = (
        [
            {
                "x": round(pad_l + j * slot + slot / 2, 1),
                "y": round(max(9.0, plot_h - plot_h * totals[j] / top - 3), 1),
                "text": f"{totals[j]:g}",
            }
            for j in range(len(labels))
            if totals[j]
        ]
        if n <= 31
        else []
    )
    rows = [
        {
            "label": label,
            "total": totals[j],
            "cells": [{"value": s[j], "link": links[i][j] if links and s[j] else None} for i, s in enumerate(series)],
        }
        for j, label in enumerate(labels)
    ]
    return {
        "w": CHART_W,
        "h": CHART_H,
        "plot_h": plot_h,
        "pad_l": pad_l,
        "bars": bars,
        "ticks": ticks,
        "values": values,
        "rows": rows,
        "names": names or ["count"],
        "linked": any(b.link for b in bars),
        "top": f"{top:g}",
        "mid": f"{top / 2:g}",
        "mid_y": plot_h / 2,
        "legend": list(zip(names, colors, strict=True)) if names and len(names) > 1 else [],
        "empty": not any(totals),
    }


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
    facts = Fact.objects.active().filter(memory_user=OuterRef("pk")).order_by()
    open_ = Contradiction.objects.filter(memory_user=OuterRef("pk"), status=Contradiction.Status.OPEN).order_by()
    return qs.annotate(
        fact_count=Coalesce(Subquery(facts.values("memory_user").annotate(n=Count("id")).values("n")), 0),
        open_contradictions=Coalesce(Subquery(open_.values("memory_user").annotate(n=Count("id")).values("n")), 0),
        # Raw SQL: the staleness formula is defined once, in scoring.py, over a named table alias.
        avg_staleness=RawSQL(  # noqa: S611 -- constant SQL from scoring.py, no user input
            f"(SELECT avg({staleness_sql('sf')}) FROM memory_admin_fact sf "
            "WHERE sf.memory_user_id = memory_admin_memoryuser.id AND sf.status = 'active')",
            (),
            output_field=FloatField(),
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
            newest = qs.order_by("-created_at", "-pk").values("pk")[: USER_RANK_WINDOW[sort]]
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
    """The facts lists (a user's tab, or tenant-wide with `user` naming one by exact id): filters by
    status/category/kind/source/stale/text and effective-confidence and staleness bands, with scores
    computed in SQL."""
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
    if filters.get("user"):
        qs = qs.filter(memory_user__external_id=filters["user"])
    qs = _in_score_bands(annotate_scores(qs), filters)
    if filters.get("stale") == "yes":
        qs = qs.filter(Q(status=Fact.Status.STALE) | Q(stale_score__gt=STALE_THRESHOLD))
    elif filters.get("stale") == "no":
        qs = qs.exclude(status=Fact.Status.STALE).filter(stale_score__lte=STALE_THRESHOLD)
    # The vectors are never shown: reading and parsing 50 of them was a third of the page's time.
    return (
        qs.select_related("memory_user").defer("embedding", "search_vector").order_by("-pinned", "-created_at", "-pk")
    )


# Range filters of the facts lists: effective confidence and staleness from `_min` (inclusive) to `_max`
# (exclusive, but 1 includes 1.0: the top bar of a distribution holds 0.9 to 1.0).
SCORE_BANDS = (("conf", "eff_conf"), ("stale", "stale_score"))


def _in_score_bands(qs: QuerySet[Fact], filters: dict[str, str]) -> QuerySet[Fact]:
    """Validated numbers (views.facts.score_band_filters) narrow an annotate_scores queryset."""
    for prefix, field in SCORE_BANDS:
        low, high = filters.get(f"{prefix}_min"), filters.get(f"{prefix}_max")
        if low:
            qs = qs.filter(**{f"{field}__gte": float(low)})
        if high and float(high) < 1:
            qs = qs.filter(**{f"{field}__lt": float(high)})
    return qs


def fact_with_scores(principal: Principal, fact_id: UUID | str) -> Fact:
    from memory_admin.selectors.access import get_visible

    return get_visible(
        principal,
        annotate_scores(
            Fact.objects.select_related(
                "memory_user", "message", "message__thread", "batch", "superseded_by_notebook", "agent"
            )
        ),
        pk=fact_id,
    )


def fact_edges(principal: Principal, fact: Fact) -> list[Edge]:
    return list(
        visible(principal, Edge.objects.filter(Q(src_fact=fact) | Q(dst_fact=fact)))
        .select_related("src_fact", "dst_fact", "src_episode", "dst_episode")
        .order_by("created_at")[:200]
    )


# --- A member's own facts, in plain words -------------------------------------------------------------

# The audit actions that take a fact out of use or bring it back: the last of them says why a fact
# that is not in use left (a Forget, which can be undone, or a removal by review, cap or GC).
IN_OUT_ACTIONS = (
    "fact.forget",
    "fact.restore",
    "fact.evict",
    "fact.lifecycle",
    "fact.undo",
    "quarantine.discard",
    "quarantine.undo",
)
MEMBER_SHOWS = {"in_use": "In use", "forgotten": "Forgotten by you", "all": "Everything"}


def with_last_change(qs: QuerySet[Fact]) -> QuerySet[Fact]:
    """Annotate each fact with its last in-or-out change (action, actor, time): a lookup each on the
    audit log's (target_type, target_id) index."""
    last = (
        AuditEvent.objects.filter(
            target_type="fact", target_id=Cast(OuterRef("pk"), CharField()), action__in=IN_OUT_ACTIONS
        )
        .order_by("-created_at", "-pk")
        .values("action", "actor", "created_at")
    )
    return qs.annotate(
        change_action=Subquery(last.values("action")[:1]),
        change_actor=Subquery(last.values("actor")[:1]),
        change_at=Subquery(last.values("created_at")[:1]),
    )


def member_fact_rows(principal: Principal, memory_user: MemoryUser, show: str, q: str = "") -> QuerySet[Fact]:
    """A member's facts: in use (active or stale), forgotten by them (their Forget was the last change),
    or everything but older versions (those are in each fact's history). Newest first."""
    qs = with_last_change(visible(principal, Fact.objects.filter(memory_user=memory_user)))
    if show == "forgotten":
        qs = qs.filter(status=Fact.Status.EVICTED, change_action="fact.forget", change_actor=principal.actor)
    elif show == "all":
        qs = qs.exclude(status=Fact.Status.SUPERSEDED)
    else:
        qs = qs.filter(status__in=[Fact.Status.ACTIVE, Fact.Status.STALE])
    if q:
        qs = qs.filter(content__icontains=q)
    return qs.defer("embedding", "search_vector").order_by("-pinned", "-created_at", "-pk")


def fact_last_change(principal: Principal, fact: Fact) -> Fact:
    """`with_last_change` for one fact already read (the fact page): one query."""
    row = with_last_change(visible(principal, Fact.objects.filter(pk=fact.pk))).values(
        "change_action", "change_actor", "change_at"
    )
    for name, value in (row.first() or {}).items():
        setattr(fact, name, value)
    return fact


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
        visible(principal, Fact.objects.for_user(memory_user))
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
            .order_by("created_at")
            .values_list("target_id", "created_at")
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


# A review card shows each side with the message it came from: the joins that bring them in one query.
REVIEW_CARD_JOINS = (
    "memory_user",
    "fact_a__message__thread",
    "fact_a__agent",
    "fact_b__message__thread",
    "fact_b__agent",
    "notebook_revision",
)
REVIEW_CARD_DEFER = tuple(
    f"{side}__{field}" for side in ("fact_a", "fact_b") for field in ("embedding", "search_vector")
)


def review_queue(principal: Principal, filters: dict[str, str]) -> QuerySet[Contradiction]:
    qs = visible(principal, Contradiction.objects.filter(status=Contradiction.Status.OPEN))
    if filters.get("detector"):
        qs = qs.filter(detector=filters["detector"])
    if filters.get("user"):
        qs = qs.filter(
            Q(memory_user__external_id__icontains=filters["user"])
            | Q(memory_user__display_name__icontains=filters["user"])
        )
    if filters.get("category"):
        qs = qs.filter(fact_a__category=filters["category"])
    return review_card_rows(qs).order_by("created_at", "pk")


def review_card_rows(qs: QuerySet[Contradiction]) -> QuerySet[Contradiction]:
    """Contradictions with what their cards show: both sides, their messages and threads, the person."""
    return qs.select_related(*REVIEW_CARD_JOINS).defer(*REVIEW_CARD_DEFER)


def review_tab_counts(principal: Principal) -> dict[str, int]:
    """How many wait in each tab of the review queue: three counts in one statement, and the eviction
    candidates' (their staleness is raw SQL over the fact table's own name, which a subquery renames)."""
    from memory_admin.models import Tenant
    from memory_admin.selectors.entities import merge_review_queue

    def count(qs: QuerySet) -> Coalesce:
        # Every row is the principal's tenant's (visible()), so grouping by tenant gives one count.
        return Coalesce(Subquery(qs.order_by().values("tenant_id").annotate(n=Count("pk")).values("n")), 0)

    queues = {
        "contradictions": visible(principal, Contradiction.objects.filter(status=Contradiction.Status.OPEN)),
        "quarantine": quarantined(principal),
        "entities": merge_review_queue(principal),
    }
    # Prefixed: "contradictions" is also the name of the tenant's reverse relation.
    row = Tenant.objects.filter(pk=principal.tenant_id).values(
        **{f"n_{name}": count(qs) for name, qs in queues.items()}
    )
    counts = row.first() or {}
    return {
        **{name: counts.get(f"n_{name}", 0) for name in queues},
        "eviction": eviction_candidates(principal).order_by().count(),
    }


def person_name(memory_user: MemoryUser | None) -> str:
    """A memory user as people call them: the display name, else the id."""
    if memory_user is None:
        return "the team"
    return memory_user.display_name or memory_user.external_id


_ONE_VALUED = re.compile(r"same one-valued predicate \('(?P<verb>[^']+)'\) with different values")


def plain_reason(item: Contradiction) -> str:
    """Why two facts were put side by side, in a sentence a reviewer reads without knowing the judge's
    vocabulary ("same one-valued predicate ('prefers')" becomes "Both say what Alice prefers ...")."""
    name = person_name(item.memory_user)
    reason = (item.reason or "").strip()
    match = _ONE_VALUED.fullmatch(reason)
    if match:
        return f"Both say what {name} {match['verb']}, with different answers; only one can be true now."
    if reason == "one statement negates the other":
        return "One says the opposite of the other."
    if item.detector == Contradiction.Detector.NOTEBOOK:
        return f"The notebook says otherwise{': ' + reason if reason else '.'}"
    if not reason or reason in ("compatible statements", "no shared subject"):
        if item.detector == Contradiction.Detector.KEY:
            return "Both give a value for the same thing, and the values differ."
        return "The two are about the same thing and give different answers."
    return reason[0].upper() + reason[1:] + ("" if reason.endswith((".", "!", "?")) else ".")


@dataclass
class Origin:
    """Where one side of a review card came from: the message it was drawn from, else the door."""

    quote: str = ""
    speaker: str = ""
    at: datetime | None = None
    thread_id: int | None = None
    thread_name: str = ""
    message_id: int | None = None
    door: str = ""


def fact_origin(fact: Fact) -> Origin:
    """The message a fact was drawn from (with its thread), or the door it came in by, in words.
    Reads only what `review_card_rows` (or `fact_with_scores`) joined in."""
    if fact.message_id:
        message = fact.message
        return Origin(
            quote=message.content,
            speaker={"user": "the user", "assistant": "the assistant"}.get(message.role, message.role),
            at=message.created_at,
            thread_id=message.thread_id,
            thread_name=message.thread.external_id,
            message_id=message.pk,
        )
    return Origin(door=_door(fact))


def _door(fact: Fact) -> str:
    actor = fact.created_by or ""
    if fact.source == Fact.Source.NOTEBOOK:
        return "Written from the notebook."
    if fact.batch_id:
        return "Drawn from a conversation by the extractor (no single message recorded)."
    if actor.startswith("agent:"):
        agent = fact.agent.name if fact.agent_id and fact.agent else actor.removeprefix("agent:")
        return f"Saved by the agent “{agent}” through the API or MCP, not from a stored message."
    if actor.startswith("staff:"):
        return f"Written in the dashboard by {actor.removeprefix('staff:')}."
    if actor.startswith("import"):
        return "Brought in by an import."
    return f"Written by {actor}." if actor else "No source recorded."


def review_evidence(items: list[Contradiction]) -> list[Contradiction]:
    """Attach each card's plain reason, person and the origin of both sides (no query: joined)."""
    for item in items:
        item.plain_reason = plain_reason(item)
        item.person = person_name(item.memory_user)
        item.origin_a = fact_origin(item.fact_a) if item.fact_a_id else None
        item.origin_b = fact_origin(item.fact_b) if item.fact_b_id else None
    return items


# Staleness is 0.4·age + 0.3·access + 0.3·contested: without the contested term it cannot pass 0.7,
# so every eviction candidate (> 0.9) is contested, and the partial index on contested active facts
# finds them without scoring the whole table.
assert 0.4 + 0.3 < EVICTION_THRESHOLD  # noqa: S101 -- the filter below relies on it


def eviction_candidates(principal: Principal) -> QuerySet[Fact]:
    qs = annotate_scores(visible(principal, Fact.objects.active().filter(pinned=False, contested=True)))
    return qs.filter(stale_score__gt=EVICTION_THRESHOLD).select_related("memory_user").order_by("-stale_score", "pk")


def quarantined(principal: Principal) -> QuerySet[Fact]:
    return (
        visible(principal, Fact.objects.filter(status=Fact.Status.QUARANTINED))
        .select_related("memory_user", "agent")
        .order_by("created_at", "pk")
    )


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


# --- Fact detail: the open contradiction, the decay curve ---------------------------------------


def open_contradiction_of(principal: Principal, fact: Fact) -> Contradiction | None:
    """The open contradiction a contested fact is part of (the oldest, when several)."""
    if not fact.contested:
        return None
    return (
        visible(principal, Contradiction.objects.filter(status=Contradiction.Status.OPEN))
        .filter(Q(fact_a=fact) | Q(fact_b=fact))
        .order_by("created_at")
        .first()
    )


DECAY_PAST_DAYS = 90
DECAY_FUTURE_DAYS = 365
DECAY_W, DECAY_H, DECAY_PAD = 560, 150, 30


def decay_curve(fact: Fact, now: datetime | None = None) -> dict[str, Any]:
    """Effective confidence and staleness of one fact over time, from `scoring.terms` (the formula's
    one Python form): the past since it was stored (with the reads it has now: the history of reads is
    not kept) and a projection for the next year if nobody reads it. Also the day it would turn stale
    and become an eviction candidate, unread. Geometry only; the template draws and escapes."""
    from memory_admin import scoring

    now = now or timezone.now()
    start = max(fact.created_at, now - timedelta(days=DECAY_PAST_DAYS)) if fact.created_at else now
    span = (now - start).total_seconds() / 86400.0 + DECAY_FUTURE_DAYS
    plot_w, plot_h = DECAY_W - DECAY_PAD, DECAY_H - 20
    step = max(1.0, span / 60)
    past, future = [], []
    stale_on = evict_on = half_on = None
    now_effective = scoring.terms(fact, now=now)["effective"]
    t = 0.0
    while t <= span + 1e-9:
        moment = start + timedelta(days=t)
        terms = scoring.terms(fact, now=moment)
        point = (round(DECAY_PAD + plot_w * t / span, 1), round(plot_h * (1 - terms["effective"]), 1))
        (past if moment <= now else future).append(point)
        if moment > now and stale_on is None and terms["staleness"] > scoring.STALE_THRESHOLD:
            stale_on = moment
        if moment > now and evict_on is None and terms["staleness"] > scoring.EVICTION_THRESHOLD:
            evict_on = moment
        if moment > now and half_on is None and terms["effective"] < now_effective / 2:
            half_on = moment
        t += step
    if past and future:
        future.insert(0, past[-1])
    now_x = round(DECAY_PAD + plot_w * (now - start).total_seconds() / 86400.0 / span, 1)
    current = scoring.terms(fact, now=now)
    return {
        "w": DECAY_W,
        "h": DECAY_H,
        "plot_h": plot_h,
        "pad": DECAY_PAD,
        "now_x": now_x,
        "past": " ".join(f"{x},{y}" for x, y in past),
        "future": " ".join(f"{x},{y}" for x, y in future),
        "start": start,
        "end": now + timedelta(days=DECAY_FUTURE_DAYS),
        "effective": current["effective"],
        "in_year": scoring.terms(fact, now=now + timedelta(days=DECAY_FUTURE_DAYS))["effective"],
        "stale_on": stale_on,
        "evict_on": evict_on,
        "half_on": half_on,
        "has_past": now_x - DECAY_PAD > 40,
        "staleness": current["staleness"],
        "already_stale": current["staleness"] > scoring.STALE_THRESHOLD,
        "pinned": fact.pinned,
        "contested": fact.contested,
    }


# --- Conversations: threads, their messages, and the facts each batch drew from them ---------------


def threads(principal: Principal, *, q: str = "", user: str = "") -> QuerySet:
    """Threads, newest first, with their message count (one subquery per listed row)."""
    from memory_admin.models import Message, Thread

    qs = visible(principal, Thread.objects.all())
    if user:
        qs = qs.filter(memory_user__external_id__icontains=user)
    if q:
        qs = qs.filter(external_id__icontains=q)
    counts = (
        Message.objects.filter(thread=OuterRef("pk")).order_by().values("thread").annotate(n=Count("id")).values("n")
    )
    return qs.annotate(message_count=Coalesce(Subquery(counts), 0)).select_related("memory_user").order_by("-pk")


THREAD_MESSAGES = 500


def thread_view(principal: Principal, thread_id: int) -> dict[str, Any]:
    """One thread: its messages in order (the first THREAD_MESSAGES), each with the facts drawn from it,
    and its extraction batches with their status and facts. Four queries whatever the size."""
    from memory_admin.models import Message, Thread
    from memory_admin.selectors.access import get_visible

    thread = get_visible(principal, Thread.objects.select_related("memory_user"), pk=thread_id)
    messages = list(
        visible(principal, Message.objects.filter(thread=thread)).order_by("created_at", "pk")[:THREAD_MESSAGES]
    )
    # The two ways a fact comes from a thread, as a UNION of two indexed lookups: an OR across the two
    # joins made Postgres scan every fact of the tenant (950 ms at 1M facts).
    drawn = (
        Fact.objects.filter(message__thread=thread)
        .values("pk")
        .union(Fact.objects.filter(batch__thread=thread).values("pk"))
    )
    facts = list(
        visible(principal, Fact.objects.filter(pk__in=drawn))
        .defer("embedding", "search_vector")
        .order_by("created_at", "pk")[:2000]
    )
    batches = list(visible(principal, ExtractionBatch.objects.filter(thread=thread)).order_by("created_at", "pk"))
    by_message: dict[int, list[Fact]] = {}
    by_batch: dict[int, list[Fact]] = {}
    for fact in facts:
        if fact.message_id:
            by_message.setdefault(fact.message_id, []).append(fact)
        if fact.batch_id:
            by_batch.setdefault(fact.batch_id, []).append(fact)
    batch_by_id = {b.pk: b for b in batches}
    for message in messages:
        message.drawn = by_message.get(message.pk, [])
        message.batch_row = batch_by_id.get(message.batch_id)
    for batch in batches:
        batch.drawn = by_batch.get(batch.pk, [])
    # Not "messages": templates read that name as the flash messages (base.html shows them all on top).
    # One account of the thread's extraction, from the same rows the messages show (a message marked
    # extracted with no batch, as imports and the demo seed leave them, is not "no extraction yet").
    states = {status: 0 for status in Message.Status.values}
    for message in messages:
        states[message.status] = states.get(message.status, 0) + 1
    return {
        "thread": thread,
        "thread_messages": messages,
        "batches": batches,
        "truncated": len(messages) == THREAD_MESSAGES,
        "extraction": {
            **states,
            "facts": len({f.pk for f in facts}),
            "without_batch": sum(1 for m in messages if m.status == Message.Status.EXTRACTED and not m.batch_id),
        },
    }


# --- Tenant-wide search: the product's ranking (retrieval.fact_search) across users ----------

SEARCH_USERS = 10
# fact_search ranks every fact of a user (its top k always fills up): a hit is shown when it shares a
# word with the query or is at least this close in meaning. The order stays fact_search's.
MATCH_MIN_COSINE = 0.3
SEARCH_FILTERS = ("status", "category", "source", "agent", "stale", "contested", "user")
# Candidate users are counted exactly over at most this many matching facts (through the GIN index).
# A word common across the tenant (say "prefers" in 100,000 of 1.1M facts) would otherwise mean
# reading every matching row to count it per user (~600 ms); past the bound the users are ranked by
# their matches in a page sample of about SEARCH_SAMPLE_ROWS facts, the overview's method. Each of
# the two reads costs about 40 ms at 1.1M facts on a quiet machine (bench/dashboard_pages.py).
SEARCH_COUNT_LIMIT = 1000
SEARCH_SAMPLE_ROWS = 10_000


def tenant_search(principal: Principal, query: str, filters: dict[str, str], k: int = 30) -> dict[str, Any]:
    """Facts across the tenant's users, ranked by `fact_search` (the one ranking): the users whose facts
    match the query's words (full-text, the GIN index; at most SEARCH_USERS, most matches first, or the
    one named by the `user` filter) are searched together (`fact_search_users`: fact_search's ranking per
    user, one statement for all of them), and the hits merged by final score. Filters narrow candidates
    and hits; reads are not counted.

    `sample_percent` is set when the words were too common to count every match (see
    SEARCH_COUNT_LIMIT): the users were then chosen by their matches in that sample."""
    from memory_admin.retrieval import INCLUDABLE, fact_search_users

    query = (query or "").strip()
    status = filters.get("status") or ""
    statuses = [status] if status else ["active", "stale"]
    candidates = _search_candidates(principal, query, filters, statuses)
    if candidates is None:
        return {"hits": [], "users": 0, "searched": []}
    user_ids, percent = _candidate_users(candidates, exact=bool(filters.get("user")))
    users = {u.pk: u for u in visible(principal, MemoryUser.objects.filter(pk__in=user_ids))}
    searched = [users[u] for u in user_ids if u in users]
    include = (status,) if status in INCLUDABLE else ()
    per_user = fact_search_users(principal=principal, memory_users=searched, query=query, k=k, include=include)
    hits = [hit for user in searched for hit in per_user.get(user.pk, [])]
    keep = _search_hit_filter(principal, filters, statuses)
    hits = sorted((h for h in hits if keep(h)), key=lambda h: -h.final)
    return {
        "hits": hits[:k],
        "users": len(users),
        "searched": searched,
        "sample_percent": percent,
        "bounded": len(user_ids) == SEARCH_USERS and not filters.get("user"),
    }


def _search_candidates(
    principal: Principal, query: str, filters: dict[str, str], statuses: list[str]
) -> QuerySet[Fact] | None:
    """The facts whose users are worth searching: the named user's, else those sharing a word with the
    query (None when the query has no word to match)."""
    from django.contrib.postgres.search import SearchQuery

    from memory_admin.retrieval import or_tsquery

    if not query:
        return None
    candidates = visible(principal, Fact.objects.filter(memory_user__isnull=False, status__in=statuses))
    if filters.get("user"):
        candidates = candidates.filter(memory_user__external_id=filters["user"])
    else:
        tsq = or_tsquery(query)
        if not tsq:
            return None
        candidates = candidates.filter(search_vector=SearchQuery(tsq, search_type="raw", config="english"))
    narrowing = {name: filters[name] for name in ("category", "source") if filters.get(name)}
    if filters.get("agent"):
        narrowing["agent__name__icontains"] = filters["agent"]
    if filters.get("contested") in ("yes", "no"):
        narrowing["contested"] = filters["contested"] == "yes"
    return candidates.filter(**narrowing)


def _top_users(counts: dict[int, int]) -> list[int]:
    return sorted(counts, key=lambda user_id: (-counts[user_id], user_id))[:SEARCH_USERS]


def _candidate_users(candidates: QuerySet[Fact], *, exact: bool) -> tuple[list[int], float | None]:
    """The SEARCH_USERS users with the most candidate facts, and the sample percent when they were
    counted in a sample. Two queries at most: the first SEARCH_COUNT_LIMIT + 1 matches (exact when
    there are no more, or when one user is named), then, for common words, the matches in a page sample
    of the table (TABLESAMPLE SYSTEM, the same pages all day, like the overview's distributions)."""
    from collections import Counter

    first = Counter(candidates.order_by().values_list("memory_user", flat=True)[: SEARCH_COUNT_LIMIT + 1])
    if exact or sum(first.values()) <= SEARCH_COUNT_LIMIT:
        return _top_users(first), None
    percent = round(min(100.0, 100.0 * SEARCH_SAMPLE_ROWS / max(_table_rows(Fact), 1.0)), 3)
    sql, params = _page_sample(candidates.order_by().values_list("memory_user"), percent)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT s.user_id, count(*) FROM ({sql}) AS s(user_id) GROUP BY 1", params)  # noqa: S608
        sampled = dict(cursor.fetchall())
    # Too few matches in the sample (a small tenant in a big table): fill up from the counted ones.
    ranked = _top_users(sampled)
    ranked += [u for u in _top_users(first) if u not in sampled][: SEARCH_USERS - len(ranked)]
    return ranked, percent


def _search_hit_filter(principal: Principal, filters: dict[str, str], statuses: list[str]) -> Callable[[Hit], bool]:
    """Whether a fact_search hit belongs on the page: fact_search fills its k from every fact of a user,
    so the page's filters and the match rule (a shared word, or close in meaning) are checked here."""
    agent_ids = None
    if filters.get("agent"):
        from memory_admin.models import Agent

        agent_ids = set(
            Agent.objects.filter(tenant_id=principal.tenant_id, name__icontains=filters["agent"]).values_list(
                "pk", flat=True
            )
        )

    def keep(hit: Hit) -> bool:
        return (
            _search_hit_passes(hit, filters, statuses)
            and (hit.keyword > 0 or (hit.cosine or 0) >= MATCH_MIN_COSINE)
            and (agent_ids is None or hit.fact.agent_id in agent_ids)
        )

    return keep


def _search_hit_passes(hit: Hit, filters: dict[str, str], statuses: list[str]) -> bool:
    fact = hit.fact
    if fact.status not in statuses:
        return False
    for name in ("category", "source"):
        if filters.get(name) and getattr(fact, name) != filters[name]:
            return False
    if filters.get("contested") in ("yes", "no") and fact.contested != (filters["contested"] == "yes"):
        return False
    if filters.get("stale") == "yes" and not hit.stale:
        return False
    if filters.get("stale") == "no" and hit.stale:
        return False
    return True


# --- Context playground ------------------------------------------------------------------------------

SECTION_LABELS = {
    "notebook": "User notebook",
    "tenant_notebook": "Team notebook",
    "pinned": "Pinned facts",
    "entities": "Entities the task names",
    "facts": "Facts",
    "skills": "Skills",
    "episodes": "Recent episodes",
}


def _as_uuid(value: Any) -> Any:
    import uuid as uuid_module

    try:
        return uuid_module.UUID(str(value))
    except ValueError:
        return None


def _dropped_texts(principal: Principal, block: dict[str, Any]) -> tuple[dict[Any, str], dict[Any, str]]:
    """The text of the dropped facts, and the summaries of the dropped episodes with the names of the
    dropped entities (a query each)."""
    from memory_admin.models import Episode

    wanted: dict[str, list[Any]] = {"facts": [], "episodes": [], "entities": []}
    for section in block["sections"]:
        ids = [_as_uuid(item["id"]) for item in section["dropped"]]
        kind = section["name"] if section["name"] in ("episodes", "entities") else "facts"
        wanted[kind] += [i for i in ids if i]
    facts = (
        dict(visible(principal, Fact.objects.filter(pk__in=wanted["facts"])).values_list("pk", "content"))
        if wanted["facts"]
        else {}
    )
    episodes = (
        {
            pk: f"{ended:%Y-%m-%d}: {summary}"
            for pk, ended, summary in visible(principal, Episode.objects.filter(pk__in=wanted["episodes"])).values_list(
                "pk", "ended_at", "summary"
            )
        }
        if wanted["episodes"]
        else {}
    )
    return facts, {**episodes, **_entity_names(principal, wanted["entities"])}


def _entity_names(principal: Principal, ids: list[Any]) -> dict[Any, str]:
    """The names of the dropped entity lines (the preview names the entity, not its id)."""
    from memory_admin.models import Entity

    return dict(visible(principal, Entity.objects.filter(pk__in=ids)).values_list("pk", "name")) if ids else {}


def _dropped_label(section: str, item_id: str, episodes: dict[Any, str]) -> str:
    """A dropped item that is not a fact, in words: the notebook and its version, the skill's path,
    the episode's day and summary, the entity's name (`episodes` holds those of episodes and entities)."""
    if section in ("notebook", "tenant_notebook"):
        version = item_id.rsplit(":v", 1)[-1] if ":v" in item_id else ""
        return f"the whole notebook{f' (version {version})' if version.isdigit() else ''}"
    if section == "skills":
        return f"skill {item_id}"
    if section == "episodes":
        return f"episode {episodes.get(_as_uuid(item_id)) or item_id[:8]}"
    if section == "entities":
        return f"entity {episodes.get(_as_uuid(item_id)) or item_id[:8]}"
    return item_id[:12]


def context_layout(principal: Principal, block: dict[str, Any], budget: int) -> dict[str, Any]:
    """A context block (retrieval.context.context_block's answer) laid out for the playground: each
    section's share of the budget for a token bar, how many facts came in as related memory, and dropped
    items with the reason and what they are in words (the text of a dropped fact, an episode's summary: a
    query each) and, for a collapsed near-duplicate, the fact whose line holds it."""
    facts, episodes = _dropped_texts(principal, block)
    sections = []
    for index, section in enumerate(block["sections"]):
        dropped = []
        for item in section["dropped"]:
            text = facts.get(_as_uuid(item["id"]), "") if section["name"] != "episodes" else ""
            dropped.append(
                {
                    "id": str(item["id"]),
                    "reason": item.get("reason", ""),
                    "text": text,
                    "is_fact": bool(text),
                    "label": _dropped_label(section["name"], str(item["id"]), episodes),
                    "of": item.get("of"),
                }
            )
        sections.append(
            {
                "name": section["name"],
                "label": SECTION_LABELS.get(section["name"], section["name"]),
                "tokens": section["tokens"],
                "included": len(section["included"]),
                "related": len(section.get("related", ())),
                "truncated": bool(section["truncated"]),
                "dropped": dropped,
                "color": index,
                "share": round(100.0 * section["tokens"] / budget, 2) if budget else 0,
            }
        )
    return {
        "budget": budget,
        "tokens": block["tokens"],
        "text": block["text"],
        "warnings": block["warnings"],
        "sections": sections,
        "free": max(0.0, round(100.0 * (budget - block["tokens"]) / budget, 2)),
        "reasons": sorted({d["reason"] for s in sections for d in s["dropped"]}),
    }
