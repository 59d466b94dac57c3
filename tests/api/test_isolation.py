"""Tenant and user isolation through the real HTTP API (SPEC §3, §8, §11).

Another tenant's object answers exactly like an object that does not exist: 404 with code
`not_found`, never 403 and never any of its data. A key restricted to some memory users cannot
reach the others. The access function itself is tested exhaustively for every model it guards.
"""

from __future__ import annotations

import uuid
from datetime import date, timedelta

import pytest
from django.utils import timezone

from memory_admin.models import (
    ApiKey,
    AuditEvent,
    Checkpoint,
    Contradiction,
    Edge,
    Entity,
    EntityMerge,
    EntityMergeReview,
    Episode,
    ExtractionBatch,
    Fact,
    FactEntity,
    KnowledgeChunk,
    KnowledgeDocument,
    KnowledgeSource,
    LlmCall,
    MemoryUser,
    Message,
    Notebook,
    NotebookRevision,
    PiiBlock,
    Relation,
    Skill,
    SkillRevision,
    StoreItem,
    TenantSettings,
    Thread,
    UsageDay,
)
from memory_admin.selectors import access
from memory_admin.selectors.access import Principal, visible
from memory_admin.services.keys import api_key_revoke
from tests.conftest import Api

B_SECRET_TEXT = "Bob's launch codes are hidden under the blue teapot"
B_NOTEBOOK = "# Bob\n- Bob works nights at the observatory"
B_SKILL = "Bob's tenant deploys with a blue-green switch"


# A minimal export (the body of POST /users/{id}/import).
IMPORT_BODY = {
    "format": "memory-admin/export-v1",
    "facts": [
        {
            "id": "5d0c1f3e-7a2b-4c9d-8e6f-1a2b3c4d5e6f",
            "content": "bob hates the cello",
            "key": "hobby",
            "confidence": 1.0,
            "source": "user_stated",
            "valid_from": "2025-01-02T03:04:05Z",
            "created_at": "2025-01-02T03:04:05Z",
        }
    ],
}


def case(method: str, path: str, *rest):
    """A route to test, named by its method and path. A route renamed or removed fails its test."""
    return pytest.param(method, path, *rest, id=f"{method} {path}")


def assert_not_found(response, *leaks: str) -> None:
    assert response.status_code == 404, (response.status_code, response.content[:300])
    body = response.json()
    assert body["code"] == "not_found"
    for leak in leaks:
        assert leak not in response.content.decode(), f"the 404 leaked {leak!r}"


def fact_state(fact_id) -> tuple:
    fact = Fact.objects.get(pk=fact_id)
    return fact.status, fact.pinned, fact.content, fact.version, fact.superseded_by_id, fact.tenant_id


@pytest.fixture
def b_world(other_tenant, make_api):
    """Tenant B: user bob with a corrected fact (a chain with history), a notebook, a user skill and a
    tenant skill, all written through B's own key."""
    b_api = make_api(other_tenant, admin=True, agent="b-agent")
    first = b_api.post("users/bob/facts", {"content": B_SECRET_TEXT, "key": "secret.location", "source": "user_stated"})
    assert first.status_code == 201, first.content
    old_id = first.json()["fact"]["id"]
    corrected = b_api.post(f"facts/{old_id}/correct", {"content": B_SECRET_TEXT + " in the attic"})
    assert corrected.status_code == 201, corrected.content
    assert b_api.put("users/bob/notebook", {"content": B_NOTEBOOK, "version": 0}).status_code == 200
    assert b_api.put("skills/ops/deploy.md", {"content": B_SKILL}).status_code == 200
    assert b_api.put("skills/ops/bob.md", {"content": B_SKILL + " (bob)", "user_id": "bob"}).status_code == 200
    return {
        "api": b_api,
        "tenant": other_tenant,
        "bob": MemoryUser.objects.get(tenant=other_tenant, external_id="bob"),
        "old_fact": old_id,
        "fact": corrected.json()["id"],
    }


def b_snapshot(b_world) -> dict:
    tenant = b_world["tenant"]
    notebook = Notebook.objects.get(tenant=tenant, memory_user=b_world["bob"])
    return {
        "facts": sorted(fact_state(f.pk) for f in Fact.objects.filter(tenant=tenant)),
        "notebook": (notebook.version, notebook.content),
        "skills": sorted(Skill.objects.filter(tenant=tenant).values_list("path", "version", "content")),
        "audit": AuditEvent.objects.filter(tenant=tenant).count(),
        "users": sorted(MemoryUser.objects.filter(tenant=tenant).values_list("external_id", "erased_at")),
        "settings": TenantSettings.objects.filter(tenant=tenant).values().first(),
    }


# --- another tenant's objects, by id ------------------------------------------------------------

FACT_ID_ROUTES = [
    pytest.param("get", "facts/{id}", None, id="GET facts/{id}"),
    pytest.param("get", "facts/{id}/history", None, id="GET facts/{id}/history"),
    pytest.param(
        "post", "facts/{id}/correct", {"content": "Bob now hides them in the shed"}, id="POST facts/{id}/correct"
    ),
    pytest.param("delete", "facts/{id}", None, id="DELETE facts/{id}"),
    pytest.param("delete", "facts/{id}", {"reason": "tenant A wants it gone"}, id="DELETE facts/{id} with reason"),
    pytest.param("post", "facts/{id}/pin", {"pinned": True}, id="POST facts/{id}/pin"),
    pytest.param("post", "facts/{id}/pin", {"pinned": False}, id="POST facts/{id}/unpin"),
]


