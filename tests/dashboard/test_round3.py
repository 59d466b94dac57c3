"""Round 3 of the dashboard (issue 31), below the browser: what the review card, the member pages,
the notebook conflict and the facts list hold, and the rules behind them (restoring a forgotten fact)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from memory_admin.errors import Conflict
from memory_admin.models import AuditEvent, Contradiction, Fact
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import Principal
from memory_admin.services.curation import eviction_evict
from memory_admin.services.facts import fact_forget, fact_restore
from memory_admin.views.diffs import add_their_lines, side_by_side

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def _staff(tenant, role="operator"):
    return Principal(tenant_id=tenant.pk, role=role, actor="staff:test", actor_type="staff")


@pytest.mark.parametrize(
    ("detector", "reason", "plain"),
    [
        (
            "semantic",
            "same one-valued predicate ('prefers') with different values",
            "Both say what Alice prefers, with different answers; only one can be true now.",
        ),
        ("semantic", "one statement negates the other", "One says the opposite of the other."),
        ("scan", "", "The two are about the same thing and give different answers."),
        ("semantic", "the user moved cities", "The user moved cities."),
    ],
)
def test_a_card_gives_its_reason_in_plain_words(memory_user, make_contradiction, detector, reason, plain):
    item = make_contradiction(memory_user)
    Contradiction.objects.filter(pk=item.pk).update(detector=detector, reason=reason)
    item.refresh_from_db()
    assert sel.plain_reason(item) == plain


def test_the_queue_shows_the_person_the_reason_and_each_side_s_door(operator, tenant, memory_user, make_contradiction):
    item = make_contradiction(memory_user)
    Contradiction.objects.filter(pk=item.pk).update(
        reason="same one-valued predicate ('prefers') with different values"
    )
    Fact.objects.filter(pk=item.fact_a_id).update(created_by="staff:otto")
    body = operator.get(reverse("review", args=[tenant.slug])).content.decode()
    assert '<h2 class="card-title" id="t-' in body and ">Alice</h2>" in body
    assert "Both say what Alice prefers" in body and "one-valued" not in body
    assert "Written in the dashboard by otto." in body
    assert re.search(r'Contradictions <span class="count" id="count-contradictions">1</span>', body)


def test_the_queue_runs_the_same_number_of_queries_for_one_card_or_twenty(
    operator, tenant, memory_user, make_contradiction, django_assert_max_num_queries
):
    make_contradiction(memory_user)
    url = reverse("review", args=[tenant.slug])
    operator.get(url)
    with django_assert_max_num_queries(8):
        operator.get(url)
    for i in range(19):
        make_contradiction(memory_user, f"Prefers tea {i}", f"Prefers coffee {i}")
    with django_assert_max_num_queries(8):
        body = operator.get(url).content.decode()
    assert body.count('class="card review-card"') == 20


def test_a_forgotten_fact_comes_back_and_only_a_forgotten_one(tenant, memory_user, make_fact):
    staff = _staff(tenant)
    kept = make_fact(memory_user, "Alice lives in Paris", key="personal.city")
    fact_forget(principal=staff, fact_id=kept.pk)
    restored = fact_restore(principal=staff, fact_id=kept.pk)
    assert restored.status == "active"
    assert AuditEvent.objects.filter(action="fact.restore", target_id=str(kept.pk)).count() == 1

    with pytest.raises(Conflict) as in_use:
        fact_restore(principal=staff, fact_id=kept.pk)
    assert in_use.value.code == "not_forgotten"

    stale = make_fact(memory_user, "Alice drinks tea", contested=True)
    eviction_evict(principal=staff, fact_id=stale.pk)
    with pytest.raises(Conflict) as evicted:
        fact_restore(principal=staff, fact_id=stale.pk)
    assert evicted.value.code == "not_forgotten"  # a reviewer's eviction is undone in the review queue

    fact_forget(principal=staff, fact_id=kept.pk)
    make_fact(memory_user, "Alice lives in Rome", key="personal.city")
    with pytest.raises(Conflict) as taken:
        fact_restore(principal=staff, fact_id=kept.pk)
    assert taken.value.code == "key_taken"
    assert Fact.objects.get(pk=kept.pk).status == "evicted"


def test_a_member_sees_only_what_they_forgot_under_forgotten_by_you(tenant, member, memory_user, make_fact):
    mine = make_fact(memory_user, "Alice likes jazz")
    theirs = make_fact(memory_user, "Alice likes techno")
    url = reverse("user_facts", args=[tenant.slug, memory_user.pk])
    row = member.post(reverse("fact_forget", args=[tenant.slug, mine.pk]), {"next": url}, **HTMX).content.decode()
    assert "Forgotten by you" in row and "Undo: restore it" in row
    fact_forget(principal=_staff(tenant), fact_id=theirs.pk)
    forgotten = member.get(url, {"show": "forgotten"}).content.decode()
    assert "Alice likes jazz" in forgotten and "Alice likes techno" not in forgotten
    everything = member.get(url, {"show": "all"}).content.decode()
    assert "Forgotten by a team member" in everything  # someone else's Forget is named as theirs
    back = member.post(reverse("fact_restore", args=[tenant.slug, mine.pk]), **HTMX).content.decode()
    assert "Restored: assistants use it again." in back and "Forget</button>" in back


def test_forgetting_on_the_fact_s_own_page_does_not_repeat_its_text_under_the_title(
    tenant, member, memory_user, make_fact
):
    fact = make_fact(memory_user, "Alice likes jazz")
    page = member.get(reverse("fact_detail", args=[tenant.slug, fact.pk])).content.decode()
    form = re.search(r"<form[^>]*/forget/[^>]*>(.*?)</form>", page, re.S).group(1)
    assert 'name="link_off" value="1"' in form
    row = member.post(reverse("fact_forget", args=[tenant.slug, fact.pk]), {"link_off": "1"}, **HTMX).content.decode()
    assert "Forgotten by you" in row and "Alice likes jazz" not in row
    in_list = member.post(reverse("fact_restore", args=[tenant.slug, fact.pk]), **HTMX).content.decode()
    assert "Alice likes jazz" in in_list  # in the list, the row still names its fact


def test_facts_across_users_weighs_under_60_kb_for_50_rows(operator, tenant, memory_user, make_fact):
    for i in range(60):
        make_fact(memory_user, f"Alice mentioned a fairly ordinary preference number {i} about her tools and habits")
    body = operator.get(reverse("facts", args=[tenant.slug])).content
    assert body.count(b'class="fact-row') == 50
    assert len(body) <= 60_000, len(body)
    assert b'<form method="post"' not in body.split(b'id="facts-list"')[1]  # no action forms per row


def test_side_by_side_pairs_changed_lines_and_keeps_the_rest():
    theirs = "# Alice\n- Lives in Berlin\n- Likes tea\n"
    mine = "# Alice\n- Lives in Lyon\n- Likes tea\n- Plays chess\n"
    rows = side_by_side(theirs, mine)
    assert [(r["kind"], r["theirs"], r["mine"]) for r in rows] == [
        ("same", "# Alice", "# Alice"),
        ("changed", "- Lives in Berlin", "- Lives in Lyon"),
        ("same", "- Likes tea", "- Likes tea"),
        ("mine", "", "- Plays chess"),
    ]
    assert add_their_lines(theirs, mine) == "# Alice\n- Lives in Lyon\n- Lives in Berlin\n- Likes tea\n- Plays chess\n"
    assert add_their_lines(theirs, theirs) == theirs


def test_the_demo_s_review_cards_quote_the_message_each_side_came_from(make_staff):
    """On a fresh `up`, the review queue is the first thing an operator opens: its cards quote what the
    person said, with the thread linked, not only the door the facts came in by."""
    from django.core.management import call_command

    from memory_admin.models import Message, Tenant

    call_command("seed_demo", tenant="reviewdemo", users=6, seed=1)
    tenant = Tenant.objects.get(slug="reviewdemo")
    queued = Contradiction.objects.filter(tenant=tenant, status=Contradiction.Status.OPEN)
    sides = Fact.objects.filter(
        pk__in=[*queued.values_list("fact_a", flat=True), *queued.values_list("fact_b", flat=True)]
    )
    said = Message.objects.filter(facts__in=sides)
    assert queued.exists() and said.count() == sides.count()  # every side of every card was said
    body = make_staff(tenant, "operator").get(reverse("review", args=[tenant.slug])).content.decode()
    for message in said:
        assert message.content.replace("'", "&#x27;") in body, message.content
    assert "morning-routine" in body  # the thread each quote is linked to
