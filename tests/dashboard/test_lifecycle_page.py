"""The lifecycle page: the daily GC's dry run by rule with a paginated sample, "Run GC now" for admins
and "Run contradiction scan now" for curators; reads for auditors, nothing for members."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from memory_admin.embedding import embed_one
from memory_admin.models import AuditEvent, Contradiction, Fact

DAY = timedelta(days=1)
HTMX = {"HTTP_HX_REQUEST": "true"}


def _url(tenant, name="lifecycle"):
    return reverse(name, args=[tenant.slug])


def _backdate(fact: Fact, days: int) -> Fact:
    Fact.objects.filter(pk=fact.pk).update(
        created_at=timezone.now() - days * DAY, valid_from=timezone.now() - days * DAY
    )
    return fact


@pytest.fixture
def due(memory_user, make_fact):
    """One fact per GC rule, and two the GC must leave alone."""
    now = timezone.now()
    return {
        "hard": make_fact(memory_user, "At the Lisbon offsite this week", hard_expires_at=now - DAY, pinned=True),
        "soft": _backdate(make_fact(memory_user, "Trying out Zed as an editor", soft_expires_at=now - 10 * DAY), 90),
        "faded": _backdate(make_fact(memory_user, "Might like jazz", kind="inference", confidence=0.75), 200),
        "fresh": make_fact(memory_user, "Prefers vim"),
        "soft_fresh": make_fact(memory_user, "Evaluating Linear", soft_expires_at=now - DAY),
    }


def _links(body: str) -> set[str]:
    return set(re.findall(r"/facts/([0-9a-f-]{36})/", body))


# --- Who may do what ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "page", "gc", "scan"),
    [
        ("admin", 200, 200, 200),
        ("operator", 200, 403, 200),
        ("auditor", 200, 403, 403),
        ("member", 403, 403, 403),
    ],
)
def test_roles(tenant, make_staff, memory_user, role, page, gc, scan):
    client = make_staff(tenant, role, memory_user if role == "member" else None)
    r = client.get(_url(tenant))
    assert r.status_code == page
    if page == 200:
        body = r.content.decode()
        assert ("Run GC now" in body) == (gc == 200)
        assert ("Run contradiction scan now" in body) == (scan == 200)
    assert client.post(_url(tenant, "lifecycle_gc_now")).status_code == gc
    assert client.post(_url(tenant, "contradiction_scan_now"), {"window": "2h"}).status_code == scan
    runs = AuditEvent.objects.filter(action__startswith="lifecycle.")
    assert runs.count() == (gc == 200) + (scan == 200)


def test_another_tenant_is_404_and_its_gc_never_runs(tenant, other_tenant, make_staff, make_fact):
    from memory_admin.models import MemoryUser

    foreign = MemoryUser.objects.create(tenant=other_tenant, external_id="mallory")
    fact = make_fact(foreign, "Foreign fact past its TTL", hard_expires_at=timezone.now() - DAY)
    admin = make_staff(tenant, "admin")
    for name in ("lifecycle", "lifecycle_gc_now", "contradiction_scan_now"):
        call = admin.get if name == "lifecycle" else admin.post
        assert call(reverse(name, args=[other_tenant.slug])).status_code == 404
    # Its own page neither shows nor touches the other tenant's facts.
    assert str(fact.pk) not in admin.post(_url(tenant, "lifecycle_gc_now")).content.decode()
    fact.refresh_from_db()
    assert fact.status == "active"


def test_actions_are_post_only_and_need_the_csrf_token(tenant, make_staff, due):
    admin = make_staff(tenant, "admin")
    assert admin.get(_url(tenant, "lifecycle_gc_now")).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(get_user_model().objects.get(username=admin.username))
    assert strict.post(_url(tenant, "lifecycle_gc_now")).status_code == 403
    assert strict.post(_url(tenant, "contradiction_scan_now")).status_code == 403
    assert set(Fact.objects.values_list("status", flat=True)) == {"active"}
    page = strict.get(_url(tenant)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    assert strict.post(_url(tenant, "lifecycle_gc_now"), {"csrfmiddlewaretoken": token}).status_code == 200
    assert Fact.objects.get(pk=due["hard"].pk).status == "evicted"


# --- The dry run ----------------------------------------------------------------------------------


def test_the_dry_run_shows_counts_by_rule_and_links_the_affected_facts_and_changes_nothing(auditor, tenant, due):
    body = auditor.get(_url(tenant)).content.decode()
    for rule in ("hard_ttl", "soft_ttl_unread", "low_confidence"):
        row = re.search(rf'<tr id="rule-{rule}">(.*?)</tr>', body, re.S).group(1)
        assert re.search(r'<td class="num">1</td>', row), row
    assert _links(body) == {str(due[k].pk) for k in ("hard", "soft", "faded")}
    assert "hard TTL expired" in body and "marked stale" in body
    assert set(Fact.objects.values_list("status", flat=True)) == {"active"}
    assert not AuditEvent.objects.exists()


def test_the_sample_is_paginated(operator, tenant, memory_user, make_fact):
    past = timezone.now() - DAY
    ids = {str(make_fact(memory_user, f"Expired fact number {i}", hard_expires_at=past).pk) for i in range(60)}
    first = operator.get(_url(tenant)).content.decode()
    second = operator.get(_url(tenant), {"page": 2}).content.decode()
    assert len(_links(first)) == 50 and len(_links(second)) == 10
    assert _links(first) | _links(second) == ids
    assert re.search(r'<tr id="rule-hard_ttl">.*?<td class="num">60</td>', first, re.S)


def test_fact_content_is_escaped(operator, tenant, memory_user, make_fact):
    make_fact(
        memory_user, '<script>alert("gc")</script><img src=x onerror=alert(1)>', hard_expires_at=timezone.now() - DAY
    )
    body = operator.get(_url(tenant)).content.decode()
    assert "<script>alert" not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(&quot;gc&quot;)&lt;/script&gt;" in body


def test_the_page_runs_a_bounded_number_of_queries(
    operator, tenant, memory_user, make_fact, django_assert_max_num_queries
):
    for i in range(60):
        make_fact(memory_user, f"Expired fact number {i}", hard_expires_at=timezone.now() - DAY)
    operator.get(_url(tenant))
    with django_assert_max_num_queries(12):
        assert operator.get(_url(tenant)).status_code == 200


# --- Running ---------------------------------------------------------------------------------------


def test_run_gc_now_applies_the_rules_audits_who_ran_it_and_shows_the_result(tenant, make_staff, due):
    admin = make_staff(tenant, "admin")
    r = admin.post(_url(tenant, "lifecycle_gc_now"))
    assert r.status_code == 200
    body = r.content.decode()
    assert "GC ran: 3 facts changed" in body
    result = re.search(r'<section class="card" id="gc-result".*?</section>', body, re.S).group(0)
    assert _links(result) == {str(due[k].pk) for k in ("hard", "soft", "faded")}
    statuses = dict(Fact.objects.values_list("pk", "status"))
    assert statuses[due["hard"].pk] == statuses[due["soft"].pk] == "evicted"
    assert statuses[due["faded"].pk] == "stale"
    assert statuses[due["fresh"].pk] == statuses[due["soft_fresh"].pk] == "active"
    # Each fact change is audited by the lifecycle job itself; the run names the person who started it.
    assert AuditEvent.objects.filter(action="fact.lifecycle", actor="lifecycle").count() == 3
    run = AuditEvent.objects.get(action="lifecycle.gc")
    assert run.actor == f"staff:{admin.username}" and run.tenant_id == tenant.pk
    assert run.after["total"] == 3 and run.after["counts"]["low_confidence"] == 1
    # The dry run under the result is now empty.
    assert re.search(r'<tr id="rule-hard_ttl">.*?<td class="num">0</td>', body, re.S)


def test_run_gc_with_htmx_returns_just_the_page_body(tenant, make_staff, due):
    admin = make_staff(tenant, "admin")
    body = admin.post(_url(tenant, "lifecycle_gc_now"), **HTMX).content.decode()
    assert body.lstrip().startswith('<div id="lifecycle-body">') and "<html" not in body
    assert "GC ran: 3 facts changed" in body


def test_contradiction_scan_now_queues_what_the_write_path_missed(tenant, make_staff, memory_user, make_fact):
    operator = make_staff(tenant, "operator")
    # Written around the write path (as an import would), so nobody compared them yet.
    for text, confidence in (("The user lives in Berlin", 0.8), ("The user lives in Munich", 0.85)):
        make_fact(memory_user, text, confidence=confidence, embedding=embed_one(text))
    r = operator.post(_url(tenant, "contradiction_scan_now"), {"window": "all"})
    assert r.status_code == 200
    result = re.search(r'<section class="card" id="scan-result".*?</section>', r.content.decode(), re.S).group(0)
    assert "all active facts" in result and "<b>1</b> new contradiction queued" in result
    assert Contradiction.objects.filter(tenant=tenant, status="open", detector="scan").count() == 1
    run = AuditEvent.objects.get(action="lifecycle.contradiction_scan")
    assert run.actor == f"staff:{operator.username}" and run.after["queued"] == 1
    assert run.after["since"] is None
    # Known pairs are skipped: a second run queues nothing new.
    operator.post(_url(tenant, "contradiction_scan_now"), {"window": "all"})
    assert Contradiction.objects.filter(tenant=tenant).count() == 1


def test_the_scan_window_limits_what_is_checked(tenant, make_staff, memory_user, make_fact):
    operator = make_staff(tenant, "operator")
    for text in ("The user lives in Berlin", "The user lives in Munich"):
        fact = make_fact(memory_user, text, embedding=embed_one(text))
        Fact.objects.filter(pk=fact.pk).update(updated_at=timezone.now() - 3 * DAY)
    operator.post(_url(tenant, "contradiction_scan_now"), {"window": "24h"})
    assert not Contradiction.objects.exists()
    assert AuditEvent.objects.get(action="lifecycle.contradiction_scan").after["checked"] == 0