@pytest.mark.parametrize("which", ["fact", "old_fact"])
@pytest.mark.parametrize(("method", "path", "body"), FACT_ID_ROUTES)
@pytest.mark.parametrize("admin", [False, True], ids=["agent-key", "admin-key"])
def test_another_tenants_fact_is_not_found_on_every_fact_route(
    tenant, make_api, b_world, method, path, body, which, admin
):
    a_api = make_api(tenant, admin=admin)
    before = b_snapshot(b_world)
    url = path.format(id=b_world[which])
    response = a_api.get(url) if method == "get" else getattr(a_api, method)(url, body)
    assert_not_found(response, "launch codes", "teapot", "bob")
    assert b_snapshot(b_world) == before


@pytest.fixture
def b_entity(b_world) -> Entity:
    """An entity of tenant B's user bob, named by his fact, with a relation, as extraction stores them."""
    from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link

    fact = Fact.objects.get(pk=b_world["fact"])
    mentions = [EntityMention("Bob Teapot", "person", "subject"), EntityMention("Blue Teapot", "tool", "object")]
    fact_entities_link(
        principal=access.Principal.system(b_world["tenant"].pk),
        fact=fact,
        mentions=mentions,
        relations=[RelationDraft("Bob Teapot", "hides_codes_in", "Blue Teapot")],
    )
    return Entity.objects.get(tenant=b_world["tenant"], name="Bob Teapot")


@pytest.mark.parametrize("path", ["entities/{id}", "entities/{id}/graph"])
@pytest.mark.parametrize("admin", [False, True], ids=["agent-key", "admin-key"])
def test_another_tenants_entity_is_not_found_on_every_entity_route(tenant, make_api, b_entity, path, admin):
    a_api = make_api(tenant, admin=admin)
    assert_not_found(a_api.get(path.format(id=b_entity.pk)), "Teapot", "teapot", "hides_codes_in")
    listed = a_api.get("entities", q="teapot")
    assert listed.status_code == 200 and listed.json()["items"] == []


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        pytest.param("get", "users/{u}/facts", {}, id="GET users/{u}/facts"),
        pytest.param("get", "users/{u}/facts", {"status": "any"}, id="GET users/{u}/facts?status=any"),
        pytest.param("get", "users/{u}/notebook", {}, id="GET users/{u}/notebook"),
        pytest.param("get", "skills", {"user_id": "{u}"}, id="GET skills?user_id={u}"),
        pytest.param("get", "skills/ops/bob.md", {"user_id": "{u}"}, id="GET skills/{path}?user_id={u}"),
        case("get", "users/{u}/search", {"q": "launch codes"}),
        case("get", "users/{u}/context", {"task": "find the launch codes"}),
        case("get", "users/{u}/episodes", {}),
        case("get", "entities", {"user_id": "{u}"}),
    ],
)
def test_another_tenants_user_is_not_found_on_reads(api, b_world, method, path, params):
    before = b_snapshot(b_world)
    users_before = MemoryUser.objects.count()
    response = api.get(path.format(u="bob"), **{k: v.format(u="bob") for k, v in params.items()})
    assert_not_found(response, "launch codes", "teapot", "observatory", "blue-green")
    assert MemoryUser.objects.count() == users_before, "a read created a memory user"
    assert b_snapshot(b_world) == before


@pytest.mark.parametrize(
    ("method", "path"), [("get", "users/{u}/export"), ("delete", "users/{u}")], ids=["export", "erase"]
)
def test_admin_key_of_another_tenant_cannot_export_or_erase(tenant, make_api, b_world, method, path):
    a_admin = make_api(tenant, admin=True)
    before = b_snapshot(b_world)
    response = getattr(a_admin, method)(path.format(u="bob"))
    assert_not_found(response, "launch codes", "observatory")
    assert b_snapshot(b_world) == before
    assert MemoryUser.objects.get(pk=b_world["bob"].pk).erased_at is None


def test_writing_facts_for_the_same_user_id_lands_in_ones_own_tenant(tenant, api, b_world):
    """`user_id` is the agent's identifier within its tenant: A's "bob" is a different person."""
    before = b_snapshot(b_world)
    response = api.post("users/bob/facts", {"content": "A's bob likes tea", "source": "user_stated"})
    assert response.status_code == 201, response.content
    fact = Fact.objects.get(pk=response.json()["fact"]["id"])
    assert fact.tenant_id == tenant.pk
    assert fact.memory_user.tenant_id == tenant.pk
    assert fact.memory_user_id != b_world["bob"].pk
    assert b_snapshot(b_world) == before
    listed = api.get("users/bob/facts", status="any").json()["items"]
    assert [f["content"] for f in listed] == ["A's bob likes tea"]


