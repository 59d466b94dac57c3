"""The overview's effective-confidence and staleness bars click through to the facts behind them
(issue 11, item 11): a tenant-wide facts list with confidence and staleness range filters, which the
per-user facts tab has too. What a person checks: the bar says n, the list it opens says n and lists
exactly those facts; a bad bound is refused with a page naming the field."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from memory_admin import scoring
from memory_admin.models import Fact, MemoryUser
from memory_admin.selectors import dashboard as sel


@pytest.fixture
def scored(tenant, memory_user, other_user, make_fact):
    """Pinned facts (effective confidence = confidence, no decay), two of them exactly on a bin bound,
    and unpinned facts of several ages, some contested (staleness spread over the bins)."""
    for user, confidence in (
        (memory_user, 0.05),
        (memory_user, 0.3),
        (other_user, 0.35),
        (memory_user, 0.7),
        (other_user, 0.9),
        (other_user, 1.0),
    ):
        make_fact(user, f"Pinned at confidence {confidence}", confidence=confidence, pinned=True)
    now = timezone.now()
    for i, days in enumerate((0, 20, 90, 200, 400)):
        make_fact(
            other_user,
            f"Aged {days} days",
            confidence=0.8,
            contested=i % 2 == 0,
            valid_from=now - timedelta(days=days),
            created_at=now - timedelta(days=days),
            last_accessed_at=now - timedelta(days=days),
        )
    make_fact(memory_user, "Forgotten long ago", confidence=0.9, pinned=True, status="evicted")
    return {"alice": memory_user, "bob": other_user}


def _bars(body: str, chart: str) -> list[tuple[str, int, str]]:
    """(bin, value, link) of each bar of one overview chart, as the SVG draws them."""
    svg = body.split(f'aria-label="{chart}')[1].split("</svg>")[0]
    return [
        (label, int(value), html.unescape(link))
        for link, label, value in re.findall(r'<a href="([^"]+)" aria-label="([0-9.]+): ([0-9]+)"', svg)
    ]


def _listed(body: str) -> list[str]:
    table = body.split('id="facts-list"')[1].split("</table>")[0]
    return re.findall(r'<td class="content"><a href="[^"]+">([^<]+)</a>', table)


def _count(body: str) -> int:
    summary = body.split('id="band-summary"')[1].split("</p>")[0]
    return int(re.search(r"<b>([0-9]+)</b>", summary).group(1))


@pytest.mark.parametrize("chart", ["Effective confidence distribution", "Staleness distribution"])
def test_every_bar_opens_the_facts_it_counts(operator, tenant, scored, chart):
    overview = operator.get(reverse("overview", args=[tenant.slug])).content.decode()
    bars = _bars(overview, chart)
    assert sum(value for _, value, _ in bars) == 11  # every active fact, the evicted one left out
    for label, value, link in bars:
        listing = operator.get(link)
        assert listing.status_code == 200
        body = listing.content.decode()
        assert _count(body) == value == len(_listed(body)), (label, link)


def test_the_confidence_bars_list_exactly_the_facts_of_their_band(operator, tenant, scored):
    overview = operator.get(reverse("overview", args=[tenant.slug])).content.decode()
    bars = {label: (value, link) for label, value, link in _bars(overview, "Effective confidence distribution")}
    value, link = bars["0.3"]
    body = operator.get(link).content.decode()
    assert sorted(_listed(body)) == _active_with(lambda f: 0.3 <= scoring.effective_confidence(f) < 0.4)
    assert {"Pinned at confidence 0.3", "Pinned at confidence 0.35"} <= set(_listed(body))
    assert "Pinned at confidence 0.05" not in _listed(body) and value == len(_listed(body))
    # Each row's effective confidence reads inside the band (cut, not rounded: never 0.40 under 0.4).
    shown = [float(v) for v in re.findall(r'data-label="Effective"[^>]*>([0-9.]+)<', body)]
    assert len(shown) == value and all(0.3 <= v < 0.4 for v in shown)
    assert "effective confidence 0.3 to under 0.4" in body
    # Facts of every user, each saying whose it is.
    assert re.search(r"about <a href=\"[^\"]+\">alice</a>", body) and re.search(
        r"about <a href=\"[^\"]+\">bob</a>", body
    )
    value, link = bars["0.9"]  # the top bar holds 1.0 too
    body = operator.get(link).content.decode()
    assert value == 2 and sorted(_listed(body)) == ["Pinned at confidence 0.9", "Pinned at confidence 1.0"]
    assert _active_with(lambda f: scoring.effective_confidence(f) >= 0.9) == sorted(_listed(body))
    assert "effective confidence 0.9 to 1 (inclusive)" in body
    # The table under "Show the numbers" links to the same list.
    table = overview.split('aria-label="Effective confidence distribution')[1].split("</details>")[0]
    assert f'<a href="{html.escape(link)}">2</a>' in table.replace("&amp;", "&").replace("&", "&amp;")


def test_the_users_facts_tab_has_the_same_filters(operator, tenant, scored):
    url = reverse("user_facts", args=[tenant.slug, scored["alice"].pk])
    body = operator.get(url, {"conf_min": "0.25", "conf_max": "0.75"}).content.decode()
    assert sorted(_listed_tab(body)) == ["Pinned at confidence 0.3", "Pinned at confidence 0.7"]
    assert "<b>2</b> facts with effective confidence 0.25 to under 0.75" in body
    assert 'name="conf_min" value="0.25"' in body  # the form keeps what was asked
    stale = operator.get(reverse("facts", args=[tenant.slug]), {"stale_min": "0.9"}).content.decode()
    assert all(f.staleness_now > 0.9 for f in _facts_named(_listed(stale)))
    assert "Aged 400 days" in _listed(stale)


def _active_with(condition) -> list[str]:
    return sorted(f.content for f in Fact.objects.filter(status="active") if condition(f))


def _listed_tab(body: str) -> list[str]:
    table = body.split('<table class="facts">')[1].split("</table>")[0]
    return re.findall(r'<td class="content"><a href="[^"]+">([^<]+)</a>', table)


def _facts_named(contents: list[str]) -> list[Fact]:
    facts = list(Fact.objects.filter(content__in=contents))
    for fact in facts:
        fact.staleness_now = scoring.staleness(fact)
    return facts


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"conf_min": "abc"}, "Effective confidence from"),
        ({"conf_max": "1.5"}, "Effective confidence to"),
        ({"stale_min": "nan"}, "Staleness from"),
        ({"stale_max": "1e-1"}, "Staleness to"),
        ({"conf_min": "-0.1"}, "Effective confidence from"),
        ({"conf_min": "0.8", "conf_max": "0.2"}, "Effective confidence from"),
    ],
)
def test_a_bad_bound_is_refused_naming_the_field(operator, tenant, memory_user, params, field):
    for url in (reverse("facts", args=[tenant.slug]), reverse("user_facts", args=[tenant.slug, memory_user.pk])):
        response = operator.get(url, params)
        assert response.status_code == 422
        assert f"“{field}”" in response.content.decode()


def test_members_do_not_get_the_tenant_wide_list(member, tenant):
    assert member.get(reverse("facts", args=[tenant.slug])).status_code == 403


def test_at_scale_the_list_shows_the_sampled_facts_and_the_bars_estimate(
    operator, tenant, scored, make_fact, monkeypatch
):
    """Past SCORE_SAMPLE_ABOVE rows the bars are estimated from a page sample; the list a bar opens is
    that bar's sampled facts, and the estimate it shows is the bar's own number."""
    carol = MemoryUser.objects.create(tenant=tenant, external_id="carol")
    for i in range(40):
        make_fact(carol, f"Carol fact {i}", confidence=0.55, pinned=True)
    # The test table is a few pages: a "sample" of all of them, through the sampled code path.
    monkeypatch.setattr(sel.overview, "_table_rows", lambda model: float(sel.SCORE_SAMPLE_ROWS))
    monkeypatch.setattr(sel.overview, "SCORE_SAMPLE_ABOVE", 1)
    monkeypatch.setattr(sel.overview, "SCORE_SAMPLE_MIN", 1)
    overview = operator.get(reverse("overview", args=[tenant.slug])).content.decode()
    assert "Estimated from a 100.0% sample" in overview
    bars = _bars(overview, "Effective confidence distribution")
    assert ("0.5", 40, bars[3][2]) in bars
    for _, value, link in bars:
        body = operator.get(link).content.decode()
        summary = body.split('id="band-summary"')[1].split("</p>")[0]
        assert int(re.search(r"≈ <b>([0-9]+)</b>", summary).group(1)) == value and "100.0% sample" in summary
        assert len(_listed(body)) == min(value, 50) and f"the {value} on the sampled pages" in body
    # Naming a user lists all of theirs, exactly, without the sample.
    body = operator.get(
        reverse("facts", args=[tenant.slug]), {"user": "carol", "conf_min": "0.5", "conf_max": "0.6"}
    ).content.decode()
    assert _count(body) == 40 and 'id="band-sample"' not in body
