"""Curating entities over real HTTP (SPEC §8, §12): merge and undo, split, rename, close and reopen a
relation, entity-merge review items; who may (admin keys; a key limited to users only for their own
entities), bad input with stable codes, the audit rows, and what GET answers for a merged entity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_admin.models import AuditEvent, Entity, EntityMerge, EntityMergeReview, FactEntity, MemoryUser, Relation
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_write

PAST = datetime(2025, 1, 1, tzinfo=UTC)
UNKNOWN = "5d0c1f3e-7a2b-4c9d-8e6f-1a2b3c4d5e6f"


def stated(tenant, user_id, content, mentions, relations=(), at=PAST):
    system = Principal.system(tenant.pk)
    user, _ = MemoryUser.objects.get_or_create(tenant=tenant, external_id=user_id)
    fact = fact_write(principal=system, memory_user=user, content=content, source="user_stated", observed_at=at).fact
    fact_entities_link(principal=system, fact=fact, mentions=mentions, relations=relations)
    return fact


@pytest.fixture
def world(tenant):
    """alice knows one person under two names ("Bob Smith", "Robert Smith"); bob has his own entity."""
    stated(
        tenant,
        "alice",
        "Bob Smith works at Initech.",
        [EntityMention("Bob Smith", "person", "subject"), EntityMention("Initech", "company", "object")],
        [RelationDraft("Bob Smith", "works_at", "Initech")],
    )
    stated(
        tenant,
        "alice",
        "Robert Smith lives in Lisbon.",
        [EntityMention("Robert Smith", "person", "subject"), EntityMention("Lisbon", "place", "object")],
        [RelationDraft("Robert Smith", "lives_in", "Lisbon")],
        at=PAST + timedelta(days=3),
    )
    stated(tenant, "bob", "Umbrella Corp is bob's client.", [EntityMention("Umbrella Corp", "company", "subject")])
    return {e.name: e for e in Entity.objects.filter(tenant=tenant)}


@pytest.fixture
def org_entity(tenant):
    return Entity.objects.create(
        tenant=tenant, scope="org", name="Globex", type="company", aliases=["Globex"], alias_keys=["globex"],
        first_seen=PAST, last_seen=PAST,
    )  # fmt: skip


def facts_of(api, entity_id) -> set[str]:
    return {f["content"] for f in api.get(f"entities/{entity_id}").json()["facts"]}


def test_merge_moves_facts_and_relations_and_undo_puts_them_back(admin_api, world):
    bob, robert = world["Bob Smith"], world["Robert Smith"]
    r = admin_api.post("entity-merges", {"survivor_id": str(bob.pk), "loser_id": str(robert.pk), "note": "same person"})
    assert r.status_code == 201, r.content
    merge = r.json()
    assert merge["survivor"]["name"] == "Bob Smith" and "Robert Smith" in merge["survivor"]["aliases"]
    assert merge["loser"]["merged_into"] == str(bob.pk) and merge["mentions_moved"] == 1
    assert facts_of(admin_api, bob.pk) == {"Bob Smith works at Initech.", "Robert Smith lives in Lisbon."}
    graph = admin_api.get(f"entities/{bob.pk}/graph").json()
    assert {(e["subject"]["name"], e["type"], e["object"]["name"]) for e in graph["edges"]} == {
        ("Bob Smith", "works_at", "Initech"),
        ("Bob Smith", "lives_in", "Lisbon"),
    }
    # Searching by the merged name finds the survivor only.
    assert [e["name"] for e in admin_api.get("entities", q="robert smith").json()["items"]] == ["Bob Smith"]
    # The survivor lists the merges into it, to undo one found later (a curator's or resolution's).
    merges_in = admin_api.get(f"entities/{bob.pk}").json()["merges"]
    assert [(m["id"], m["loser"]["name"], m["automatic"]) for m in merges_in] == [(merge["id"], "Robert Smith", False)]

    r = admin_api.post(f"entity-merges/{merge['id']}/undo", {"note": "not the same after all"})
    assert r.status_code == 200, r.content
    assert r.json()["undone_at"] is not None and r.json()["loser"]["merged_into"] is None
    assert facts_of(admin_api, robert.pk) == {"Robert Smith lives in Lisbon."}
    assert facts_of(admin_api, bob.pk) == {"Bob Smith works at Initech."}
    assert "Robert Smith" not in admin_api.get(f"entities/{bob.pk}").json()["aliases"]
    again = admin_api.post(f"entity-merges/{merge['id']}/undo")
    assert again.status_code == 409 and again.json()["code"] == "already_resolved"
    assert admin_api.get(f"entities/{bob.pk}").json()["merges"] == []
    events = AuditEvent.objects.filter(action__in=["entity.merge", "entity.unmerge"]).order_by("pk")
    assert [(e.action, e.actor, e.reason) for e in events] == [
        ("entity.merge", "agent:admin-agent", "same person"),
        ("entity.unmerge", "agent:admin-agent", "not the same after all"),
    ]


def test_a_merged_entity_answers_with_the_entity_it_went_to(admin_api, api, world):
    bob, robert = world["Bob Smith"], world["Robert Smith"]
    merge = admin_api.post("entity-merges", {"survivor_id": str(bob.pk), "loser_id": str(robert.pk)}).json()
    body = api.get(f"entities/{robert.pk}").json()
    assert body["name"] == "Robert Smith" and body["merged_into"] == str(bob.pk) and body["merge_id"] == merge["id"]
    assert body["facts"] == [] and body["relations"] == []  # they moved to the survivor
    live = api.get(f"entities/{bob.pk}").json()
    assert live["merged_into"] is None and live["merge_id"] is None
    graph = api.get(f"entities/{robert.pk}/graph").json()
    assert graph["root"] == str(bob.pk) and graph["merged_from"] == str(robert.pk)
    assert {e["type"] for e in graph["edges"]} == {"works_at", "lives_in"}
    # A chain of merges answers the live end of it.
    carl = Entity.objects.create(
        tenant=bob.tenant, memory_user=bob.memory_user, name="Carl", type="person", aliases=["Carl"],
        alias_keys=["carl"], first_seen=PAST, last_seen=PAST,
    )  # fmt: skip
    assert admin_api.post("entity-merges", {"survivor_id": str(carl.pk), "loser_id": str(bob.pk)}).status_code == 201
    assert api.get(f"entities/{robert.pk}").json()["merged_into"] == str(carl.pk)
    assert api.get(f"entities/{robert.pk}/graph").json()["root"] == str(carl.pk)


def test_split_rename_close_and_reopen(admin_api, world):
    bob = world["Bob Smith"]
    renamed = admin_api.post(f"entities/{bob.pk}/rename", {"name": "Bobby Smith"})
    assert renamed.status_code == 200, renamed.content
    assert renamed.json()["name"] == "Bobby Smith" and "Bob Smith" in renamed.json()["aliases"]
    assert [e["name"] for e in admin_api.get("entities", q="bob smith").json()["items"]] == ["Bobby Smith"]

    split = admin_api.post(f"entities/{bob.pk}/split", {"alias": "Bob Smith"})
    assert split.status_code == 201, split.content
    new = split.json()["split_off"]
    assert new["name"] == "Bob Smith" and split.json()["entity"]["aliases"] == ["Bobby Smith"]
    assert facts_of(admin_api, new["id"]) == {"Bob Smith works at Initech."}

    works = Relation.objects.get(type="works_at")
    closed = admin_api.post(f"relations/{works.pk}/close", {"note": "left the company"})
    assert closed.status_code == 200 and closed.json()["valid_to"] is not None
    assert admin_api.get(f"entities/{new['id']}/graph").json()["edges"] == []
    twice = admin_api.post(f"relations/{works.pk}/close")
    assert twice.status_code == 409 and twice.json()["code"] == "already_resolved"
    reopened = admin_api.post(f"relations/{works.pk}/reopen")
    assert reopened.status_code == 200 and reopened.json()["valid_to"] is None
    assert list(
        AuditEvent.objects.filter(actor="agent:admin-agent").values_list("action", flat=True).order_by("pk")
    ) == [
        "entity.rename",
        "entity.split",
        "relation.close",
        "relation.reopen",
    ]


def test_a_relation_a_correction_closed_cannot_be_reopened(admin_api, world):
    works = Relation.objects.get(type="works_at")
    assert (
        admin_api.post(f"facts/{works.source_fact_id}/correct", {"content": "Bob Smith works at Globex."}).status_code
        == 201
    )
    r = admin_api.post(f"relations/{works.pk}/reopen")
    assert r.status_code == 422 and r.json()["code"] == "relation_corrected"
    assert Relation.objects.get(pk=works.pk).valid_to is not None


@pytest.fixture
def review(tenant, world):
    return EntityMergeReview.objects.create(
        tenant=tenant, memory_user=world["Bob Smith"].memory_user, entity=world["Robert Smith"],
        candidate=world["Bob Smith"], similarity=0.83, judge="rules", reason="similar names",
    )  # fmt: skip


def test_review_items_are_listed_accepted_rejected_and_reopened(admin_api, api, world, review):
    items = api.get("entity-reviews").json()["items"]
    assert [(i["entity"]["name"], i["candidate"]["name"], i["status"]) for i in items] == [
        ("Robert Smith", "Bob Smith", "open")
    ]
    accepted = admin_api.post(f"entity-reviews/{review.pk}/accept", {"note": "same man"})
    assert accepted.status_code == 200, accepted.content
    assert accepted.json()["status"] == "accepted" and accepted.json()["merge_id"]
    assert Entity.objects.get(pk=world["Robert Smith"].pk).merged_into_id == world["Bob Smith"].pk
    assert api.get("entity-reviews").json()["items"] == []
    late = admin_api.post(f"entity-reviews/{review.pk}/reject")
    assert late.status_code == 409 and late.json()["code"] == "already_resolved"

    reopened = admin_api.post(f"entity-reviews/{review.pk}/reopen")
    assert reopened.status_code == 200 and reopened.json()["status"] == "open"
    assert Entity.objects.get(pk=world["Robert Smith"].pk).merged_into_id is None
    rejected = admin_api.post(f"entity-reviews/{review.pk}/reject")
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert Entity.objects.get(pk=world["Robert Smith"].pk).merged_into_id is None
    outcomes = AuditEvent.objects.filter(action="entity.review").order_by("pk").values_list("outcome", flat=True)
    assert list(outcomes) == ["accepted", "reopened", "rejected"]


def _attempts(world, review, org=None):
    """Every curation call, against alice's entities (or a shared one)."""
    bob, robert = (org, world["Bob Smith"]) if org else (world["Bob Smith"], world["Robert Smith"])
    relation = Relation.objects.get(type="works_at")
    return [
        ("entity-merges", {"survivor_id": str(bob.pk), "loser_id": str(robert.pk)}),
        (f"entities/{bob.pk}/rename", {"name": "Mallory"}),
        (f"entities/{bob.pk}/split", {"alias": bob.name}),
        (f"relations/{relation.pk}/close", None),
        (f"entity-reviews/{review.pk}/accept", None),
        (f"entity-reviews/{review.pk}/reject", None),
    ]


