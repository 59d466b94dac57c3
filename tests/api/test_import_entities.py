"""The knowledge graph in the export and its import (SPEC §12, §14), through real HTTP: entities,
mentions and relations (open and closed, with their times and what closed them) round-trip into another
user or tenant; a second import writes nothing; a graph that does not hold together is refused whole."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_admin.models import Entity, FactEntity, ImportedItem, MemoryUser, Relation
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_write

PAST = datetime(2025, 1, 1, tzinfo=UTC)
SECRET = "sk-proj-4f9Qx2Lm8Zr7Tb1Vn6Kc3Hd5Jw0Ys9Ua"


def ok(response, status: int = 200) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:600])
    return response.json()


def stated(tenant, user, content, mentions, relations=()):
    system = Principal.system(tenant.pk)
    fact = fact_write(principal=system, memory_user=user, content=content, source="user_stated", observed_at=PAST).fact
    fact_entities_link(principal=system, fact=fact, mentions=mentions, relations=relations)
    return fact


@pytest.fixture
def dana(tenant, admin_api):
    """dana's graph: a job a correction ended, the job now, a home, a tool she stopped using (forgotten)."""
    user = MemoryUser.objects.create(tenant=tenant, external_id="dana")
    me = EntityMention("Dana Scully", "person", "subject", ("the user",))
    old_job = stated(
        tenant,
        user,
        "Dana Scully works at Acme Robotics.",
        [me, EntityMention("Acme Robotics", "company", "object", ("Acme",))],
        [RelationDraft("Dana Scully", "works_at", "Acme Robotics")],
    )
    stated(
        tenant,
        user,
        "Dana Scully lives in Berlin.",
        [me, EntityMention("Berlin", "place", "object")],
        [RelationDraft("Dana Scully", "lives_in", "Berlin")],
    )
    tool = stated(
        tenant,
        user,
        "Dana Scully uses Jira for planning.",
        [me, EntityMention("Jira", "tool", "object")],
        [RelationDraft("Dana Scully", "uses", "Jira")],
    )
    new_job = ok(admin_api.post(f"facts/{old_job.pk}/correct", {"content": "Dana Scully works at Globex."}), 201)
    fact_entities_link(
        principal=Principal.system(tenant.pk),
        fact=user.facts.get(pk=new_job["id"]),
        mentions=[me, EntityMention("Globex", "company", "object")],
        relations=[RelationDraft("Dana Scully", "works_at", "Globex")],
    )
    assert admin_api.delete(f"facts/{tool.pk}").status_code in (200, 204)
    return user


def graph_of(user_id: str) -> dict:
    """What a person would compare: entities by name, mentions and relations by names and times."""
    user = MemoryUser.objects.get(external_id=user_id)
    entities = {e.name: (e.type, sorted(e.aliases), e.first_seen) for e in Entity.objects.filter(memory_user=user)}
    mentions = {
        (m.fact.content, m.entity.name, m.role)
        for m in FactEntity.objects.filter(fact__memory_user=user).select_related("fact", "entity")
    }
    relations = {
        (
            r.subject.name,
            r.type,
            r.object.name,
            r.valid_from,
            r.valid_to,
            r.closed_reason,
            r.invalidated_by.content if r.invalidated_by else None,
            tuple(sorted(f.content for f in r.stated_by.all())),
        )
        for r in Relation.objects.filter(memory_user=user)
        .select_related("subject", "object", "invalidated_by")
        .prefetch_related("stated_by")
    }
    return {"entities": entities, "mentions": mentions, "relations": relations}


def test_the_export_carries_entities_mentions_and_relations(admin_api, dana):
    body = ok(admin_api.get("users/dana/export"))
    assert {e["name"] for e in body["entities"]} == {"Dana Scully", "Acme Robotics", "Berlin", "Jira", "Globex"}
    assert len(body["mentions"]) == FactEntity.objects.filter(fact__memory_user=dana).count() == 8
    closed = {r["closed_reason"] for r in body["relations"] if r["valid_to"]}
    assert closed == {"superseded", "forgotten"}
    assert sum(r["valid_to"] is None for r in body["relations"]) == 2  # lives_in Berlin, works_at Globex


