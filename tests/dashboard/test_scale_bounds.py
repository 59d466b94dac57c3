"""What the pages do differently on a big table (bench/dashboard_pages.py measures them at 1M facts):
sampled score distributions, a bounded ranking window on the users list, the lifecycle dry run in SQL,
eviction candidates through the contested index. Each is held equal to the exact answer here."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from memory_admin.models import Fact, MemoryUser
from memory_admin.scoring import EVICTION_THRESHOLD, staleness
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import Principal
from memory_admin.services.lifecycle import lifecycle_gc

DAY = timedelta(days=1)


def _backdate(fact: Fact, days: int) -> Fact:
    then = timezone.now() - days * DAY
    Fact.objects.filter(pk=fact.pk).update(created_at=then, valid_from=then)
    fact.refresh_from_db()
    return fact


def test_sampled_distributions_at_100_percent_equal_the_exact_ones_and_say_they_are_sampled(
    operator, tenant, memory_user, make_fact, monkeypatch
):
    for i in range(12):
        _backdate(make_fact(memory_user, f"fact {i}", confidence=0.5 + i / 30), i * 40)
    principal = Principal(tenant_id=tenant.pk, role="operator", actor="t", actor_type="staff")
    exact = sel.score_distributions(principal)
    assert exact["sample_percent"] is None
    # A "big" table whose sample is every page: the sampled path must give the same bins.
    monkeypatch.setattr(sel.overview, "_table_rows", lambda model: float(sel.SCORE_SAMPLE_ROWS))
    monkeypatch.setattr(sel.overview, "SCORE_SAMPLE_ABOVE", 1)
    monkeypatch.setattr(sel.overview, "SCORE_SAMPLE_MIN", 1)
    sampled = sel.score_distributions(principal)
    assert sampled["sample_percent"] == 100
    assert sampled["confidence"] == exact["confidence"] and sampled["staleness"] == exact["staleness"]
    body = operator.get(reverse("overview", args=[tenant.slug])).content.decode()
    assert 'id="score-sample"' in body and "≈ 12" in body


def test_a_small_tenant_in_a_big_table_is_scored_exactly(tenant, memory_user, make_fact, monkeypatch):
    make_fact(memory_user, "only fact")
    monkeypatch.setattr(sel.overview, "_table_rows", lambda model: 1e9)  # a sample of ~0 rows: too few to use
    monkeypatch.setattr(sel.overview, "SCORE_SAMPLE_ABOVE", 1)
    result = sel.score_distributions(Principal(tenant_id=tenant.pk, role="admin", actor="t", actor_type="staff"))
    assert result["sample_percent"] is None and result["active"] == 1


def test_users_ranked_by_an_aggregate_past_the_window_rank_the_newest_and_say_so(
    operator, tenant, make_fact, monkeypatch
):
    monkeypatch.setattr(sel.users, "USER_RANK_WINDOW", {"facts": 3, "staleness": 3})
    users = []
    for i in range(5):
        u = MemoryUser.objects.create(tenant=tenant, external_id=f"u{i}")
        MemoryUser.objects.filter(pk=u.pk).update(created_at=timezone.now() - (10 - i) * DAY)
        for j in range(i if i != 0 else 9):  # u0 (the oldest) has the most facts but is outside the window
            make_fact(u, f"u{i} fact {j}")
        users.append(u)
    url = reverse("users", args=[tenant.slug])
    body = operator.get(url, {"sort": "facts"}).content.decode()
    listed = re.findall(r">(u\d)</a>", body)
    assert listed == ["u4", "u3", "u2"]
    assert 'id="rank-window"' in body and "among the 3 newest of 5 users" in body
    # Sorting by id is not an aggregate: every user, no window.
    body = operator.get(url, {"sort": "name"}).content.decode()
    assert re.findall(r">(u\d)</a>", body) == ["u0", "u1", "u2", "u3", "u4"] and "rank-window" not in body
    # A search narrows the window to the users it matches.
    body = operator.get(url, {"sort": "facts", "q": "u0"}).content.decode()
    assert re.findall(r">(u\d)</a>", body) == ["u0"] and "rank-window" not in body


def test_deep_user_pages_show_each_user_once_with_their_counts(operator, tenant, make_fact):
    for i in range(60):
        u = MemoryUser.objects.create(tenant=tenant, external_id=f"user-{i:02d}")
        if i % 7 == 0:
            make_fact(u, "a fact")
    url = reverse("users", args=[tenant.slug])
    first = operator.get(url, {"sort": "name"}).content.decode()
    second = operator.get(url, {"sort": "name", "page": 2}).content.decode()
    names = re.findall(r">(user-\d\d)</a>", first) + re.findall(r">(user-\d\d)</a>", second)
    assert names == [f"user-{i:02d}" for i in range(60)]
    row = re.search(r">user-56</a>.*?<td class=\"num\">(\d+)</td>", second, re.S)
    assert row.group(1) == "1"


@pytest.fixture
def due(memory_user, make_fact):
    now = timezone.now()
    return [
        make_fact(memory_user, "hard", hard_expires_at=now - DAY, pinned=True),
        make_fact(memory_user, "hard and soft", hard_expires_at=now - DAY, soft_expires_at=now - DAY),
        _backdate(make_fact(memory_user, "soft", soft_expires_at=now - 10 * DAY), 90),
        _backdate(make_fact(memory_user, "soft but pinned", soft_expires_at=now - 10 * DAY, pinned=True), 90),
        _backdate(make_fact(memory_user, "faded", kind="inference", confidence=0.75), 200),
        _backdate(make_fact(memory_user, "faded slowly", kind="skill", confidence=0.75), 200),
        _backdate(
            make_fact(
                memory_user, "faded but read lately", kind="inference", confidence=0.75, last_accessed_at=now - 10 * DAY
            ),
            200,
        ),
        _backdate(
            make_fact(
                memory_user, "faded, soft and fresh read", kind="inference", confidence=0.75, soft_expires_at=now - DAY
            ),
            300,
        ),
        make_fact(memory_user, "fresh"),
        # Imported: true since long ago, stored today, unsure. Not unread for 60 days (last
        # access counts from when it was stored), so the GC leaves it.
        make_fact(memory_user, "imported, unsure", confidence=0.25, valid_from=now - 300 * DAY),
    ]


def test_the_lifecycle_preview_in_sql_equals_the_gc_dry_run(tenant, due):
    gc = lifecycle_gc(tenant_id=tenant.pk, dry_run=True)
    preview = sel.gc_preview(Principal(tenant_id=tenant.pk, role="admin", actor="t", actor_type="staff"))
    assert preview["counts"] == gc["counts"] and preview["total"] == gc["total"] and not preview["capped"]
    assert {(f["id"], f["rule"]) for f in preview["facts"]} == {(f["id"], f["rule"]) for f in gc["facts"]}
    assert gc["total"] >= 4  # the fixture exercises every rule


def test_the_lifecycle_counts_stop_at_the_cap(operator, tenant, memory_user, make_fact, monkeypatch):
    monkeypatch.setattr(sel.oversight, "GC_COUNT_CAP", 3)
    for i in range(5):
        make_fact(memory_user, f"expired {i}", hard_expires_at=timezone.now() - DAY)
    body = operator.get(reverse("lifecycle", args=[tenant.slug])).content.decode()
    assert re.search(r'<tr id="rule-hard_ttl">.*?<td class="num">3\+</td>', body, re.S)


def test_every_eviction_candidate_is_contested(tenant, memory_user, make_fact):
    """The eviction query reads contested facts only; an uncontested fact never passes the threshold."""
    old = _backdate(make_fact(memory_user, "ancient, never read"), 5000)
    contested = _backdate(make_fact(memory_user, "ancient and disputed", contested=True), 5000)
    assert staleness(old) <= EVICTION_THRESHOLD < staleness(contested)
    principal = Principal(tenant_id=tenant.pk, role="admin", actor="t", actor_type="staff")
    assert [f.pk for f in sel.eviction_candidates(principal)] == [contested.pk]