def _nothing_changed(world):
    assert not EntityMerge.objects.exists()
    assert Entity.objects.get(pk=world["Bob Smith"].pk).name == "Bob Smith"
    assert Relation.objects.get(type="works_at").valid_to is None
    assert EntityMergeReview.objects.get().status == "open"
    curated = ["entity.merge", "entity.rename", "entity.split", "entity.review", "relation.close"]
    assert not AuditEvent.objects.filter(action__in=curated).exists()


def test_an_ordinary_agent_key_may_not_curate(api, world, review):
    for path, body in _attempts(world, review):
        r = api.post(path, body)
        assert r.status_code == 403 and r.json()["code"] == "forbidden", (path, r.content)
    _nothing_changed(world)


def test_other_tenants_and_other_users_entities_are_not_found(tenant, other_tenant, make_api, world, review):
    for who in (make_api(other_tenant, admin=True), make_api(tenant, admin=True, users=["bob"])):
        for path, body in _attempts(world, review):
            r = who.post(path, body)
            assert r.status_code == 404 and r.json()["code"] == "not_found", (path, r.content)
            assert "Smith" not in r.content.decode()
    _nothing_changed(world)


def test_a_key_limited_to_a_user_curates_only_that_users_entities(tenant, make_api, world, review, org_entity):
    alice_admin = make_api(tenant, admin=True, users=["alice"], agent="alice-admin")
    # Shared entities are read-only to it: merging alice's entity into one, renaming or splitting one.
    into_shared = alice_admin.post(
        "entity-merges", {"survivor_id": str(org_entity.pk), "loser_id": str(world["Bob Smith"].pk)}
    )
    assert into_shared.status_code == 403 and into_shared.json()["code"] == "read_only_scope"
    for path, body in [(f"entities/{org_entity.pk}/rename", {"name": "Mallory"})]:
        r = alice_admin.post(path, body)
        assert r.status_code == 403 and r.json()["code"] == "read_only_scope", r.content
    assert Entity.objects.get(pk=org_entity.pk).name == "Globex" and not EntityMerge.objects.exists()
    # bob's entity is another user's: not found.
    r = alice_admin.post(f"entities/{world['Umbrella Corp'].pk}/rename", {"name": "Mallory"})
    assert r.status_code == 404
    # Its own user's entities it curates.
    ok = alice_admin.post(
        "entity-merges", {"survivor_id": str(world["Bob Smith"].pk), "loser_id": str(world["Robert Smith"].pk)}
    )
    assert ok.status_code == 201, ok.content


