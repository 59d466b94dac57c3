"""The offline drawing makes a graph: typed entities and relations from ordinary sentences, the demo
seed shows them, a shared thing can be one tenant entity (a name only), merge candidates by likeness."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from memory_admin.models import Entity, Fact, FactEntity, Relation
from memory_admin.selectors.access import Principal, memory_user_for, visible
from memory_admin.selectors.entities import merge_candidates
from memory_admin.services.entity_curation import entities_erase
from memory_admin.services.entity_draw import draw, facts_draw
from memory_admin.services.facts import fact_write


@pytest.mark.parametrize(
    ("text", "relation", "object_type"),
    [
        ("Ada lives in Lisbon", ("Ada", "lives_in", "Lisbon"), "place"),
        ("Ben works at Acme Robotics", ("Ben", "works_at", "Acme Robotics"), "company"),
        ("Ada writes most code in Kotlin", ("Ada", "uses", "Kotlin"), "tool"),
        ("Ben uses Zed", ("Ben", "uses", "Zed"), "tool"),
        ("Dana manages Umbrella Health", ("Dana", "manages", "Umbrella Health"), "company"),
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


def test_a_shared_thing_is_one_tenant_entity_holding_only_its_name(tenant, settings):

    settings.ENTITY_SHARED_KINDS = True
    system = Principal.system(tenant.pk, actor="agent:test")
    ada, ben = (memory_user_for(system, u, create=True) for u in ("ada", "ben"))
    for user, content in ((ada, "Ada's preferred editor is Zed"), (ben, "Ben uses Zed")):
        fact_write(principal=system, memory_user=user, content=content, confidence=0.9, source="user_stated")
    facts_draw(Fact.objects.filter(tenant=tenant).values_list("pk", flat=True))
    zed = Entity.objects.get(tenant=tenant, name="Zed")  # one, not one per user
    assert zed.memory_user_id is None and zed.type == "tool" and zed.aliases == ["Zed"]
    # Each user's relation to it stays theirs: a key for ben reaches none of ada's.
    ben_key = Principal(tenant_id=tenant.pk, role="agent", actor="agent:b", allowed_external_ids=("ben",))
    seen = visible(ben_key, Relation.objects.filter(object=zed))
    assert [r.memory_user.external_id for r in seen] == ["ben"]
    assert not visible(ben_key, FactEntity.objects.filter(entity=zed, fact__memory_user=ada)).exists()
    # Erasing ada leaves the name and ben's relation.
    entities_erase(memory_user_id=ada.pk)
    assert Relation.objects.filter(object=zed).count() == 1 and Entity.objects.filter(pk=zed.pk).exists()


def test_without_the_setting_each_user_keeps_their_own_entity(tenant):

    system = Principal.system(tenant.pk, actor="agent:test")
    for user_id in ("ada", "ben"):
        user = memory_user_for(system, user_id, create=True)
        fact_write(principal=system, memory_user=user, content="I use Zed", confidence=0.9, source="user_stated")
    facts_draw(Fact.objects.filter(tenant=tenant).values_list("pk", flat=True))
    assert Entity.objects.filter(tenant=tenant, name="Zed", memory_user__isnull=False).count() == 2


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


def test_a_tool_one_moved_to_is_used_not_lived_in():
    _, relations = draw("I moved to Neovim")
    assert [(r.type, r.object) for r in relations] == [("uses", "Neovim")]


def test_the_offline_extractor_states_typed_relations_from_a_users_message():
    from extraction.rules import extract

    said = "I moved to Berlin last year. I work at Bank of America now. I switched to Helix."
    facts = extract([(0, "user", said)])
    drawn = {(r.type, r.object) for f in facts for r in f.relations}
    # A move also fills where the user lives now (the location slot's relation).
    assert drawn == {("moved_to", "Berlin"), ("lives_in", "Berlin"), ("works_at", "Bank of America"), ("uses", "Helix")}
    kinds = {m.name: str(m.type) for f in facts for m in f.entities}
    assert kinds["Berlin"] == "place" and kinds["Bank of America"] == "company" and kinds["Helix"] == "tool"