def test_a_notebook_put_on_the_other_tenants_user_id_creates_ones_own_user(tenant, api, b_world):
    before = b_snapshot(b_world)
    response = api.put("users/bob/notebook", {"content": "A's bob: morning person", "version": 0})
    assert response.status_code == 200, response.content
    assert response.json()["version"] == 1
    a_bob = MemoryUser.objects.get(tenant=tenant, external_id="bob")
    assert Notebook.objects.get(memory_user=a_bob).content == "A's bob: morning person"
    assert b_snapshot(b_world) == before
    # B still reads its own notebook, untouched.
    b_view = b_world["api"].get("users/bob/notebook").json()
    assert (b_view["version"], b_view["content"]) == (1, B_NOTEBOOK)
    # And a stale-looking PUT from A (B's version number) does not conflict with B's notebook either.
    again = api.put("users/bob/notebook", {"content": "A's bob: evening person", "version": 1})
    assert again.status_code == 200, again.content
    assert b_snapshot(b_world) == before


def test_skills_of_another_tenant_are_never_listed_or_readable(tenant, api, b_world):
    own = api.put("skills/ops/own.md", {"content": "A's own deploy notes"})
    assert own.status_code == 200, own.content
    listed = api.get("skills").json()
    assert [s["path"] for s in listed] == ["ops/own.md"]
    assert [s["path"] for s in api.get("skills", prefix="ops").json()] == ["ops/own.md"]
    assert_not_found(api.get("skills/ops/deploy.md"), "blue-green")
    assert_not_found(api.get("skills/ops/bob.md"), "blue-green")
    assert_not_found(api.get("skills/ops/bob.md", user_id="bob"), "blue-green")


def test_a_skill_put_on_the_same_path_makes_ones_own_skill(tenant, api, b_world):
    before = b_snapshot(b_world)
    response = api.put("skills/ops/deploy.md", {"content": "A deploys by hand"})
    assert response.status_code == 200, response.content
    assert response.json()["version"] == 1
    assert Skill.objects.get(tenant=tenant, path="ops/deploy.md").content == "A deploys by hand"
    assert b_snapshot(b_world) == before


def test_fact_lists_never_contain_another_tenants_facts(api, b_world):
    api.post("users/alice/facts", {"content": "Alice drinks coffee", "source": "user_stated"})
    for status in ("active", "superseded", "any"):
        items = api.get("users/alice/facts", status=status).json()["items"]
        assert all(item["user_id"] == "alice" for item in items)
        assert str(b_world["fact"]) not in {item["id"] for item in items}
    assert {i["content"] for i in api.get("users/alice/facts", status="any").json()["items"]} == {"Alice drinks coffee"}


def test_history_of_ones_own_fact_shows_no_events_of_another_tenant(api, b_world):
    written = api.post("users/bob/facts", {"content": "A's bob likes tea", "source": "user_stated"}).json()
    history = api.get(f"facts/{written['fact']['id']}/history").json()
    assert [f["id"] for f in history["chain"]] == [written["fact"]["id"]]
    assert all("b-agent" not in event["actor"] for event in history["events"])
    assert "launch codes" not in str(history)


def test_settings_are_per_tenant(tenant, other_tenant, make_api, b_world):
    a_admin = make_api(tenant, admin=True)
    b_admin = b_world["api"]
    assert b_admin.patch("settings", {"confidence_threshold": 0.42, "fact_cap": 7}).status_code == 200
    before = b_snapshot(b_world)

    seen = a_admin.get("settings").json()
    assert (seen["confidence_threshold"], seen["fact_cap"]) == (0.7, 100)

    patched = a_admin.patch("settings", {"confidence_threshold": 0.9, "extraction_enabled": False})
    assert patched.status_code == 200, patched.content
    assert patched.json()["confidence_threshold"] == 0.9
    assert TenantSettings.objects.get(tenant=tenant).confidence_threshold == 0.9

    assert b_snapshot(b_world) == before
    b_seen = b_admin.get("settings").json()
    assert (b_seen["confidence_threshold"], b_seen["fact_cap"], b_seen["extraction_enabled"]) == (0.42, 7, True)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        case("get", "episodes/{id}"),
    ],
)
def test_another_tenants_episode_is_not_found(api, b_world, method, path):
    bob = b_world["bob"]
    now = timezone.now()
    episode = Episode.objects.create(
        tenant=b_world["tenant"], memory_user=bob, started_at=now, ended_at=now, summary="Bob opened the vault"
    )
    assert_not_found(api.get(path.format(id=episode.pk)), "vault")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        case(
            "post",
            "users/{u}/messages",
            {"thread_id": "t1", "messages": [{"role": "user", "content": "A's bob says hello to the service"}]},
        ),
        case(
            "post",
            "users/{u}/import",
            {
                **IMPORT_BODY,
                "messages": [
                    {
                        "thread_id": "t1",
                        "role": "user",
                        "content": "A's bob says hello to the service",
                        "created_at": "2025-01-02T03:04:05Z",
                    }
                ],
            },
        ),
    ],
)
def test_message_writes_with_the_other_tenants_user_id_stay_in_ones_own_tenant(
    tenant, api, b_world, method, path, body
):
    before = b_snapshot(b_world)
    b_messages = Message.objects.filter(tenant=b_world["tenant"]).count()
    response = getattr(api, method)(path.format(u="bob"), body)
    assert response.status_code in (200, 201, 202), response.content
    assert Message.objects.filter(tenant=b_world["tenant"]).count() == b_messages
    assert Message.objects.filter(tenant=tenant, memory_user__external_id="bob").exists()
    assert b_snapshot(b_world) == before