def test_the_graph_round_trips_into_another_user_and_a_second_import_writes_nothing(admin_api, dana):
    export = ok(admin_api.get("users/dana/export"))
    report = ok(admin_api.post("users/carol/import", export))
    assert report["imported"]["entities"] == 5
    assert report["imported"]["mentions"] == 8 and report["imported"]["relations"] == 4
    original, copy = graph_of("dana"), graph_of("carol")
    # Times kept: when each relation held, and when the closed ones ended; what closed them, by text.
    assert copy == original
    assert all(stated for *_, stated in copy["relations"])  # every relation names the facts that state it

    counts = (
        Entity.objects.count(),
        FactEntity.objects.count(),
        Relation.objects.count(),
        ImportedItem.objects.count(),
    )
    again = ok(admin_api.post("users/carol/import", export))
    assert not {"entities", "mentions", "relations"} & set(again["imported"])
    assert again["already_imported"]["entities"] == 5 and again["already_imported"]["relations"] == 4
    assert again["already_imported"]["mentions"] == 8
    assert (
        Entity.objects.count(),
        FactEntity.objects.count(),
        Relation.objects.count(),
        ImportedItem.objects.count(),
    ) == counts


def test_into_another_tenant_the_graph_is_that_tenants_own(admin_api, make_api, other_tenant, dana):
    export = ok(admin_api.get("users/dana/export"))
    theirs = make_api(other_tenant, admin=True)
    ok(theirs.post("users/dana/import", export))
    moved = Entity.objects.filter(tenant=other_tenant)
    assert {e.name for e in moved} == {"Dana Scully", "Acme Robotics", "Berlin", "Jira", "Globex"}
    assert not Entity.objects.filter(pk__in=[e["id"] for e in export["entities"]], tenant=other_tenant).exists()
    assert Relation.objects.filter(tenant=other_tenant, valid_to__isnull=True).count() == 2
    # The first tenant's key still does not see them.
    assert admin_api.get(f"entities/{moved.first().pk}").status_code == 404


def test_an_entity_whose_name_is_a_secret_is_refused_with_what_hangs_on_it(admin_api, dana):
    export = ok(admin_api.get("users/dana/export"))
    jira = next(e for e in export["entities"] if e["name"] == "Jira")
    jira["name"], jira["aliases"] = SECRET, [SECRET]
    report = ok(admin_api.post("users/carol/import", export))
    assert {"kind": "entities", "index": export["entities"].index(jira), "code": "blocked", "field": "name"} in report[
        "refused"
    ]
    assert any(r["kind"] == "relations" and r["code"] == "not_found" for r in report["refused"])
    assert SECRET not in str(list(Entity.objects.values_list("name", "aliases")))
    assert report["imported"]["entities"] == 4 and report["imported"]["relations"] == 3


@pytest.mark.parametrize(
    ("breakage", "field"),
    [
        (
            lambda x: x["relations"][0].update(subject_id="00000000-0000-0000-0000-000000000000"),
            "relations.0.subject_id",
        ),
        (lambda x: x["relations"][0].update(object_id=x["relations"][0]["subject_id"]), "relations.0.object_id"),
        (lambda x: x["relations"][0].update(valid_to="2000-01-01T00:00:00Z"), "relations.0.valid_to"),
        (lambda x: x["mentions"][0].update(entity_id="00000000-0000-0000-0000-000000000000"), "mentions.0.entity_id"),
        (lambda x: x["entities"].append(dict(x["entities"][0])), "entities.id"),
        (lambda x: x["relations"][0].update(type="Works At!"), None),
        (lambda x: x["relations"][0].update(closed_reason="because"), None),
    ],
)
def test_a_graph_that_does_not_hold_together_is_refused_whole(admin_api, dana, breakage, field):
    export = ok(admin_api.get("users/dana/export"))
    breakage(export)
    r = admin_api.post("users/carol/import", export)
    assert r.status_code == 422, r.content
    assert r.json()["code"] == "invalid"
    if field:
        assert r.json()["field"] == field
    assert not MemoryUser.objects.filter(external_id="carol").exists()


def test_an_export_without_a_graph_still_imports(admin_api, dana):
    export = ok(admin_api.get("users/dana/export"))
    for name in ("entities", "mentions", "relations"):
        del export[name]
    report = ok(admin_api.post("users/carol/import", export))
    assert report["imported"]["facts"] >= 1 and "entities" not in report["imported"]
