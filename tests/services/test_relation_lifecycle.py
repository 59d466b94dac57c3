"""Relations end when their source fact stops being true, whatever the door (SPEC §12): a correction,
forget, the per-user cap, the daily GC's three rules, a reviewer's eviction, an undone release. Each
closes the relation (valid_to, and what closed it), never deletes it: the graph as of a date before
still shows it, the graph now does not. Undoing the action (an eviction, a contradiction's "keep")
reopens them as new rows, the closed ones kept as history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from memory_admin.models import Fact, MemoryUser, Relation, RelationEnd
from memory_admin.selectors.access import Principal
from memory_admin.selectors.lifecycle import GC_RULES
from memory_admin.services import lifecycle
from memory_admin.services.contradictions import contradiction_reopen, contradiction_resolve
from memory_admin.services.curation import eviction_evict, quarantine_release, queue_action_undo
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_write

PAST = datetime(2025, 1, 1, tzinfo=UTC)
BEFORE = "2025-06-01T00:00:00Z"  # after the facts became true, before anything closed them
DAY = timedelta(days=1)


@pytest.fixture
def system(tenant):
    return Principal.system(tenant.pk)


@pytest.fixture
def alice(tenant):
    return MemoryUser.objects.create(tenant=tenant, external_id="alice")


def works_at(system, user, company: str, person: str = "Dana Scully", text: str = "", **fields) -> Fact:
    """`<person> works at <company>` (or `text` saying so), linked as the pipeline links it: a works_at
    relation from PAST."""
    fact = fact_write(
        principal=system,
        memory_user=user,
        content=text or f"{person} works at {company}.",
        source="user_stated",
        observed_at=PAST,
        **fields,
    ).fact
    fact_entities_link(
        principal=system,
        fact=fact,
        mentions=[EntityMention(person, "person", "subject"), EntityMention(company, "company", "object")],
        relations=[RelationDraft(person, "works_at", company)],
    )
    return fact


def relation_of(fact: Fact) -> Relation:
    return Relation.objects.select_related("object").get(source_fact=fact)


def graph_objects(api, relation: Relation, **params) -> set[str]:
    body = api.get(f"entities/{relation.subject_id}/graph", **params).json()
    return {edge["object"]["name"] for edge in body["edges"]}


def assert_closed(api, fact: Fact, reason: str, *, by: Fact | None = None) -> None:
    """Closed, not deleted, with what closed it; gone from the graph now, there as of before."""
    relation = relation_of(fact)
    assert relation.valid_to is not None and relation.closed_reason == reason
    assert relation.invalidated_by_id == (by.pk if by else None)
    company = relation.object.name
    assert company not in graph_objects(api, relation)
    assert company in graph_objects(api, relation, as_of=BEFORE)
    detail = api.get(f"entities/{relation.subject_id}").json()
    shown = next(r for r in detail["relations"] if r["id"] == relation.pk)
    assert shown["closed_reason"] == reason and shown["valid_to"] is not None


def test_an_open_relation_shows_now_and_has_no_closing_reason(api, system, alice):
    fact = works_at(system, alice, "Acme Robotics")
    relation = relation_of(fact)
    assert relation.valid_to is None and relation.closed_reason == ""
    assert graph_objects(api, relation) == {"Acme Robotics"}


def test_a_correction_closes_with_the_correcting_fact(api, system, alice):
    fact = works_at(system, alice, "Acme Robotics")
    r = api.post(f"facts/{fact.pk}/correct", {"content": "Dana Scully works at Globex."})
    assert r.status_code == 201, r.content
    assert_closed(api, fact, RelationEnd.SUPERSEDED, by=Fact.objects.get(pk=r.json()["id"]))


def test_forget_closes(api, system, alice):
    fact = works_at(system, alice, "Acme Robotics")
    assert api.delete(f"facts/{fact.pk}").status_code in (200, 204)
    assert_closed(api, fact, RelationEnd.FORGOTTEN)


def test_eviction_by_the_cap_closes_the_evicted_facts_relations_only(api, admin_api, system, alice):
    weak = works_at(system, alice, "Acme Robotics", confidence=0.75)
    strong = works_at(system, alice, "the Initech plant in Ohio", "Walter Skinner", confidence=1.0)
    assert admin_api.patch("settings", {"fact_cap": 2}).status_code == 200
    r = api.post("users/alice/facts", {"content": "The user drinks green tea.", "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    assert Fact.objects.get(pk=weak.pk).status == Fact.Status.EVICTED
    assert_closed(api, weak, RelationEnd.CAPPED)
    assert relation_of(strong).valid_to is None


def aged(fact: Fact, **fields) -> Fact:
    """As if time had passed: created 200 days ago, never read since, with the given expiries."""
    now = timezone.now()
    Fact.objects.filter(pk=fact.pk).update(created_at=now - 200 * DAY, last_accessed_at=None, **fields)
    return fact


@pytest.mark.parametrize(
    ("rule", "fields", "status"),
    [
        ("hard_ttl", {"hard_expires_at": timezone.now() - DAY}, Fact.Status.EVICTED),
        ("soft_ttl_unread", {"soft_expires_at": timezone.now() - 10 * DAY}, Fact.Status.EVICTED),
        ("low_confidence", {"kind": "inference", "confidence": 0.75}, Fact.Status.STALE),
    ],
)
def test_each_gc_rule_closes_with_its_name(api, system, alice, tenant, rule, fields, status):
    fact = aged(works_at(system, alice, "Acme Robotics"), **fields)
    kept = works_at(system, alice, "the Initech plant in Ohio", "Walter Skinner")
    report = lifecycle.lifecycle_gc(tenant_id=tenant.pk, dry_run=True)
    assert report["counts"][rule] == 1
    assert relation_of(fact).valid_to is None  # the dry run changes nothing
    lifecycle.lifecycle_gc(tenant_id=tenant.pk, dry_run=False)
    assert Fact.objects.get(pk=fact.pk).status == status
    assert_closed(api, fact, rule)
    assert relation_of(kept).valid_to is None


def test_every_gc_rule_has_a_closing_reason():
    assert {rule.key for rule in GC_RULES} <= set(RelationEnd.values)


def test_a_reviewer_confirming_an_eviction_closes(api, system, alice):
    fact = works_at(system, alice, "Acme Robotics")
    eviction_evict(principal=system, fact_id=fact.pk)
    assert_closed(api, fact, RelationEnd.REVIEW_EVICTED)


def test_an_undone_release_sends_the_fact_back_to_quarantine_and_closes(api, system, alice):
    fact = works_at(system, alice, "Acme Robotics")
    Fact.objects.filter(pk=fact.pk).update(status=Fact.Status.QUARANTINED)
    quarantine_release(principal=system, fact_id=fact.pk)
    assert relation_of(fact).valid_to is None
    queue_action_undo(principal=system, fact_id=fact.pk, action="release")
    assert_closed(api, fact, RelationEnd.QUARANTINED)


def test_closing_is_once_a_second_door_keeps_the_first_reason(api, system, alice, tenant):
    fact = works_at(system, alice, "Acme Robotics")
    assert api.delete(f"facts/{fact.pk}").status_code in (200, 204)
    closed = relation_of(fact).valid_to
    aged(fact, hard_expires_at=timezone.now() - DAY)
    lifecycle.lifecycle_gc(tenant_id=tenant.pk, dry_run=False)
    relation = relation_of(fact)
    assert relation.closed_reason == RelationEnd.FORGOTTEN and relation.valid_to == closed


def test_erase_removes_the_users_relations(admin_api, system, alice):
    works_at(system, alice, "Acme Robotics")
    assert admin_api.delete("users/alice").status_code in (200, 204)
    assert not Relation.objects.filter(memory_user=alice).exists()


def link_prefers(system, fact_id, drink: str) -> None:
    fact_entities_link(
        principal=system,
        fact=Fact.objects.get(pk=fact_id),
        mentions=[EntityMention("Alice", "person", "subject"), EntityMention(drink, "other", "object")],
        relations=[RelationDraft("Alice", "prefers", drink)],
    )


def test_reopening_a_kept_contradiction_reopens_what_the_keep_closed(api, system, tenant):
    a = api.post("users/alice/facts", {"content": "Alice prefers tea in the morning", "confidence": 0.8}).json()
    link_prefers(system, a["fact"]["id"], "tea")
    b = api.post("users/alice/facts", {"content": "Alice prefers coffee in the morning", "confidence": 0.85}).json()
    assert b["outcome"] == "queued_for_review"
    link_prefers(system, b["fact"]["id"], "coffee")
    operator = Principal(tenant_id=tenant.pk, role="operator", actor="staff:op", actor_type="staff")
    contradiction_resolve(principal=operator, contradiction_id=b["contradiction_id"], action="keep_b")
    tea = Relation.objects.get(object__name="tea")
    assert tea.closed_reason == RelationEnd.SUPERSEDED and str(tea.invalidated_by_id) == b["fact"]["id"]
    contradiction_reopen(principal=operator, contradiction_id=b["contradiction_id"])
    rows = list(Relation.objects.filter(object__name="tea").order_by("pk"))
    # The closed row stays (history); a new open row holds from the reopening on.
    assert [(r.valid_to is None, r.closed_reason) for r in rows] == [(False, "superseded"), (True, "")]
    assert rows[1].valid_from >= rows[0].valid_to


def test_undoing_an_eviction_reopens_its_relations_as_new_rows(api, system, alice):
    fact = works_at(system, alice, "Acme Robotics")
    eviction_evict(principal=system, fact_id=fact.pk)
    closed = relation_of_closed(fact)
    queue_action_undo(principal=system, fact_id=fact.pk, action="evict")
    reopened = Relation.objects.get(source_fact=fact, valid_to__isnull=True)
    assert reopened.pk != closed.pk and reopened.valid_from >= closed.valid_to
    assert "Acme Robotics" in graph_objects(api, reopened)
    # Evicted and brought back again: still one open row per edge.
    eviction_evict(principal=system, fact_id=fact.pk)
    queue_action_undo(principal=system, fact_id=fact.pk, action="evict")
    assert Relation.objects.filter(source_fact=fact, valid_to__isnull=True).count() == 1
    assert Relation.objects.filter(source_fact=fact).count() == 3


def relation_of_closed(fact: Fact) -> Relation:
    return Relation.objects.get(source_fact=fact, valid_to__isnull=False)


def test_an_edge_two_facts_state_holds_until_the_last_of_them_ends(api, system, alice):
    first = works_at(system, alice, "Acme Robotics")
    second = works_at(system, alice, "Acme Robotics", text="Dana Scully has a job at Acme Robotics in Berlin.")
    assert second.pk != first.pk
    relation = relation_of(first)
    assert set(relation.stated_by.values_list("pk", flat=True)) == {first.pk, second.pk}
    assert Relation.objects.count() == 1  # one edge, stated twice

    assert api.delete(f"facts/{first.pk}").status_code in (200, 204)
    relation.refresh_from_db()
    assert relation.valid_to is None and relation.source_fact_id == second.pk  # handed over, not closed
    assert "Acme Robotics" in graph_objects(api, relation)

    assert api.delete(f"facts/{second.pk}").status_code in (200, 204)
    relation.refresh_from_db()
    assert relation.valid_to is not None and relation.closed_reason == RelationEnd.FORGOTTEN


def test_a_correction_of_one_statement_keeps_the_edge_another_fact_states(api, system, alice):
    first = works_at(system, alice, "Acme Robotics")
    second = works_at(system, alice, "Acme Robotics", text="Dana Scully has a job at Acme Robotics in Berlin.")
    r = api.post(f"facts/{first.pk}/correct", {"content": "Dana Scully worked at Acme Robotics in 2024."})
    assert r.status_code == 201, r.content
    relation = Relation.objects.get()
    assert relation.valid_to is None and relation.source_fact_id == second.pk


def test_an_operator_cannot_reopen_a_relation_whose_fact_was_forgotten(api, system, alice, tenant):
    """Reopening is the undo of an operator's close; a relation its fact took with it comes back only
    with the fact, and keeps saying why it closed."""
    from memory_admin.errors import Invalid
    from memory_admin.services.entity_curation import relation_close, relation_reopen

    operator = Principal(tenant_id=tenant.pk, role="operator", actor="staff:otto", actor_type="staff")
    fact = works_at(system, alice, "Acme Robotics")
    assert api.delete(f"facts/{fact.pk}").status_code in (200, 204)
    with pytest.raises(Invalid):
        relation_reopen(principal=operator, relation_id=relation_of(fact).pk)
    assert_closed(api, fact, RelationEnd.FORGOTTEN)
    # An operator's own close is theirs to undo.
    other = works_at(system, alice, "Globex", person="Hank Scorpio")
    relation_close(principal=operator, relation_id=relation_of(other).pk)
    reopened = relation_reopen(principal=operator, relation_id=relation_of(other).pk)
    assert reopened.valid_to is None and reopened.closed_reason == ""