def test_a_shared_relation_is_read_only_to_a_limited_key(tenant, make_api, world, org_entity):
    place = Entity.objects.create(
        tenant=tenant, scope="org", name="Springfield", type="place", aliases=["Springfield"],
        alias_keys=["springfield"], first_seen=PAST, last_seen=PAST,
    )  # fmt: skip
    fact = FactEntity.objects.filter(entity=world["Bob Smith"]).first().fact
    Relation.objects.create(  # as an org fact states it: no memory user
        tenant=tenant, subject=org_entity, object=place, type="located_in", source_fact=fact, valid_from=PAST
    )
    relation = Relation.objects.get(type="located_in")
    r = make_api(tenant, admin=True, users=["alice"]).post(f"relations/{relation.pk}/close")
    assert r.status_code == 403 and r.json()["code"] == "read_only_scope"
    assert make_api(tenant, admin=True).post(f"relations/{relation.pk}/close").status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "field"),
    [
        ("entity-merges", {"survivor_id": "nope", "loser_id": UNKNOWN}, 422, "invalid", "survivor_id"),
        ("entity-merges", {"survivor_id": UNKNOWN}, 422, "invalid", "loser_id"),
        ("entity-merges", {"survivor_id": "{bob}", "loser_id": "{bob}"}, 422, "entity_merge_same", None),
        ("entity-merges", {"survivor_id": "{bob}", "loser_id": "{umbrella}"}, 422, "entity_scope_mismatch", None),
        ("entity-merges", {"survivor_id": "{bob}", "loser_id": UNKNOWN}, 404, "not_found", None),
        ("entity-merges", {"survivor_id": "{bob}", "loser_id": "{robert}", "extra": 1}, 422, "invalid", "extra"),
        ("entity-merges", {"survivor_id": "{bob}", "loser_id": "{robert}", "note": "a\x00b"}, 422, "invalid", "note"),
        ("entity-merges", "{not json", 422, "invalid", "body"),
        ("entity-merges/nope/undo", None, 422, "invalid", "merge_id"),
        (f"entity-merges/{UNKNOWN}/undo", None, 404, "not_found", None),
        ("entities/{bob}/rename", {"name": "   "}, 422, "entity_name_empty", None),
        ("entities/{bob}/rename", {"name": "x" * 201}, 422, "invalid", "name"),
        ("entities/{bob}/rename", {"name": 7}, 422, "invalid", "name"),
        ("entities/{bob}/rename", {}, 422, "invalid", "name"),
        ("entities/{bob}/split", {"alias": "Lisbon"}, 422, "entity_alias_unknown", None),
        ("entities/{robert}/split", {"alias": "Robert Smith"}, 422, "entity_alias_last", None),
        ("relations/0/close", None, 422, "invalid", "relation_id"),
        ("relations/99999999999999999999/close", None, 422, "invalid", "relation_id"),
        ("relations/abc/reopen", None, 422, "invalid", "relation_id"),
        ("relations/{open_relation}/reopen", None, 409, "already_resolved", None),
        (f"relations/{2**40}/close", None, 404, "not_found", None),
        (f"entity-reviews/{UNKNOWN}/accept", None, 404, "not_found", None),
    ],
)
def test_bad_input_is_a_4xx_with_a_stable_code_and_changes_nothing(admin_api, world, path, body, status, code, field):
    ids = {
        "{bob}": str(world["Bob Smith"].pk),
        "{robert}": str(world["Robert Smith"].pk),
        "{umbrella}": str(world["Umbrella Corp"].pk),
        "{open_relation}": str(Relation.objects.get(type="works_at").pk),
    }
    for placeholder, value in ids.items():
        path = path.replace(placeholder, value)
    if isinstance(body, dict):
        body = {k: ids.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    before = sorted(FactEntity.objects.values_list("pk", "entity_id"))
    r = admin_api.post(path, body)
    assert r.status_code == status, r.content
    assert r.json()["code"] == code and (field is None or r.json()["field"] == field)
    assert sorted(FactEntity.objects.values_list("pk", "entity_id")) == before
    assert not EntityMerge.objects.exists() and Entity.objects.filter(tenant=world["Bob Smith"].tenant).count() == 5


def test_a_merged_entity_cannot_be_curated_until_the_merge_is_undone(admin_api, world):
    bob, robert = world["Bob Smith"], world["Robert Smith"]
    admin_api.post("entity-merges", {"survivor_id": str(bob.pk), "loser_id": str(robert.pk)})
    r = admin_api.post(f"entities/{robert.pk}/rename", {"name": "Rob"})
    assert r.status_code == 409 and r.json()["code"] == "entity_merged"


def test_a_secret_in_a_note_is_blocked_and_nothing_is_curated(admin_api, world):
    r = admin_api.post(
        f"entities/{world['Bob Smith'].pk}/rename",
        {"name": "Bobby", "note": "key sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"},
    )
    assert r.status_code == 422 and r.json()["code"] == "blocked" and "sk-proj" not in r.content.decode()
    assert Entity.objects.get(pk=world["Bob Smith"].pk).name == "Bob Smith"
