"""The entity routes through real HTTP (SPEC §8, §12): search, detail with relations over time, the
graph as of a past date, bad input, and isolation across tenants and users."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_admin.models import Entity, MemoryUser
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_write

PAST = datetime(2025, 1, 1, tzinfo=UTC)


def stated(tenant, user_id, content, mentions, relations=(), observed_at=PAST):
    """A fact of the user and what it names, as the extraction pipeline stores them."""
    system = Principal.system(tenant.pk)
    user, _ = MemoryUser.objects.get_or_create(tenant=tenant, external_id=user_id)
    fact = fact_write(
        principal=system, memory_user=user, content=content, source="user_stated", observed_at=observed_at
    ).fact
    fact_entities_link(principal=system, fact=fact, mentions=mentions, relations=relations)
    return fact


USER = EntityMention("Dana Scully", "person", "subject", ("the user",))


@pytest.fixture
def world(tenant):
    works = stated(
        tenant,
        "alice",
        "The user works at Acme Robotics.",
        [USER, EntityMention("Acme Robotics", "company", "object")],
        [RelationDraft("Dana Scully", "works_at", "Acme Robotics")],
    )
    stated(
        tenant,
        "alice",
        "Acme Robotics is based in Berlin.",
        [EntityMention("Acme Robotics", "company", "subject"), EntityMention("Berlin", "place", "object")],
        [RelationDraft("Acme Robotics", "located_in", "Berlin")],
    )
    stated(tenant, "bob", "Bob's launch codes are with Umbrella Corp.", [EntityMention("Umbrella Corp", "company")])
    return {e.name: e for e in Entity.objects.all()} | {"works": works}


def names(items) -> set[str]:
    return {item["name"] for item in items}


def test_search_finds_an_entity_by_any_alias_in_any_case(api, world):
    assert names(api.get("entities", q="acme robotics").json()["items"]) == {"Acme Robotics"}
    assert names(api.get("entities", q="THE USER").json()["items"]) == {"Dana Scully"}
    assert names(api.get("entities", q="acme").json()["items"]) == {"Acme Robotics"}
    assert names(api.get("entities", user_id="bob").json()["items"]) == {"Umbrella Corp"}
    assert names(api.get("entities").json()["items"]) == {"Dana Scully", "Acme Robotics", "Berlin", "Umbrella Corp"}


def test_detail_lists_the_facts_and_the_relations_over_time(api, world):
    acme = world["Acme Robotics"]
    r = api.post(f"facts/{world['works'].pk}/correct", {"content": "The user works at Globex."})
    assert r.status_code == 201, r.content
    body = api.get(f"entities/{acme.pk}").json()
    assert body["name"] == "Acme Robotics" and body["type"] == "company" and body["user_id"] == "alice"
    assert {(f["content"], f["role"], f["status"]) for f in body["facts"]} == {
        ("The user works at Acme Robotics.", "object", "superseded"),
        ("Acme Robotics is based in Berlin.", "subject", "active"),
    }
    works = next(rel for rel in body["relations"] if rel["type"] == "works_at")
    assert works["subject"]["name"] == "Dana Scully" and works["valid_to"] is not None
    assert works["invalidated_by_id"] == r.json()["id"]


def test_the_graph_as_of_a_past_date_shows_a_relation_a_correction_closed(api, world):
    dana = world["Dana Scully"]
    api.post(f"facts/{world['works'].pk}/correct", {"content": "The user works at Globex."})
    then = api.get(f"entities/{dana.pk}/graph", as_of="2025-06-01T00:00:00Z").json()
    assert [(e["subject"]["name"], e["type"], e["object"]["name"]) for e in then["edges"]] == [
        ("Dana Scully", "works_at", "Acme Robotics")
    ]
    assert names(then["nodes"]) == {"Dana Scully", "Acme Robotics"}
    now = api.get(f"entities/{dana.pk}/graph").json()
    assert now["edges"] == [] and names(now["nodes"]) == {"Dana Scully"}
    # Before anything was stated, nothing held.
    assert api.get(f"entities/{dana.pk}/graph", as_of="2024-06-01T00:00:00Z").json()["edges"] == []


def test_depth_walks_further_relations(api, world):
    dana = world["Dana Scully"]
    one = api.get(f"entities/{dana.pk}/graph", depth=1, as_of="2025-06-01T00:00:00Z").json()
    two = api.get(f"entities/{dana.pk}/graph", depth=2, as_of="2025-06-01T00:00:00Z").json()
    assert names(one["nodes"]) == {"Dana Scully", "Acme Robotics"}
    assert names(two["nodes"]) == {"Dana Scully", "Acme Robotics", "Berlin"} and two["depth"] == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"depth": 0}, "depth"),
        ({"depth": 4}, "depth"),
        ({"depth": "deep"}, "depth"),
        ({"as_of": "yesterday"}, "as_of"),
        ({"as_of": "2025-06-01T00:00:00"}, "as_of"),  # naive
        ({"as_of": "1066-10-14T09:00:00Z"}, "as_of"),  # implausible
        ({"when": "now"}, "when"),  # unknown parameter
    ],
)
def test_bad_graph_parameters_are_422_with_the_field(api, world, params, field):
    r = api.get(f"entities/{world['Dana Scully'].pk}/graph", **params)
    assert r.status_code == 422, r.content
    assert r.json()["code"] == "invalid" and r.json()["field"] == field


@pytest.mark.parametrize("path", ["entities/{id}", "entities/{id}/graph"])
def test_a_malformed_entity_id_is_422_and_an_unknown_one_404(api, world, path):
    r = api.get(path.format(id="not-a-uuid"))
    assert r.status_code == 422 and r.json()["field"] == "entity_id"
    r = api.get(path.format(id="5d0c1f3e-7a2b-4c9d-8e6f-1a2b3c4d5e6f"))
    assert r.status_code == 404 and r.json()["code"] == "not_found"


@pytest.mark.parametrize("path", ["entities/{id}", "entities/{id}/graph"])
def test_another_tenants_entity_is_not_found(other_tenant, make_api, world, path):
    theirs = make_api(other_tenant)
    r = theirs.get(path.format(id=world["Acme Robotics"].pk))
    assert r.status_code == 404 and r.json()["code"] == "not_found" and "Acme" not in r.content.decode()
    assert theirs.get("entities", q="acme").json()["items"] == []


@pytest.mark.parametrize("path", ["entities/{id}", "entities/{id}/graph"])
def test_a_restricted_key_sees_only_its_users_entities(tenant, make_api, world, path):
    alice_only = make_api(tenant, users=["alice"])
    r = alice_only.get(path.format(id=world["Umbrella Corp"].pk))
    assert r.status_code == 404 and "Umbrella" not in r.content.decode()
    assert alice_only.get(path.format(id=world["Acme Robotics"].pk)).status_code == 200
    assert "Umbrella Corp" not in names(alice_only.get("entities").json()["items"])
    assert alice_only.get("entities", user_id="bob").status_code == 404


def test_org_entities_are_shared_with_every_user_of_the_tenant(tenant, make_api, world):
    org = Entity.objects.create(
        tenant=tenant, scope="org", name="Globex", type="company", aliases=["Globex"], alias_keys=["globex"],
        first_seen=PAST, last_seen=PAST,
    )  # fmt: skip
    alice_only = make_api(tenant, users=["alice"])
    assert alice_only.get(f"entities/{org.pk}").json()["scope"] == "org"
    assert names(alice_only.get("entities", user_id="alice", q="globex").json()["items"]) == {"Globex"}


def test_erasing_a_user_removes_its_entities_and_relations(tenant, admin_api, world):
    assert admin_api.delete("users/alice").status_code == 200
    left = names(admin_api.get("entities").json()["items"])
    assert left == {"Umbrella Corp"}  # bob's stay
    assert admin_api.get(f"entities/{world['Acme Robotics'].pk}").status_code == 404
    assert not Entity.objects.filter(memory_user__tenant=tenant, name__in=["Dana Scully", "Acme Robotics"]).exists()
