"""`manage.py rejudge_contradictions`: what an older offline judge decided between two facts is judged again
by today's rules; small talk it had called contradictory leaves the review queue (and a fact it had
superseded by confidence comes back), a real contradiction stays."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memory_admin.models import AuditEvent, Contradiction, Fact
from memory_admin.selectors.access import Principal
from memory_admin.services.facts import refresh_contested, supersede
from memory_admin.services.facts.conflicts import contradiction_record
from memory_admin.services.judge import Verdict

OLD_VERDICT = Verdict(True, "one statement negates the other", "rules")


def fact(api, user, content, confidence=0.8):
    r = api.post(f"users/{user}/facts", {"content": content, "confidence": confidence})
    assert r.status_code in (200, 201), r.content
    return Fact.objects.get(pk=r.json()["fact"]["id"])


def as_the_old_judge_left_it(tenant, a, b, *, winner=None):
    """The Contradiction the judge before this one wrote for a pair it no longer calls contradictory."""
    item = contradiction_record(
        Principal.system(tenant.pk),
        fact_a=a,
        fact_b=b,
        detector=Contradiction.Detector.SEMANTIC,
        verdict=OLD_VERDICT,
        similarity=0.82,
        winner=winner,
        resolved_by="system",
    )
    if winner is not None:
        supersede(a if winner is b else b, by=winner, reason="contradicted by a surer fact")
    refresh_contested([a.pk, b.pk])
    return item


def rejudge(*args):
    out = io.StringIO()
    call_command("rejudge_contradictions", *args, stdout=out)
    return out.getvalue()


def contested_flags(api, user):
    return {f["content"]: f["contested"] for f in api.get(f"users/{user}/facts").json()["items"]}


def test_small_talk_leaves_the_queue_a_real_contradiction_stays_and_a_superseded_fact_comes_back(api, tenant):
    thanks = fact(api, "sol", "Sol: Thanks! It's hard when things don't go my way, but I'll keep pushing.")
    best = fact(api, "sol", "Sol: Thanks! I'll do my best and keep pushing.")
    small_talk = as_the_old_judge_left_it(tenant, thanks, best)
    wait = fact(api, "sol", "Sol: Can't wait to see the new studio!", confidence=0.72)
    see = fact(api, "sol", "Sol: See you at the studio on Saturday!", confidence=0.95)
    settled = as_the_old_judge_left_it(tenant, wait, see, winner=see)
    tea = fact(api, "sol", "Sol likes green tea", confidence=0.8)
    r = api.post("users/sol/facts", {"content": "Sol does not like green tea", "confidence": 0.85})
    assert r.json()["outcome"] == "queued_for_review"  # today's judge still calls this one contradictory
    real = Contradiction.objects.get(pk=r.json()["contradiction_id"])
    assert contested_flags(api, "sol")[thanks.content] is True
    assert Fact.objects.get(pk=wait.pk).status == "superseded"

    said = rejudge()
    assert "3 contradictions the offline judge decided were judged again; 1 still contradictory" in said
    assert "1 open ones would be dismissed" in said and "Nothing was changed" in said
    assert Contradiction.objects.get(pk=small_talk.pk).status == "open"
    assert contested_flags(api, "sol")[thanks.content] is True

    said = rejudge("--apply")
    assert "1 open ones dismissed; 1 settled by confidence reopened and dismissed" in said
    small_talk.refresh_from_db()
    settled.refresh_from_db()
    real.refresh_from_db()
    assert (small_talk.status, small_talk.resolution, small_talk.resolved_by) == ("dismissed", "dismiss", "rejudge")
    assert "no longer calls these contradictory" in small_talk.note
    assert (settled.status, settled.resolution) == ("dismissed", "dismiss")
    assert real.status == "open"
    flags = contested_flags(api, "sol")
    assert flags[thanks.content] is False and flags[best.content] is False
    assert flags[wait.content] is False  # active again, listed with the user's facts
    assert flags[tea.content] is True and flags["Sol does not like green tea"] is True
    assert AuditEvent.objects.filter(action="contradiction.reopen", actor="rejudge").count() == 1
    assert AuditEvent.objects.filter(action="contradiction.resolve", actor="rejudge").count() == 2

    assert "0 open ones dismissed; 0 settled by confidence" in rejudge("--apply")  # nothing left to do


def test_a_fact_changed_since_is_left_as_it_is(api, tenant):
    wait = fact(api, "kai", "Kai: Can't wait to see the new studio!", confidence=0.72)
    see = fact(api, "kai", "Kai: See you at the studio on Saturday!", confidence=0.95)
    settled = as_the_old_judge_left_it(tenant, wait, see, winner=see)
    # A reviewer corrected the superseded fact since: its successor is another fact now.
    other = fact(api, "kai", "Kai moved the studio visit to Sunday", confidence=0.95)
    Fact.objects.filter(pk=wait.pk).update(superseded_by=other)
    assert "1 left (changed since)" in rejudge("--apply")
    settled.refresh_from_db()
    assert settled.status == "auto_resolved" and Fact.objects.get(pk=wait.pk).status == "superseded"


def test_an_unknown_tenant_is_refused_by_name(db):
    with pytest.raises(CommandError, match="No tenant has the slug 'nope'"):
        rejudge("--tenant", "nope")
