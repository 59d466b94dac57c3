"""The entity pages (SPEC §12) through the Django client: what an operator sees (list, entity page with
aliases, facts, relations over time and the graph), curation with confirm and undo, the entity-merge
review tab, escaping, and who may do what."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from memory_admin.models import Entity, EntityMergeReview, FactEntity, Relation
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_correct, fact_write

HTMX = {"HTTP_HX_REQUEST": "true"}
PAST = datetime(2025, 1, 1, tzinfo=UTC)


def text(response) -> str:
    """The page as a person reads it: tags dropped, whitespace collapsed."""
    body = re.sub(r"<script.*?</script>", " ", response.content.decode(), flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", body).split())


def write(tenant, user, content, mentions, relations=()):
    system = Principal.system(tenant.pk)
    fact = fact_write(principal=system, memory_user=user, content=content, source="user_stated", observed_at=PAST).fact
    fact_entities_link(principal=system, fact=fact, mentions=mentions, relations=relations)
    return fact


@pytest.fixture
def graph(tenant, memory_user):
    works = write(
        tenant,
        memory_user,
        "Dana works at Initech.",
        [EntityMention("Dana", "person", "subject", ("Dee",)), EntityMention("Initech", "company", "object")],
        [RelationDraft("Dana", "works_at", "Initech")],
    )
    write(
        tenant,
        memory_user,
        "Initech is based in Austin.",
        [EntityMention("Initech", "company", "subject"), EntityMention("Austin", "place", "object")],
        [RelationDraft("Initech", "based_in", "Austin")],
    )
    write(tenant, memory_user, "Robert Dana reviewed the budget.", [EntityMention("Robert Dana", "person", "subject")])
    return {e.name: e for e in Entity.objects.filter(memory_user=memory_user)} | {"works": works}


def url(tenant, *parts) -> str:
    return "/".join([f"/t/{tenant.slug}", *[str(p) for p in parts]]) + "/"


def test_the_list_shows_entities_with_counts_and_filters_by_alias_and_type(operator, tenant, graph):
    page = text(operator.get(url(tenant, "entities")))
    assert "Entities" in page and "Dana person Dee alice 1 1" in page and "Initech company alice 2 2" in page
    only = text(operator.get(url(tenant, "entities"), {"q": "DEE"}))
    assert "Dana" in only and "Initech" not in only
    places = text(operator.get(url(tenant, "entities"), {"type": "place"}))
    assert "Austin" in places and "Initech" not in places
    nav = operator.get(url(tenant, "entities")).content.decode()
    assert re.search(r'<a href="/t/[^"]+/entities/" aria-current="page">Entities</a>', nav)


def test_the_entity_page_shows_aliases_facts_relations_over_time_and_the_graph(operator, tenant, graph):
    system = Principal.system(tenant.pk)
    fact_correct(principal=system, fact_id=graph["works"].pk, content="Dana works at Globex.")
    response = operator.get(url(tenant, "entities", graph["Dana"].pk))
    page = text(response)
    assert "Also called Dee" in page
    assert "Dana works at Initech. subject superseded" in page
    # The relation closed by the correction, with the correcting fact.
    assert "Dana works_at Initech closed" in page and "Closed by the correction “Dana works at Globex.”" in page
    assert "No relation held now." in page  # the only relation is closed
    past = operator.get(url(tenant, "entities", graph["Dana"].pk), {"as_of": "2025-06-01", "depth": "2"})
    svg = re.search(r"<svg class=\"entity-graph\".*?</svg>", past.content.decode(), flags=re.S).group(0)
    assert ">Dana<" in svg and ">Initech<" in svg and ">Austin<" in svg and "works at" in svg
    bad = text(operator.get(url(tenant, "entities", graph["Dana"].pk), {"as_of": "yesterday"}))
    assert "Give a date as YYYY-MM-DD" in bad


def test_merge_asks_first_then_merges_and_undo_restores_both(operator, tenant, graph):
    dana, robert = graph["Dana"], graph["Robert Dana"]
    confirm = operator.post(url(tenant, "entities", dana.pk, "merge"), {"other": robert.pk})
    assert confirm.status_code == 200
    assert "Merge “Robert Dana” into “Dana”?" in text(confirm)
    assert Entity.objects.get(pk=robert.pk).merged_into_id is None  # nothing yet
    done = operator.post(url(tenant, "entities", dana.pk, "merge"), {"other": robert.pk, "confirmed": "1"}, follow=True)
    page = text(done)
    assert "Merged “Robert Dana” into “Dana”" in page and "Robert Dana (person) merged" in page
    assert "Robert Dana reviewed the budget." in page
    listing = text(operator.get(url(tenant, "entities"), {"type": "person"}))
    assert "Dana person Dee, Robert Dana alice 2 1" in listing and "1 in all" in listing  # one person now
    # The merged entity's old address leads to the survivor.
    moved = operator.get(url(tenant, "entities", robert.pk), follow=True)
    assert moved.redirect_chain and "was merged into this entity" in text(moved)
    merge_id = re.search(r"/merges/([0-9a-f-]{36})/undo/", done.content.decode()).group(1)
    undone = operator.post(url(tenant, "entities", dana.pk, "merges", merge_id, "undo"), follow=True)
    assert "Merge undone: “Robert Dana” is its own entity again" in text(undone)
    assert FactEntity.objects.get(entity=robert).fact.content == "Robert Dana reviewed the budget."


def test_split_rename_and_close_relation_with_their_undos(operator, tenant, graph):
    dana = graph["Dana"]
    split = operator.post(url(tenant, "entities", dana.pk, "split"), {"alias": "Dee"}, follow=True)
    page = text(split)
    assert "Split “Dee” off into its own entity." in page and "Split off from Dana" in page
    dee = Entity.objects.get(name="Dee")
    back = operator.post(url(tenant, "entities", dana.pk, "merge"), {"other": dee.pk, "confirmed": "1"}, follow=True)
    assert "Merged “Dee” into “Dana”" in text(back)

    renamed = operator.post(url(tenant, "entities", dana.pk, "rename"), {"name": "Dana Scully"}, follow=True)
    assert "Renamed to “Dana Scully”" in text(renamed) and "Dana" in Entity.objects.get(pk=dana.pk).aliases
    refused = operator.post(url(tenant, "entities", dana.pk, "rename"), {"name": "   "}, follow=True)
    assert "Give the entity a name. Nothing was changed." in text(refused)

    based = Relation.objects.get(type="based_in")
    initech = graph["Initech"]
    closed = operator.post(
        url(tenant, "entities", initech.pk, "relations", based.pk, "close"), {"note": "moved"}, follow=True
    )
    assert "Relation closed" in text(closed) and "Closed by an operator." in text(closed)
    assert Relation.objects.get(pk=based.pk).valid_to is not None
    reopened = operator.post(url(tenant, "entities", initech.pk, "relations", based.pk, "reopen"), follow=True)
    assert "Relation reopened." in text(reopened) and Relation.objects.get(pk=based.pk).valid_to is None


def test_the_entity_merge_tab_lists_items_and_decides_with_undo(operator, tenant, graph, memory_user):
    item = EntityMergeReview.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        entity=graph["Robert Dana"],
        candidate=graph["Dana"],
        similarity=0.84,
        judge="rules",
        reason="similar names, not clearly one entity",
    )
    queue = operator.get(url(tenant, "review", "entities"))
    page = text(queue)
    assert "Entity merges" in page and "Robert Dana or Dana?" in page and "similarity 0.84" in page
    assert "Robert Dana reviewed the budget." in page and "Dana works at Initech." in page
    done = operator.post(url(tenant, "review", "entities", item.pk, "accept"), **HTMX)
    assert "Merged: one entity now." in text(done) and "Undo" in text(done)
    assert Entity.objects.get(pk=graph["Robert Dana"].pk).merged_into_id == graph["Dana"].pk
    again = operator.post(url(tenant, "review", "entities", item.pk, "accept"), **HTMX)
    assert "Already decided by" in text(again)
    reopened = operator.post(url(tenant, "review", "entities", item.pk, "reopen"), **HTMX)
    assert "Reopened: back in the queue" in text(reopened) and "Keep apart" in text(reopened)
    assert Entity.objects.get(pk=graph["Robert Dana"].pk).merged_into_id is None
    kept = operator.post(url(tenant, "review", "entities", item.pk, "reject"), follow=True)
    assert "Kept apart: two entities." in text(kept) and "Nothing to review." in text(kept)


def test_names_are_escaped_everywhere(operator, tenant, memory_user, graph):
    now = timezone.now()
    evil = Entity.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        name='<img src=x onerror="alert(1)">',
        aliases=['<img src=x onerror="alert(1)">', "<b>bold</b>"],
        alias_keys=["evil", "<b>bold</b>"],
        first_seen=now,
        last_seen=now,
    )
    Relation.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        subject=evil,
        object=graph["Dana"],
        type="knows",
        source_fact=graph["works"],
        valid_from=PAST,
    )
    for page in (
        operator.get(url(tenant, "entities")),
        operator.get(url(tenant, "entities", evil.pk)),
        operator.get(url(tenant, "entities", graph["Dana"].pk)),
    ):
        body = page.content.decode()
        assert "<img src=x" not in body and "<b>bold</b>" not in body
        assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body


def test_who_may_see_and_curate(tenant, other_tenant, make_staff, auditor, member, graph, operator):
    dana, robert = graph["Dana"], graph["Robert Dana"]
    page = text(auditor.get(url(tenant, "entities", dana.pk)))
    assert "Relations over time" in page and "Curate" not in page and "Close relation" not in page
    refused = auditor.post(url(tenant, "entities", dana.pk, "merge"), {"other": robert.pk, "confirmed": "1"})
    assert refused.status_code == 403 and Entity.objects.get(pk=robert.pk).merged_into_id is None
    assert member.get(url(tenant, "entities")).status_code == 403
    assert member.post(url(tenant, "entities", dana.pk, "rename"), {"name": "x"}).status_code == 403
    stranger = make_staff(other_tenant, "operator")
    assert stranger.get(url(other_tenant, "entities", dana.pk)).status_code == 404
    assert stranger.post(url(other_tenant, "entities", dana.pk, "rename"), {"name": "Mallory"}).status_code == 404
    assert "Dana" not in text(stranger.get(url(other_tenant, "entities")))
    assert operator.get(url(tenant, "entities", "not-a-uuid")).status_code == 404
    assert Entity.objects.get(pk=dana.pk).name == "Dana"


@pytest.mark.parametrize("rows", [3, 30])
def test_entity_pages_run_a_bounded_number_of_queries(
    admin, tenant, memory_user, make_fact, rows, django_assert_max_num_queries
):
    """Three entities or thirty, with their facts and relations: the same number of queries."""
    now = timezone.now()
    hub = Entity.objects.create(
        tenant=tenant, memory_user=memory_user, name="Hub", alias_keys=["hub"], first_seen=now, last_seen=now
    )
    for i in range(rows):
        fact = make_fact(memory_user, f"Hub knows spoke {i}")
        spoke = Entity.objects.create(
            tenant=tenant,
            memory_user=memory_user,
            name=f"Spoke {i}",
            aliases=[f"Spoke {i}"],
            alias_keys=[f"spoke {i}"],
            first_seen=now,
            last_seen=now,
        )
        FactEntity.objects.create(fact=fact, entity=hub, role="subject")
        FactEntity.objects.create(fact=fact, entity=spoke, role="object")
        Relation.objects.create(
            tenant=tenant,
            memory_user=memory_user,
            subject=hub,
            object=spoke,
            type="knows",
            source_fact=fact,
            valid_from=now,
        )
        EntityMergeReview.objects.create(
            tenant=tenant, memory_user=memory_user, entity=spoke, candidate=hub, similarity=0.8
        )
    for target, limit in (
        (url(tenant, "entities"), 9),
        (url(tenant, "entities", hub.pk) + "?depth=2", 13),
        (url(tenant, "review", "entities"), 9),  # 7, and the tabs' counts (2)
    ):
        admin.get(target)
        with django_assert_max_num_queries(limit):
            assert admin.get(target).status_code == 200


def test_an_automatic_merge_is_shown_on_the_survivor_with_its_judge_and_can_be_undone(operator, tenant, memory_user):
    write(tenant, memory_user, "Acme Robotics builds arms.", [EntityMention("Acme Robotics", "company", "subject")])
    write(tenant, memory_user, "The user called Acme Robotic.", [EntityMention("Acme Robotic", "company")])
    acme = Entity.objects.get(name="Acme Robotics")
    page = text(operator.get(url(tenant, "entities", acme.pk)))
    assert re.search(
        r"Acme Robotic \(company\) merged [\d-]+ [\d:]+ automatically by resolution \(rules judge, similarity 0\.9\d\)",
        page,
    )
    assert "The user called Acme Robotic. mentioned" in page
    assert re.search(r"History [\d-]+ [\d:]+ entity\.merge automatic by system: resolution: a spelling variant", page)
    audit = text(operator.get(url(tenant, "audit")))
    assert "entity.merge" in audit and "entity " + str(acme.pk)[:8] in audit
    merge_id = re.search(
        r"/merges/([0-9a-f-]{36})/undo/", operator.get(url(tenant, "entities", acme.pk)).content.decode()
    )
    operator.post(url(tenant, "entities", acme.pk, "merges", merge_id.group(1), "undo"))
    after = text(operator.get(url(tenant, "entities", acme.pk)))
    assert "The user called Acme Robotic." not in after and "entity.unmerge" not in after  # logged on the other one
    typo = Entity.objects.get(name="Acme Robotic")
    assert "The user called Acme Robotic. mentioned" in text(operator.get(url(tenant, "entities", typo.pk)))
