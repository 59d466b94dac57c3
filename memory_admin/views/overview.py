"""Overview: memory health at a glance, charts drawn server-side as inline SVG."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import AUDIT
from memory_admin.templatetags.labels import label
from memory_admin.views.base import tenant_view

RANGES = (7, 14, 30, 90)
USAGE_NAMES = ("searches", "context requests", "fact reads")  # in the order of sel.USAGE_KINDS
CHART_TITLES = {
    "usage_chart": "reads and context requests",
    "writes_chart": "writes",
    "age_chart": "open contradictions",
    "conf_chart": "confidence of active facts",
    "stale_chart": "staleness of active facts",
    "pii_chart": "PII / secret blocks",
    "batches_chart": "extraction batches",
    "llm_calls_chart": "model calls",
    "llm_tokens_chart": "tokens",
    "llm_cost_chart": "cost",
}


@tenant_view(staff_only=True)
def overview(request: HttpRequest) -> HttpResponse:
    p = request.principal
    try:
        n_days = int(request.GET.get("days", sel.OVERVIEW_DAYS))
    except ValueError:
        n_days = sel.OVERVIEW_DAYS
    n_days = n_days if n_days in RANGES else sel.OVERVIEW_DAYS
    slug = request.tenant.slug
    audit_url, pii_url, batches_url = (reverse(name, args=[slug]) for name in ("audit", "pii", "batches"))
    writes = sel.writes_per_day(p, n_days)
    days = list(writes["table"])
    labels = [d.strftime("%b %d") for d in days]
    outcomes = writes["outcomes"]
    writes_chart = sel.bar_chart(
        labels,
        [[writes["table"][d].get(o, 0) for d in days] for o in outcomes],
        [label(o) for o in outcomes],
        [sel.outcome_color(o) for o in outcomes],
        links=[
            [f"{audit_url}?{urlencode({'action': '.write', 'outcome': o, 'since': d, 'until': d})}" for d in days]
            for o in outcomes
        ],
    )
    contradictions = sel.open_contradictions(p)
    scores = sel.score_distributions(p)
    bins = [f"{i / 10:.1f}" for i in range(10)]
    pii = sel.pii_per_day(p, n_days)
    llm = sel.llm_per_day(p, n_days)
    failed_count, failed = sel.failed_batches(p)
    batches = sel.batches_per_day(p, n_days)
    batch_days = list(batches)
    usage = sel.usage_per_day(p, n_days)
    llm_days = list(llm)
    charts = {
        "writes_chart": writes_chart,
        "age_chart": sel.bar_chart(
            [b[0] for b in contradictions["buckets"]], [[b[1] for b in contradictions["buckets"]]]
        ),
        "conf_chart": sel.bar_chart(bins, [scores["confidence"]], links=[_band_links(slug, "conf")]),
        "stale_chart": sel.bar_chart(bins, [scores["staleness"]], links=[_band_links(slug, "stale")]),
        "pii_chart": sel.bar_chart(
            [d.strftime("%b %d") for d in pii],
            [list(pii.values())],
            # The PII log is the auditor's (and admin's): no link for a role that would get a 403.
            links=[[f"{pii_url}?{urlencode({'since': d, 'until': d})}" for d in pii]] if p.can(AUDIT) else None,
        ),
        "llm_calls_chart": sel.bar_chart(
            [d.strftime("%b %d") for d in llm_days],
            [[llm[d]["calls"] - llm[d]["failed"] for d in llm_days], [llm[d]["failed"] for d in llm_days]],
            ["ok", "failed"],
            [0, 9],
        ),
        "llm_tokens_chart": sel.bar_chart(
            [d.strftime("%b %d") for d in llm_days], [[llm[d]["tokens"] for d in llm_days]]
        ),
        "llm_cost_chart": sel.bar_chart(
            [d.strftime("%b %d") for d in llm_days], [[round(llm[d]["cost"], 4) for d in llm_days]]
        ),
        "batches_chart": sel.bar_chart(
            [d.strftime("%b %d") for d in batch_days],
            [[batches[d][s] for d in batch_days] for s in sel.BATCH_STATES],
            list(sel.BATCH_STATES),
            [0, 9, 4, 6],
            links=[[f"{batches_url}?status={s}"] * len(batch_days) for s in sel.BATCH_STATES],
        ),
        # Reads are counted, not logged one by one: there is no list behind a bar to click through to.
        "usage_chart": sel.bar_chart(
            [d.strftime("%b %d") for d in usage],
            [[usage[d][k] for d in usage] for k in sel.USAGE_KINDS],
            list(USAGE_NAMES),
            [0, 3, 5],
        ),  # not 9: red means failed
    }
    context = {
        "writes": writes,
        "contradictions": contradictions,
        "scores": scores,
        "pii_total": sum(pii.values()),
        "usage_totals": {k: sum(v[k] for v in usage.values()) for k in sel.USAGE_KINDS},
        "batch_totals": {s: sum(v[s] for v in batches.values()) for s in sel.BATCH_STATES},
        "llm_totals": {k: sum(v[k] for v in llm.values()) for k in ("calls", "tokens", "cost", "failed")},
        "failed_count": failed_count,
        "failed": failed,
        "days": n_days,
        "ranges": RANGES,
        # A fresh install has no data in most charts: one line names them instead of empty cards.
        "empty_charts": [CHART_TITLES[name] for name, chart in charts.items() if chart["empty"]],
    }
    return render(request, "dashboard/overview.html", {**charts, **context})


def _band_links(slug: str, prefix: str) -> list[str]:
    """Each bar of a score distribution (tenths of 0-1) leads to the active facts of its band."""
    facts_url = reverse("facts", args=[slug])
    bands = [
        {"status": "active", f"{prefix}_min": f"{i / 10:.1f}", f"{prefix}_max": f"{(i + 1) / 10:.1f}"}
        for i in range(10)
    ]
    return [f"{facts_url}?{urlencode(band)}" for band in bands]
