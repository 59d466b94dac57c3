"""The offline drawing makes a graph: typed entities and relations from ordinary sentences, the demo
seed shows them, a shared thing can be one tenant entity (a name only), merge candidates by likeness."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from memory_admin.models import Entity, Relation
from memory_admin.selectors.access import Principal, memory_user_for
from memory_admin.selectors.entities import merge_candidates
from memory_admin.services.entity_draw import draw


@pytest.mark.parametrize(
    ("text", "relation", "object_type"),
    [
        ("Ada lives in Lisbon", ("Ada", "lives_in", "Lisbon"), "place"),
        ("Ben works at Acme Robotics", ("Ben", "works_at", "Acme Robotics"), "company"),
        ("Ada writes most code in Kotlin", ("Ada", "uses", "Kotlin"), "tool"),
        ("Ada's preferred editor is Zed", ("Ada", "uses", "Zed"), "tool"),
        ("Ada moved to Melbourne", ("Ada", "moved_to", "Melbourne"), "place"),
        ("I manage the Pride Parade", ("the user", "manages", "the Pride Parade"), "event"),
        ("Ada is currently working on the search relevance overhaul", None, "project"),
        ("John: I visited Paris last week with my sister Ana", ("John", "visited", "Paris"), "place"),
    ],
)
def test_ordinary_sentences_draw_typed_entities_and_a_relation(text, relation, object_type):
    mentions, relations = draw(text)
    kinds = {m.name: str(m.type) for m in mentions}
    if relation is not None:
        assert relation in [(r.subject, r.type, r.object) for r in relations]
        assert kinds[relation[2]] == object_type
        if relation[0] != "the user":
            assert kinds[relation[0]] == "person"
    else:
        assert object_type in kinds.values() and relations


def test_chatter_words_are_not_entities():
    mentions, _ = draw("Melanie: Absolutely, hopefully! Woah, Caroline, that is great.")
    assert {m.name for m in mentions} == {"Melanie", "Caroline"}


def test_the_demo_seed_shows_a_graph_with_typed_entities(db):
    call_command("seed_demo", tenant="graphdemo", users=3, seed=3)
    relations = Relation.objects.filter(tenant__slug="graphdemo", valid_to__isnull=True)
    assert {"lives_in", "uses", "works_on"} <= set(relations.values_list("type", flat=True))
    types = set(Entity.objects.filter(tenant__slug="graphdemo").values_list("type", flat=True))
    assert {"person", "place", "tool", "project"} <= types


def test_merge_candidates_come_likeliest_first(tenant):
    from django.utils import timezone

    from memory_admin.services.entity_curation import entity_embed

    system = Principal.system(tenant.pk, actor="agent:test")
    user = memory_user_for(system, "ada", create=True)
    now = timezone.now()
    made = {}
    for name in ("Zanzibar", "Acme", "Globex", "Acme Robotics"):
        entity = Entity(tenant=tenant, memory_user=user, name=name, type="company", first_seen=now, last_seen=now)
        entity_embed(entity)
        entity.save()
        made[name] = entity
    candidates = merge_candidates(system, made["Acme Robotics"])
    assert candidates[0].name == "Acme" and all(c.likeness is not None for c in candidates)
    assert [c.likeness for c in candidates] == sorted((c.likeness for c in candidates), reverse=True)
