"""The overview page's reads: writes, contradictions, score distributions (sampled at scale) and the daily series."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, F, FloatField, Func, IntegerField, Model, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from memory_admin.models import (
    AuditEvent,
    Contradiction,
    ExtractionBatch,
    Fact,
    LlmCall,
    PiiBlock,
    UsageDay,
    WriteOutcome,
)
from memory_admin.scoring import STALE_THRESHOLD, annotate_scores
from memory_admin.selectors.access import Principal, visible
from memory_admin.selectors.dashboard.facts import fact_rows

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