def test_an_import_naming_another_tenants_fact_ids_never_touches_them(tenant, api, b_world):
    """An export is untrusted: ids in it name facts of the export, never rows of this install. A crafted
    export whose correction `supersedes` B's fact, whose fact is `superseded_by` it and whose episode
    links it writes only A's own rows."""
    before = b_snapshot(b_world)
    body = {
        "format": "memory-admin/export-v1",
        "facts": [
            {
                "id": "7c2f0e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b",
                "content": "Bob's launch codes moved to the shed",
                "confidence": 1.0,
                "source": "user_correction",
                "supersedes": b_world["fact"],
                "valid_from": "2025-01-02T03:04:05Z",
                "created_at": "2025-01-02T03:04:05Z",
            },
            {
                "id": "7c2f0e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5c",
                "content": "A's bob keeps bees",
                "confidence": 1.0,
                "source": "user_stated",
                "status": "superseded",
                "superseded_by": b_world["old_fact"],
                "valid_from": "2025-01-02T03:04:06Z",
                "created_at": "2025-01-02T03:04:06Z",
            },
        ],
        "episodes": [
            {
                "id": "7c2f0e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5d",
                "started_at": "2025-01-02T03:00:00Z",
                "ended_at": "2025-01-02T04:00:00Z",
                "summary": "A's bob talked",
                "fact_ids": [b_world["fact"]],
            }
        ],
    }
    response = api.post("users/bob/import", body)
    assert response.status_code == 200, response.content
    assert "launch codes are hidden" not in response.content.decode()
    assert b_snapshot(b_world) == before
    a_bob = MemoryUser.objects.get(tenant=tenant, external_id="bob")
    assert sorted(Fact.objects.filter(memory_user=a_bob).values_list("content", "version", "supersedes_id")) == [
        ("A's bob keeps bees", 1, None),
        ("Bob's launch codes moved to the shed", 1, None),
    ]
    assert [d["exported_status"] for d in response.json()["diverged"]] == ["superseded"]
    assert not Episode.objects.get(memory_user=a_bob).facts.exists()


# --- keys restricted to some memory users ---------------------------------------------------------


@pytest.fixture
def two_users(tenant, api):
    """alice and bob in one tenant, each with a fact and a notebook, written by an unrestricted key."""
    ids = {}
    for name in ("alice", "bob"):
        r = api.post(
            f"users/{name}/facts", {"content": f"{name} plays the cello", "key": "hobby", "source": "user_stated"}
        )
        assert r.status_code == 201, r.content
        ids[name] = r.json()["fact"]["id"]
        assert (
            api.put(
                f"users/{name}/notebook", {"content": f"# {name}\n- {name} is left-handed", "version": 0}
            ).status_code
            == 200
        )
    return ids


@pytest.fixture
def alice_only(tenant, make_api) -> Api:
    return make_api(tenant, users=["alice"], agent="alice-bot")


def bob_snapshot(tenant) -> tuple:
    bob = MemoryUser.objects.get(tenant=tenant, external_id="bob")
    notebook = Notebook.objects.get(memory_user=bob)
    facts = sorted(fact_state(f.pk) for f in Fact.objects.filter(memory_user=bob))
    return facts, notebook.version, notebook.content, AuditEvent.objects.filter(memory_user=bob).count()


def test_restricted_key_reaches_its_own_users(alice_only, two_users):
    """The control for the tests below: the restricted key is a working key."""
    assert alice_only.get("users/alice/facts").json()["items"][0]["content"] == "alice plays the cello"
    assert alice_only.get(f"facts/{two_users['alice']}").status_code == 200
    assert alice_only.get(f"facts/{two_users['alice']}/history").status_code == 200
    assert alice_only.get("users/alice/notebook").json()["version"] == 1
    assert (
        alice_only.put("users/alice/notebook", {"content": "# alice\n- prefers mornings", "version": 1}).status_code
        == 200
    )
    assert alice_only.post(f"facts/{two_users['alice']}/pin", {"pinned": True}).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("get", "users/bob/facts", None, id="GET bob's facts"),
        pytest.param("get", "users/bob/notebook", None, id="GET bob's notebook"),
        pytest.param("put", "users/bob/notebook", {"content": "overwritten", "version": 1}, id="PUT bob's notebook"),
        pytest.param(
            "post",
            "users/bob/facts",
            {"content": "bob hates the cello", "key": "hobby", "source": "user_stated"},
            id="POST bob's facts",
        ),
        pytest.param("get", "facts/{bob}", None, id="GET bob's fact"),
        pytest.param("get", "facts/{bob}/history", None, id="GET bob's history"),
        pytest.param("post", "facts/{bob}/correct", {"content": "bob plays the tuba"}, id="correct bob's fact"),
        pytest.param("delete", "facts/{bob}", None, id="forget bob's fact"),
        pytest.param("post", "facts/{bob}/pin", {"pinned": True}, id="pin bob's fact"),
        pytest.param("get", "skills", {"user_id": "bob"}, id="GET skills of bob"),
        case("get", "users/bob/search", {"q": "cello"}),
        case("get", "users/bob/context", {"task": "music"}),
        case("get", "users/bob/episodes", None),
        case("post", "users/bob/messages", {"thread_id": "t", "messages": [{"role": "user", "content": "hi"}]}),
        case("post", "users/bob/import", IMPORT_BODY),
        case("get", "entities", {"user_id": "bob"}),
    ],
)
def test_restricted_key_cannot_reach_other_users(tenant, alice_only, two_users, method, path, body):
    before = bob_snapshot(tenant)
    url = path.format(bob=two_users["bob"])
    response = alice_only.get(url, **(body or {})) if method == "get" else getattr(alice_only, method)(url, body)
    assert_not_found(response, "cello", "left-handed")
    assert bob_snapshot(tenant) == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("post", "users/carol/facts", {"content": "carol sings", "source": "user_stated"}, id="fact"),
        pytest.param("put", "users/carol/notebook", {"content": "# carol", "version": 0}, id="notebook"),
        pytest.param("put", "skills/carol/notes.md", {"content": "carol's notes", "user_id": "carol"}, id="skill"),
        case("post", "users/carol/messages", {"thread_id": "t", "messages": [{"role": "user", "content": "hi"}]}),
        case("post", "users/carol/import", IMPORT_BODY),
    ],
)
def test_restricted_key_cannot_create_new_users_by_writing(tenant, alice_only, two_users, method, path, body):
    counts = (MemoryUser.objects.count(), Fact.objects.count(), Notebook.objects.count(), Skill.objects.count())
    response = getattr(alice_only, method)(path, body)
    assert_not_found(response)
    assert not MemoryUser.objects.filter(external_id="carol").exists()
    assert (MemoryUser.objects.count(), Fact.objects.count(), Notebook.objects.count(), Skill.objects.count()) == counts


def test_restricted_key_lists_no_other_users_skills(tenant, api, alice_only, two_users):
    assert api.put("skills/music/bob.md", {"content": "bob tunes down", "user_id": "bob"}).status_code == 200
    assert api.put("skills/music/shared.md", {"content": "everyone tunes to 440"}).status_code == 200
    paths = [s["path"] for s in alice_only.get("skills", user_id="alice").json()]
    assert paths == ["music/shared.md"]
    assert_not_found(alice_only.get("skills/music/bob.md", user_id="bob"), "tunes down")


# --- keys ---------------------------------------------------------------------------------------


AUTH_ROUTES = [
    ("get", "users/alice/facts"),
    ("post", "users/alice/facts"),
    ("get", "facts/{id}"),
    ("get", "users/alice/notebook"),
    ("put", "users/alice/notebook"),
    ("get", "skills"),
    ("get", "settings"),
    ("get", "users/alice/export"),
]


def _headers_for(kind: str, tenant) -> dict:
    if kind == "missing":
        return {}
    if kind == "empty bearer":
        return {"HTTP_AUTHORIZATION": "Bearer "}
    if kind == "wrong scheme":
        return {"HTTP_AUTHORIZATION": "Basic YWxpY2U6c2VjcmV0"}
    if kind == "no prefix":
        return {"HTTP_AUTHORIZATION": "Bearer " + "x" * 43}
    if kind == "unknown":
        return {"HTTP_AUTHORIZATION": "Bearer mem_" + uuid.uuid4().hex + uuid.uuid4().hex}
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "empty bearer", "wrong scheme", "no prefix", "unknown"])
@pytest.mark.parametrize(("method", "path"), AUTH_ROUTES)
def test_missing_malformed_and_unknown_keys_get_401(client, tenant, api, method, path, kind):
    fact = api.post("users/alice/facts", {"content": "Alice hums", "source": "user_stated"}).json()["fact"]
    users, facts = MemoryUser.objects.count(), Fact.objects.count()
    url = "/api/v1/" + path.format(id=fact["id"])
    body = '{"content": "Alice whistles", "source": "user_stated", "version": 0}'
    headers = _headers_for(kind, tenant)
    if method == "get":
        response = client.get(url, **headers)
    else:
        response = getattr(client, method)(url, body, content_type="application/json", **headers)
    assert response.status_code == 401, response.content
    assert response.json()["code"] == "unauthorized"
    assert "Alice hums" not in response.content.decode()
    assert (MemoryUser.objects.count(), Fact.objects.count()) == (users, facts)


def test_a_revoked_key_gets_401_from_then_on(tenant, make_api):
    key_api = make_api(tenant, admin=True, agent="soon-revoked")
    written = key_api.post("users/alice/facts", {"content": "Alice hums", "source": "user_stated"})
    assert written.status_code == 201
    fact_id = written.json()["fact"]["id"]
    api_key_revoke(key=ApiKey.objects.get(agent__name="soon-revoked"))
    facts = Fact.objects.count()
    for response in (
        key_api.get("users/alice/facts"),
        key_api.get(f"facts/{fact_id}"),
        key_api.post("users/alice/facts", {"content": "Alice whistles", "source": "user_stated"}),
        key_api.delete(f"facts/{fact_id}"),
        key_api.get("settings"),
    ):
        assert response.status_code == 401, response.content
        assert response.json()["code"] == "unauthorized"
    assert Fact.objects.count() == facts
    assert Fact.objects.get(pk=fact_id).status == "active"


def test_a_key_of_another_tenant_keeps_working_after_one_is_revoked(tenant, other_tenant, make_api):
    """Revoking is per key: the control that the 401s above come from revocation."""
    a_api = make_api(tenant, agent="a-stays")
    b_api = make_api(other_tenant, agent="b-goes")
    api_key_revoke(key=ApiKey.objects.get(agent__name="b-goes"))
    assert b_api.get("skills").status_code == 401
    assert a_api.get("skills").status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("get", "settings", None),
        ("patch", "settings", {"confidence_threshold": 0.1}),
        ("get", "users/alice/export", None),
        ("delete", "users/alice", None),
    ],
)
def test_non_admin_keys_are_forbidden_admin_routes(tenant, api, method, path, body):
    assert api.post("users/alice/facts", {"content": "Alice hums", "source": "user_stated"}).status_code == 201
    response = getattr(api, method)(path, body) if method != "get" else api.get(path)
    assert response.status_code == 403, response.content
    assert response.json()["code"] == "forbidden"
    assert "Alice hums" not in response.content.decode()
    assert TenantSettings.objects.get(tenant=tenant).confidence_threshold == 0.7
    alice = MemoryUser.objects.get(tenant=tenant, external_id="alice")
    assert alice.erased_at is None
    assert Fact.objects.get(memory_user=alice).content == "Alice hums"


def test_admin_key_can_export_and_erase_its_own_users(tenant, admin_api):
    """The control for the 403s and 404s above: the same routes work for the tenant's admin."""
    assert admin_api.post("users/alice/facts", {"content": "Alice hums", "source": "user_stated"}).status_code == 201
    export = admin_api.get("users/alice/export")
    assert export.status_code == 200
    assert [f["content"] for f in export.json()["facts"]] == ["Alice hums"]
    erase = admin_api.delete("users/alice")
    assert erase.status_code == 200, erase.content
    assert "Alice hums" not in Fact.objects.get(tenant=tenant).content


# --- reads never create users -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        pytest.param("get", "users/nobody/facts", {}, id="facts"),
        pytest.param("get", "users/nobody/notebook", {}, id="notebook"),
        pytest.param("get", "users/nobody/export", {}, id="export"),
        pytest.param("get", "skills", {"user_id": "nobody"}, id="skills"),
        pytest.param("get", "skills/ops/x.md", {"user_id": "nobody"}, id="skill"),
        case("get", "users/nobody/search", {"q": "anything"}),
        case("get", "users/nobody/context", {"task": "anything"}),
        case("get", "users/nobody/episodes", {}),
    ],
)
def test_reads_of_an_unknown_user_are_404_and_create_nothing(tenant, admin_api, method, path, params):
    users, notebooks = MemoryUser.objects.count(), Notebook.objects.count()
    assert_not_found(admin_api.get(path, **params))
    assert not MemoryUser.objects.filter(external_id="nobody").exists()
    assert (MemoryUser.objects.count(), Notebook.objects.count()) == (users, notebooks)


def test_erase_of_an_unknown_user_is_404_and_creates_nothing(admin_api):
    users = MemoryUser.objects.count()
    assert_not_found(admin_api.delete("users/nobody"))
    assert MemoryUser.objects.count() == users


# --- the access function, exhaustively ----------------------------------------------------------


def populate(tenant, user: MemoryUser) -> dict[type, set]:
    """One row of every guarded model owned by `user` in `tenant`; returns their primary keys."""
    now = timezone.now()
    rows: dict[type, list] = {}

    def fact(text: str) -> Fact:
        return Fact.objects.create(
            tenant=tenant,
            memory_user=user,
            content=text,
            content_hash=uuid.uuid4().hex,
            confidence=0.9,
            source="user_stated",
            valid_from=now,
        )

    fact_a, fact_b = fact(f"{user} likes jazz"), fact(f"{user} hates jazz")
    notebook = Notebook.objects.create(tenant=tenant, memory_user=user, content="# notes", version=1)
    skill = Skill.objects.create(tenant=tenant, memory_user=user, path="music/jazz.md", content="swing")
    thread = Thread.objects.create(tenant=tenant, memory_user=user, external_id="t1")
    batch = ExtractionBatch.objects.create(tenant=tenant, memory_user=user, thread=thread)
    rows[MemoryUser] = [user]
    rows[Fact] = [fact_a, fact_b]
    rows[Notebook] = [notebook]
    rows[NotebookRevision] = [NotebookRevision.objects.create(notebook=notebook, version=1, content="# notes")]
    rows[Skill] = [skill]
    rows[SkillRevision] = [SkillRevision.objects.create(skill=skill, version=1, content="swing")]
    rows[Thread] = [thread]
    rows[Message] = [
        Message.objects.create(
            tenant=tenant, memory_user=user, thread=thread, role="user", content="I like jazz", created_at=now
        )
    ]
    rows[Episode] = [
        Episode.objects.create(
            tenant=tenant, memory_user=user, thread=thread, started_at=now, ended_at=now, summary="talked jazz"
        )
    ]
    rows[Contradiction] = [
        Contradiction.objects.create(tenant=tenant, memory_user=user, fact_a=fact_a, fact_b=fact_b, detector="semantic")
    ]
    rows[ExtractionBatch] = [batch]
    rows[PiiBlock] = [
        PiiBlock.objects.create(
            tenant=tenant,
            memory_user=user,
            route="fact",
            action="blocked",
            kinds=["email"],
            redacted_preview="[REDACTED:email]",
            fingerprint="f" * 64,
        )
    ]
    rows[AuditEvent] = [
        AuditEvent.objects.create(
            tenant=tenant, memory_user=user, actor_type="agent", actor="agent:x", action="fact.write"
        )
    ]
    rows[Edge] = [Edge.objects.create(tenant=tenant, type="CONTRADICTS", src_fact=fact_b, dst_fact=fact_a)]
    rows[LlmCall] = [LlmCall.objects.create(tenant=tenant, batch=batch, layer="extraction", model="m")]
    rows[StoreItem] = [
        StoreItem.objects.create(
            tenant=tenant,
            memory_user=user,
            namespace=["memories", str(user)],
            key="k",
            value={},
            created_at=now,
            updated_at=now,
        )
    ]
    rows[Checkpoint] = [
        Checkpoint.objects.create(
            tenant=tenant,
            memory_user=user,
            thread=thread,
            checkpoint_id="c1",
            type="t",
            data=b"",
            metadata_type="t",
            metadata_data=b"",
        )
    ]

    source = KnowledgeSource.objects.create(tenant=tenant, memory_user=user, kind="url", name="wiki")
    document = KnowledgeDocument.objects.create(source=source, tenant=tenant, memory_user=user, locator="https://x/")
    rows[KnowledgeSource] = [source]
    rows[KnowledgeDocument] = [document]
    rows[KnowledgeChunk] = [
        KnowledgeChunk.objects.create(
            tenant=tenant,
            memory_user=user,
            source=source,
            document=document,
            ordinal=0,
            content=f"{user} plays jazz",
            content_hash="h",
            tokens=3,
            document_version=1,
            embedding=[0.0] * 384,
            fetched_at=now,
        )
    ]

    # Tenant-wide counts (no user): one row per user here only so that each has rows to look for.
    def entity(name: str) -> Entity:
        return Entity.objects.create(
            tenant=tenant, memory_user=user, name=name, alias_keys=[name.lower()], first_seen=now, last_seen=now
        )

    jazz, club = entity(f"{user} jazz"), entity(f"{user} club")
    rows[Entity] = [jazz, club]
    rows[FactEntity] = [FactEntity.objects.create(fact=fact_a, entity=jazz, role="object")]
    rows[Relation] = [
        Relation.objects.create(
            tenant=tenant, memory_user=user, subject=club, object=jazz, type="plays", source_fact=fact_a, valid_from=now
        )
    ]
    merged = entity(f"{user} jazz club")
    rows[Entity].append(merged)
    rows[EntityMerge] = [
        EntityMerge.objects.create(
            tenant=tenant,
            memory_user=user,
            survivor=club,
            loser=merged,
            actor="staff:x",
            name_before="c",
            type_before="other",
        )
    ]
    rows[EntityMergeReview] = [
        EntityMergeReview.objects.create(tenant=tenant, memory_user=user, entity=jazz, candidate=club, similarity=0.85)
    ]
    rows[UsageDay] = [
        UsageDay.objects.create(tenant=tenant, day=date(2000, 1, 1) + timedelta(days=user.pk), kind="search", count=1)
    ]
    return {model: {row.pk for row in objs} for model, objs in rows.items()}


GUARDED_MODELS = sorted(access._OWNER_PATH, key=lambda m: m.__name__)
TENANT_WIDE = {UsageDay}  # rows of no user, about every user: unrestricted principals only


@pytest.fixture
def access_world(tenant, other_tenant):
    alice = MemoryUser.objects.create(tenant=tenant, external_id="alice")
    bob = MemoryUser.objects.create(tenant=tenant, external_id="bob")
    # Same external id in the other tenant: ids are namespaced per tenant, rows must not mix.
    b_alice = MemoryUser.objects.create(tenant=other_tenant, external_id="alice")
    return {
        "alice": populate(tenant, alice),
        "bob": populate(tenant, bob),
        "other": populate(other_tenant, b_alice),
        "alice_user": alice,
    }


def principals(tenant, alice: MemoryUser) -> dict[str, Principal]:
    return {
        "agent": Principal(tenant_id=tenant.pk, role="agent", actor="agent:a"),
        "agent_admin": Principal(tenant_id=tenant.pk, role="agent_admin", actor="agent:admin"),
        "operator": Principal(tenant_id=tenant.pk, role="operator", actor="staff:op", actor_type="staff"),
        "auditor": Principal(tenant_id=tenant.pk, role="auditor", actor="staff:aud", actor_type="staff"),
        "system": Principal.system(tenant.pk),
        "restricted_agent": Principal(
            tenant_id=tenant.pk, role="agent", actor="agent:r", allowed_external_ids=("alice",)
        ),
        "member": Principal(
            tenant_id=tenant.pk, role="member", actor="staff:alice", actor_type="staff", member_user_id=alice.pk
        ),
    }


def test_every_guarded_model_is_covered_by_these_tests(access_world):
    """Adding a model to the access check without extending `populate` fails here."""
    assert set(access_world["other"]) == set(access._OWNER_PATH)


@pytest.mark.parametrize("model", GUARDED_MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("who", ["agent", "agent_admin", "operator", "auditor", "system", "restricted_agent", "member"])
def test_visible_never_returns_another_tenants_rows(tenant, access_world, model, who):
    principal = principals(tenant, access_world["alice_user"])[who]
    seen = set(visible(principal, model.objects.all()).values_list("pk", flat=True))
    assert not seen & access_world["other"][model], f"{who} sees {model.__name__} rows of another tenant"
    # Control: the filter is not simply empty; everyone sees alice's rows.
    assert access_world["alice"][model] <= seen or (model in TENANT_WIDE and principal.restricted)
    # Also when the queryset is already narrowed, or asks for the other tenant's rows by id.
    asked = model.objects.filter(pk__in=access_world["other"][model])
    assert not visible(principal, asked).exists()


@pytest.mark.parametrize("model", GUARDED_MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("who", ["restricted_agent", "member"])
def test_visible_gives_restricted_principals_no_rows_of_other_users(tenant, access_world, model, who):
    principal = principals(tenant, access_world["alice_user"])[who]
    seen = set(visible(principal, model.objects.all()).values_list("pk", flat=True))
    assert not seen & access_world["bob"][model], f"{who} sees bob's {model.__name__} rows"
    assert seen == set() if model in TENANT_WIDE else access_world["alice"][model] <= seen


@pytest.mark.parametrize("model", GUARDED_MODELS, ids=lambda m: m.__name__)
def test_unrestricted_principals_see_every_user_of_their_tenant(tenant, access_world, model):
    principal = principals(tenant, access_world["alice_user"])["agent"]
    seen = set(visible(principal, model.objects.all()).values_list("pk", flat=True))
    assert access_world["alice"][model] | access_world["bob"][model] <= seen


@pytest.mark.parametrize("who", ["agent", "restricted_agent", "member"])
def test_get_visible_and_memory_user_for_answer_not_found(tenant, other_tenant, access_world, who):
    principal = principals(tenant, access_world["alice_user"])[who]
    other_fact = next(iter(access_world["other"][Fact]))
    with pytest.raises(access.NotFound):
        access.get_visible(principal, Fact.objects.all(), pk=other_fact)
    with pytest.raises(access.NotFound):
        access.get_visible(principal, Fact.objects.all(), pk="not-a-uuid")
    with pytest.raises(access.NotFound):
        access.writable_fact(principal, other_fact)
    with pytest.raises(access.NotFound):
        access.memory_user_for(principal, "nobody")
    assert access.memory_user_for(principal, "alice").tenant_id == tenant.pk
    if who != "agent":
        with pytest.raises(access.NotFound):
            access.memory_user_for(principal, "bob")
        with pytest.raises(access.NotFound):
            access.memory_user_for(principal, "carol", create=True)
        assert not MemoryUser.objects.filter(external_id="carol").exists()


def test_tenant_wide_notebook_skills_and_org_facts_are_shared_within_the_tenant_only(
    tenant, other_tenant, access_world
):
    now = timezone.now()
    mine = {
        Notebook: Notebook.objects.get(tenant=tenant, memory_user=None).pk,
        Skill: Skill.objects.create(tenant=tenant, memory_user=None, path="house.md", content="rules").pk,
        Fact: Fact.objects.create(
            tenant=tenant,
            scope="org",
            content="the office is in Lyon",
            content_hash="h1",
            confidence=1,
            source="user_stated",
            valid_from=now,
        ).pk,
    }
    theirs = {
        Notebook: Notebook.objects.get(tenant=other_tenant, memory_user=None).pk,
        Skill: Skill.objects.create(tenant=other_tenant, memory_user=None, path="house.md", content="x").pk,
        Fact: Fact.objects.create(
            tenant=other_tenant,
            scope="org",
            content="their office",
            content_hash="h2",
            confidence=1,
            source="user_stated",
            valid_from=now,
        ).pk,
    }
    for who, principal in principals(tenant, access_world["alice_user"]).items():
        for model in (Notebook, Skill, Fact):
            seen = set(visible(principal, model.objects.all()).values_list("pk", flat=True))
            assert mine[model] in seen, (who, model.__name__)
            assert theirs[model] not in seen, (who, model.__name__)


def test_the_user_list_holds_ones_own_tenant_and_a_restricted_keys_users_only(api, b_world, alice_only, two_users):
    assert [u["user_id"] for u in api.get("users").json()["items"]] == ["alice", "bob"]
    assert all(u["user_id"] != "bob" or u["task_ids"] == [] for u in api.get("users").json()["items"])
    assert [u["user_id"] for u in alice_only.get("users").json()["items"]] == ["alice"]
    assert b_world["api"].get("users").json()["items"][0]["user_id"] == "bob"
    assert len(b_world["api"].get("users").json()["items"]) == 1
