"""Bad input (SPEC §11), through the real HTTP API on the real Postgres.

Every refusal answers JSON with a stable `code`, names what was wrong, and writes nothing: the row
counts of everything a write could touch are compared before and after.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from memory_admin.models import (
    AuditEvent,
    Fact,
    MemoryUser,
    Notebook,
    NotebookRevision,
    PiiBlock,
    Skill,
    SkillRevision,
    TenantSettings,
)

ROOT = Path(__file__).resolve().parents[2]


def counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Fact, AuditEvent, MemoryUser, Notebook, NotebookRevision, Skill, SkillRevision, PiiBlock)
    }


def alice_state(tenant) -> tuple:
    alice = MemoryUser.objects.get(tenant=tenant, external_id="alice")
    notebook = Notebook.objects.get(memory_user=alice)
    facts = sorted(
        Fact.objects.filter(memory_user=alice).values_list(
            "id", "content", "status", "pinned", "confidence", "version", "metadata"
        )
    )
    skill = Skill.objects.get(tenant=tenant, path="ops/deploy.md")
    settings_row = TenantSettings.objects.filter(tenant=tenant).values().get()
    return facts, notebook.version, notebook.content, skill.version, skill.content, settings_row


@pytest.fixture
def alice(tenant, api):
    """alice with one fact, a notebook at version 1 and a tenant skill at version 1."""
    fact = api.post(
        "users/alice/facts", {"content": "Alice prefers vim", "key": "preference.editor", "source": "user_stated"}
    )
    assert fact.status_code == 201, fact.content
    notebook = api.put("users/alice/notebook", {"content": "# Alice\n- Alice lives in Lyon", "version": 0})
    assert notebook.status_code == 200, notebook.content
    skill = api.put("skills/ops/deploy.md", {"content": "kubectl apply -f deploy.yaml"})
    assert skill.status_code == 200, skill.content
    return {"fact": fact.json()["fact"]["id"]}


def assert_refused(response, status: int, code: str) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:400])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code, body
    assert body["detail"]
    return body


# --- 422: malformed JSON, wrong types, unknown enums, out of range, unknown fields -----------------

FACT = "users/{user}/facts"
IMPORT = "users/{user}/import"
EXPORTED_FACT = {
    "id": "3f6c2a1b-9d8e-4f70-a1b2-c3d4e5f60718",
    "content": "Alice likes tea",
    "confidence": 1.0,
    "source": "user_stated",
    "valid_from": "2025-01-02T03:04:05Z",
    "created_at": "2025-01-02T03:04:05Z",
}
INVALID = [
    # (method, path, body, field)
    pytest.param("post", FACT, '{"content": ', "body", id="fact: truncated JSON"),
    pytest.param("post", FACT, '{"content": "x",}', "body", id="fact: trailing comma"),
    pytest.param("post", FACT, "content=Alice+likes+tea", "body", id="fact: form-encoded, not JSON"),
    pytest.param("post", FACT, b"\xff\xfe\x00", "body", id="fact: not UTF-8"),
    pytest.param("post", FACT, "[1, 2]", "body", id="fact: array"),
    pytest.param("post", FACT, "", "body", id="fact: empty body"),
    pytest.param("post", FACT, {}, "content", id="fact: no content"),
    pytest.param("post", FACT, {"content": 42}, "content", id="fact: content number"),
    pytest.param("post", FACT, {"content": None}, "content", id="fact: content null"),
    pytest.param("post", FACT, {"content": ["a"]}, "content", id="fact: content list"),
    pytest.param(
        "post", FACT, {"content": "Alice likes tea", "confidence": "0.9"}, "confidence", id="fact: confidence string"
    ),
    pytest.param(
        "post", FACT, {"content": "Alice likes tea", "confidence": True}, "confidence", id="fact: confidence bool"
    ),
    pytest.param(
        "post", FACT, {"content": "Alice likes tea", "confidence": 1.5}, "confidence", id="fact: confidence above 1"
    ),
    pytest.param(
        "post", FACT, {"content": "Alice likes tea", "confidence": -0.1}, "confidence", id="fact: confidence below 0"
    ),
    pytest.param(
        "post", FACT, {"content": "Alice likes tea", "importance": 2}, "importance", id="fact: importance above 1"
    ),
    pytest.param("post", FACT, {"content": "Alice likes tea", "pinned": "yes"}, "pinned", id="fact: pinned yes"),
    pytest.param("post", FACT, {"content": "Alice likes tea", "pinned": 1}, "pinned", id="fact: pinned 1"),
    pytest.param(
        "post", FACT, {"content": "Alice likes tea", "category": "hobby"}, "category", id="fact: unknown category"
    ),
    pytest.param("post", FACT, {"content": "Alice likes tea", "kind": "rumour"}, "kind", id="fact: unknown kind"),
    pytest.param("post", FACT, {"content": "Alice likes tea", "source": "gossip"}, "source", id="fact: unknown source"),
    pytest.param(
        "post",
        FACT,
        {"content": "Alice likes tea", "source": "notebook"},
        "source",
        id="fact: agents cannot claim the notebook as source",
    ),
    pytest.param(
        "post",
        FACT,
        {"content": "Alice likes tea", "source": "USER_STATED"},
        "source",
        id="fact: enum values are case-sensitive",
    ),
    pytest.param("post", FACT, {"content": "Alice likes tea", "ttl_days": 0}, "ttl_days", id="fact: ttl 0"),
    pytest.param("post", FACT, {"content": "Alice likes tea", "ttl_days": "7"}, "ttl_days", id="fact: ttl string"),
    pytest.param("post", FACT, {"content": "Alice likes tea", "key": "has space"}, "key", id="fact: bad key"),
    pytest.param("post", FACT, {"content": "Alice likes tea", "key": ""}, "key", id="fact: empty key"),
    pytest.param(
        "post", FACT, {"content": "Alice likes tea", "observed_at": "last tuesday"}, "observed_at", id="fact: bad date"
    ),
    pytest.param(
        "post",
        FACT,
        {"content": "Alice likes tea", "metadata": "ticket-7"},
        "metadata",
        id="fact: metadata not an object",
    ),
    pytest.param("post", FACT, {"content": "Alice likes tea", "task_id": ""}, "task_id", id="fact: empty task"),
    pytest.param("post", FACT, {"content": "Alice likes tea", "colour": "red"}, "colour", id="fact: unknown field"),
    pytest.param("post", FACT, {"content": "   "}, "content", id="fact: blank content"),
    pytest.param("post", "facts/{fact}/correct", {"content": 42}, "content", id="correct: content number"),
    pytest.param(
        "post",
        "facts/{fact}/correct",
        {"content": "Alice prefers emacs", "confidence": "0.9"},
        "confidence",
        id="correct: confidence string",
    ),
    pytest.param(
        "post",
        "facts/{fact}/correct",
        {"content": "Alice prefers emacs", "category": "hobby"},
        "category",
        id="correct: unknown category",
    ),
    pytest.param(
        "post",
        "facts/{fact}/correct",
        {"content": "Alice prefers emacs", "source": "user_stated"},
        "source",
        id="correct: unknown field",
    ),
    pytest.param("post", "facts/{fact}/correct", '{"content": ', "body", id="correct: truncated JSON"),
    pytest.param("post", "facts/{fact}/pin", {"pinned": "yes"}, "pinned", id="pin: pinned yes"),
    pytest.param("post", "facts/{fact}/pin", {}, "pinned", id="pin: no pinned"),
    pytest.param("delete", "facts/{fact}", {"reason": 5}, "reason", id="forget: reason number"),
    pytest.param("delete", "facts/{fact}", {"why": "x"}, "why", id="forget: unknown field"),
    pytest.param(
        "put", "users/{user}/notebook", {"content": "# Alice", "version": "1"}, "version", id="notebook: version string"
    ),
    pytest.param(
        "put",
        "users/{user}/notebook",
        {"content": "# Alice", "version": -1},
        "version",
        id="notebook: negative version",
    ),
    pytest.param("put", "users/{user}/notebook", {"content": "# Alice"}, "version", id="notebook: no version"),
    pytest.param("put", "users/{user}/notebook", {"version": 1}, "content", id="notebook: no content"),
    pytest.param(
        "put", "users/{user}/notebook", {"content": 7, "version": 1}, "content", id="notebook: content number"
    ),
    pytest.param(
        "put",
        "users/{user}/notebook",
        {"content": "# Alice", "version": 1, "colour": "red"},
        "colour",
        id="notebook: unknown field",
    ),
    pytest.param(
        "put", "users/{user}/notebook", '{"content": "# Alice", "version": 1', "body", id="notebook: truncated JSON"
    ),
    pytest.param(
        "put", "skills/ops/deploy.md", {"content": "helm", "version": "1"}, "version", id="skill: version string"
    ),
    pytest.param("put", "skills/ops/deploy.md", {"content": 5, "version": 1}, "content", id="skill: content number"),
    pytest.param(
        "put", "skills/ops/deploy.md", {"content": "helm", "version": 1, "tags": []}, "tags", id="skill: unknown field"
    ),
    pytest.param("put", "skills/Ops/../../etc", {"content": "helm", "version": 1}, "path", id="skill: bad path"),
    pytest.param("post", IMPORT, '{"format": ', "body", id="import: truncated JSON"),
    pytest.param("post", IMPORT, {}, "format", id="import: no format"),
    pytest.param("post", IMPORT, {"format": "memory-admin/export-v2"}, "format", id="import: unknown format"),
    pytest.param(
        "post", IMPORT, {"format": "memory-admin/export-v1", "facts": "many"}, "facts", id="import: facts not a list"
    ),
    pytest.param(
        "post", IMPORT, {"format": "memory-admin/export-v1", "colour": 1}, "colour", id="import: unknown field"
    ),
    pytest.param(
        "post",
        IMPORT,
        {"format": "memory-admin/export-v1", "facts": [{**EXPORTED_FACT, "confidence": "1"}]},
        "facts.0.confidence",
        id="import: confidence string",
    ),
    pytest.param(
        "post",
        IMPORT,
        {"format": "memory-admin/export-v1", "facts": [{**EXPORTED_FACT, "id": "7"}]},
        "facts.0.id",
        id="import: fact id not a uuid",
    ),
    pytest.param(
        "post",
        IMPORT,
        {"format": "memory-admin/export-v1", "facts": [{**EXPORTED_FACT, "status": "deleted"}]},
        "facts.0.status",
        id="import: unknown status",
    ),
    pytest.param(
        "post",
        IMPORT,
        {"format": "memory-admin/export-v1", "facts": [{**EXPORTED_FACT, "content": "tea\u0000"}]},
        "facts.0.content",
        id="import: NUL in content",
    ),
    pytest.param(
        "post",
        IMPORT,
        {"format": "memory-admin/export-v1", "facts": [EXPORTED_FACT, EXPORTED_FACT]},
        "facts.id",
        id="import: a fact id twice",
    ),
]


def for_each_user(cases: list, *, user_first: bool) -> list:
    """Each case for a user who exists (alice) and, where the path or body names a user, for one the
    first write would create (newbie); a case that names no user runs once. The user comes last in
    the arguments; in the id, first or last as the stacked parametrize marks used to put it."""
    out = []
    for case in cases:
        users = ["alice", "newbie"] if "{user}" in str(case.values[:3]) else ["alice"]
        for user in users:
            name = f"{user}-{case.id}" if user_first else f"{case.id}-{user}"
            out.append(pytest.param(*case.values, user, id=name, marks=case.marks))
    return out


@pytest.mark.parametrize(("method", "path", "body", "field", "user"), for_each_user(INVALID, user_first=False))
def test_invalid_input_is_422_with_the_field_and_nothing_is_written(
    tenant, api, alice, method, path, body, field, user
):
    before, state = counts(), alice_state(tenant)
    response = getattr(api, method)(path.format(user=user, fact=alice["fact"]), body)
    out = assert_refused(response, 422, "invalid")
    assert out["field"] == field, out
    assert field in out["detail"]
    assert counts() == before
    assert alice_state(tenant) == state
    assert not MemoryUser.objects.filter(external_id="newbie").exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"confidence_threshold": "0.5"}, "confidence_threshold"),
        ({"confidence_threshold": 1.5}, "confidence_threshold"),
        ({"fact_cap": 0}, "fact_cap"),
        ({"fact_cap": 10.5}, "fact_cap"),
        ({"pii_policy": {"email": "shout"}}, "pii_policy.email"),
        ({"pii_policy": {"password": "flag"}}, "pii_policy.password"),
        ({"search_weights": {"vector": "high"}}, "search_weights.vector"),
        ({"extraction_enabled": "no"}, "extraction_enabled"),
        ({"colour": "red"}, "colour"),
        ('{"fact_cap": ', "body"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_invalid_settings_are_422_and_change_nothing(tenant, admin_api, alice, body, field):
    before, state = counts(), alice_state(tenant)
    out = assert_refused(admin_api.patch("settings", body), 422, "invalid")
    assert out["field"] == field, out
    assert counts() == before
    assert alice_state(tenant) == state


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "bogus"}, "status"),
        ({"category": "hobby"}, "category"),
        ({"kind": "rumour"}, "kind"),
        ({"limit": "many"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
    ],
)
def test_invalid_list_filters_are_422(api, alice, params, field):
    out = assert_refused(api.get("users/alice/facts", **params), 422, "invalid")
    assert out["field"] == field, out


def test_every_validation_error_is_listed(api, alice):
    """An agent fixing its payload sees all problems at once, not one per round trip."""
    response = api.post("users/alice/facts", {"content": 1, "confidence": "high", "kind": "rumour"})
    out = assert_refused(response, 422, "invalid")
    assert {e["field"] for e in out["errors"]} == {"content", "confidence", "kind"}
    assert all(e["reason"] for e in out["errors"])


# --- 413: oversized content -------------------------------------------------------------------------


def test_a_fact_of_exactly_the_limit_is_accepted(api, alice):
    """The control for the 413s below: the limit is inclusive and counts bytes."""
    content = ("Alice keeps notes " * 1000)[: settings.MAX_FACT_BYTES]
    response = api.post("users/alice/facts", {"content": content, "source": "user_stated"})
    assert response.status_code == 201, response.content[:300]
    assert Fact.objects.get(pk=response.json()["fact"]["id"]).content == content


@pytest.mark.parametrize(
    ("method", "path", "body", "code", "limit", "user"),
    for_each_user(
        [
            pytest.param(
                "post",
                FACT,
                {"content": "a" * (8 * 1024 + 1), "source": "user_stated"},
                "content_too_large",
                8 * 1024,
                id="fact over 8 KB",
            ),
            pytest.param(
                "post",
                FACT,
                {"content": "€" * 2731, "source": "user_stated"},
                "content_too_large",
                8 * 1024,
                id="fact over 8 KB in bytes, not characters",
            ),
            pytest.param(
                "post",
                FACT,
                {"content": "Alice likes tea", "source": "user_stated", "metadata": {"blob": "x" * 5000}},
                "metadata_too_large",
                4 * 1024,
                id="metadata over 4 KB",
            ),
            pytest.param(
                "post",
                "facts/{fact}/correct",
                {"content": "b" * (8 * 1024 + 1)},
                "content_too_large",
                8 * 1024,
                id="correction over 8 KB",
            ),
            pytest.param(
                "put",
                "users/{user}/notebook",
                {"content": "n" * (1024 * 1024 + 1), "version": 1},
                "content_too_large",
                1024 * 1024,
                id="notebook over 1 MB",
            ),
            pytest.param(
                "put",
                "users/{user}/notebook",
                {"content": "n" * (3 * 1024 * 1024), "version": 1},
                "content_too_large",
                1024 * 1024,
                id="notebook of 3 MB",
            ),
            pytest.param(
                "put",
                "users/{user}/notebook",
                {"content": "n" * (5 * 1024 * 1024), "version": 1},
                "content_too_large",
                None,
                id="notebook larger than any request body",
            ),
            pytest.param(
                "put",
                "skills/ops/deploy.md",
                {"content": "s" * (256 * 1024 + 1), "version": 1},
                "content_too_large",
                256 * 1024,
                id="skill over 256 KB",
            ),
            pytest.param(
                "put",
                "skills/ops/newbie.md",
                {"content": "s" * (256 * 1024 + 1), "user_id": "{user}"},
                "content_too_large",
                256 * 1024,
                id="user skill over 256 KB",
            ),
            pytest.param(
                "post",
                IMPORT,
                {
                    "format": "memory-admin/export-v1",
                    "facts": [
                        EXPORTED_FACT,
                        {**EXPORTED_FACT, "id": str(uuid.uuid4()), "content": "a" * (8 * 1024 + 1)},
                    ],
                },
                "content_too_large",
                8 * 1024,
                id="import: a fact over 8 KB",
            ),
            pytest.param(
                "post",
                IMPORT,
                {
                    "format": "memory-admin/export-v1",
                    "notebook": {
                        "revisions": [
                            {"version": 1, "content": "n" * (1024 * 1024 + 1), "created_at": "2025-01-02T03:04:05Z"}
                        ]
                    },
                },
                "content_too_large",
                1024 * 1024,
                id="import: a notebook revision over 1 MB",
            ),
        ],
        user_first=True,
    ),
)
def test_oversized_content_is_413_with_the_limit_and_nothing_is_written(
    tenant, api, alice, method, path, body, code, limit, user
):
    body = json.loads(json.dumps(body).replace("{user}", user))
    before, state = counts(), alice_state(tenant)
    response = getattr(api, method)(path.format(user=user, fact=alice["fact"]), body)
    out = assert_refused(response, 413, code)
    if limit is not None:
        assert out["limit"] == limit
    else:
        assert out["limit"] > 0
    assert str(out["limit"]) in out["detail"]
    assert counts() == before, "an oversized write left rows behind"
    assert alice_state(tenant) == state
    assert not MemoryUser.objects.filter(external_id="newbie").exists()


# --- 409: stale versions --------------------------------------------------------------------------


@pytest.mark.parametrize("stale", [0, 2, 99])
def test_a_stale_notebook_version_is_409_with_the_current_version(tenant, api, alice, stale):
    before, state = counts(), alice_state(tenant)
    response = api.put("users/alice/notebook", {"content": "# Alice\n- Alice moved to Paris", "version": stale})
    out = assert_refused(response, 409, "version_conflict")
    assert out["current_version"] == 1
    assert counts() == before
    assert alice_state(tenant) == state
    assert api.get("users/alice/notebook").json()["content"] == "# Alice\n- Alice lives in Lyon"


def test_two_agents_editing_one_notebook_the_second_gets_409_and_the_first_edit_stays(tenant, make_api, alice):
    first, second = make_api(tenant, agent="first"), make_api(tenant, agent="second")
    base = first.get("users/alice/notebook").json()["version"]
    assert second.get("users/alice/notebook").json()["version"] == base
    assert first.put("users/alice/notebook", {"content": "# Alice\n- first edit", "version": base}).status_code == 200
    out = assert_refused(
        second.put("users/alice/notebook", {"content": "# Alice\n- second edit", "version": base}),
        409,
        "version_conflict",
    )
    assert out["current_version"] == base + 1
    assert first.get("users/alice/notebook").json() | {"updated_at": None} == {
        "user_id": "alice",
        "content": "# Alice\n- first edit",
        "version": base + 1,
        "updated_at": None,
        "updated_by": "agent:first",
    }
    assert NotebookRevision.objects.filter(notebook__memory_user__external_id="alice").count() == base + 1


@pytest.mark.parametrize("stale", [None, 0, 2])
def test_a_stale_skill_version_is_409_with_the_current_version(tenant, api, alice, stale):
    before, state = counts(), alice_state(tenant)
    body = {"content": "helm upgrade --install"} | ({} if stale is None else {"version": stale})
    out = assert_refused(api.put("skills/ops/deploy.md", body), 409, "version_conflict")
    assert out["current_version"] == 1
    assert counts() == before
    assert alice_state(tenant) == state
    assert api.get("skills/ops/deploy.md").json()["content"] == "kubectl apply -f deploy.yaml"


# --- secrets --------------------------------------------------------------------------------------

SECRETS = {
    "openai": "sk-proj-" + "Qw3rTy7uIo9pAs1dFg5h",
    "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "slack": "xoxb-" + "123456789012-abcdefABCDEF",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    "card": "4111 1111 1111 1111",
    "private key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
}


def _squash(text: str) -> str:
    """Without whitespace (raw or JSON-escaped), so a card number or key block is found however spaced."""
    return re.sub(r"\s|\\n", "", text)


def assert_secret_nowhere(secret: str, response) -> None:
    compact = _squash(secret)
    assert compact not in _squash(response.content.decode()), "the refusal echoed the secret"
    for value in (
        *Fact.objects.values_list("content", "key", "metadata"),
        *PiiBlock.objects.values_list("redacted_preview", flat=True),
        *AuditEvent.objects.values_list("before", "after", "reason"),
        *Notebook.objects.values_list("content", flat=True),
        *NotebookRevision.objects.values_list("content", flat=True),
    ):
        assert compact not in _squash(json.dumps(value)), f"the secret was stored: {value!r}"


@pytest.mark.parametrize("kind", list(SECRETS))
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("post", FACT, {"content": "Alice's token is {secret}", "source": "user_stated"}, id="fact"),
        pytest.param(
            "post",
            FACT,
            {"content": "Alice's deploy bot", "source": "user_stated", "metadata": {"note": "token {secret}"}},
            id="fact metadata",
        ),
        pytest.param("post", "facts/{fact}/correct", {"content": "Alice's token is now {secret}"}, id="correction"),
        pytest.param(
            "put", "users/{user}/notebook", {"content": "# Alice\n- token {secret}", "version": 1}, id="notebook"
        ),
        pytest.param("put", "skills/ops/deploy.md", {"content": "export TOKEN={secret}", "version": 1}, id="skill"),
    ],
)
def test_a_secret_is_refused_with_a_block_id_and_never_echoed_or_stored(tenant, api, alice, method, path, body, kind):
    secret = SECRETS[kind]
    body = json.loads(json.dumps(body).replace("{secret}", secret.replace("\n", "\\n")))
    before, state = counts(), alice_state(tenant)
    response = getattr(api, method)(path.format(user="alice", fact=alice["fact"]), body)
    out = assert_refused(response, 422, "blocked")
    block = PiiBlock.objects.get(pk=out["block_id"])
    assert block.tenant_id == tenant.pk
    assert block.action == "blocked"
    assert out["kinds"] == block.kinds and block.kinds
    assert_secret_nowhere(secret, response)
    after = counts()
    # The refusal itself is recorded (a block and its audit event); nothing else is.
    assert after == before | {"PiiBlock": before["PiiBlock"] + 1, "AuditEvent": before["AuditEvent"] + 1}
    assert alice_state(tenant) == state


def test_a_secret_in_a_fact_key_is_refused(tenant, api, alice):
    secret = SECRETS["openai"]
    before = counts()
    response = api.post("users/alice/facts", {"content": "Alice's bot", "key": secret, "source": "user_stated"})
    assert_refused(response, 422, "blocked")
    assert_secret_nowhere(secret, response)
    assert counts()["Fact"] == before["Fact"]


# --- unknown user, unknown ids --------------------------------------------------------------------


@pytest.mark.parametrize("path", ["users/nobody/facts", "users/nobody/notebook"])
def test_unknown_user_on_read_is_404_and_creates_nothing(api, alice, path):
    before = counts()
    assert_refused(api.get(path), 404, "not_found")
    assert counts() == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("get", "facts/{id}", None),
        ("get", "facts/{id}/history", None),
        ("post", "facts/{id}/correct", {"content": "x"}),
        ("delete", "facts/{id}", None),
        ("post", "facts/{id}/pin", {"pinned": True}),
    ],
)
@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", "'; DROP TABLE x;--"])
def test_a_malformed_fact_id_is_422_invalid_naming_fact_id(api, alice, method, path, body, bad_id):
    before = counts()
    url = path.format(id=bad_id.replace("/", "%2F"))
    response = api.get(url) if method == "get" else getattr(api, method)(url, body)
    out = assert_refused(response, 422, "invalid")
    assert out["field"] == "fact_id"
    assert counts() == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("get", "facts/{id}", None), ("post", "facts/{id}/correct", {"content": "x"}), ("delete", "facts/{id}", None)],
)
def test_a_well_formed_unknown_fact_id_is_404(api, alice, method, path, body):
    url = path.format(id=uuid.uuid4())
    response = api.get(url) if method == "get" else getattr(api, method)(url, body)
    assert_refused(response, 404, "not_found")


@pytest.mark.parametrize("path", ["entities/{id}", "entities/{id}/graph"])
@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", "'; DROP TABLE x;--"])
def test_a_malformed_entity_id_is_422_invalid_naming_entity_id(api, alice, path, bad_id):
    before = counts()
    out = assert_refused(api.get(path.format(id=bad_id)), 422, "invalid")
    assert out["field"] == "entity_id"
    assert counts() == before


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("entities/{id}/graph", {"depth": "0"}, "depth"),
        ("entities/{id}/graph", {"depth": "4"}, "depth"),
        ("entities/{id}/graph", {"depth": "1.5"}, "depth"),
        ("entities/{id}/graph", {"as_of": "2025-01-01T00:00:00"}, "as_of"),
        ("entities/{id}/graph", {"as_of": "3000-01-01T00:00:00Z"}, "as_of"),
        ("entities/{id}/graph", {"as_of": "1700000000"}, "as_of"),
        ("entities", {"q": "x" * 201}, "q"),
        ("entities", {"q": "nul\x00byte"}, "q"),
        ("entities", {"limit": "0"}, "limit"),
        ("entities", {"user_id": "a/b"}, "user_id"),
    ],
)
def test_invalid_entity_parameters_are_422_with_the_field(api, alice, path, params, field):
    url = path.format(id=uuid.uuid4())  # checked before the entity is looked up
    out = assert_refused(api.get(url, **params), 422, "invalid")
    assert out["field"] == field


def test_an_unknown_skill_is_404(api, alice):
    assert_refused(api.get("skills/ops/nothing.md"), 404, "not_found")


# --- database down ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _gunicorn_without_database(args: list[str], port: int, **env: str):
    """gunicorn with `args` on 127.0.0.1:`port`, its DATABASE_URL pointing at a port where nothing listens;
    yields the API's base URL once the port answers, and stops gunicorn afterwards."""
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://memory:pw@127.0.0.1:{_free_port()}/memory_admin",
        "DJANGO_SETTINGS_MODULE": "memory_admin.settings",
        "DB_CONN_MAX_AGE": "0",
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"gunicorn exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("gunicorn did not start")
        yield f"http://127.0.0.1:{port}/api/v1/"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server_without_database():
    """The real app under gunicorn (its defaults), the database unreachable."""
    port = _free_port()
    args = ["memory_admin.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "1", "--timeout", "60"]
    yield from _gunicorn_without_database(args, port)


@pytest.fixture(scope="module")
def product_server_without_database():
    """gunicorn with the product's own configuration (`manage.py up`'s), the database unreachable."""
    port = _free_port()
    yield from _gunicorn_without_database(
        ["-c", "python:memory_admin.gunicorn_conf"], port, BIND=f"127.0.0.1:{port}", WEB_WORKERS="1"
    )


@pytest.mark.slow
@pytest.mark.parametrize("route,field", [("search", "q"), ("context", "task")])
def test_the_longest_query_the_api_accepts_reaches_it_through_the_web_server(
    product_server_without_database, route, field
):
    """A query of the largest allowed length whose every character needs escaping in a URL (~6 kB of
    request line) is answered by the API in JSON, not refused by gunicorn with an HTML 414."""
    from memory_admin.api.schemas.common import IDENTIFIER_MAX
    from memory_admin.api.schemas.retrieval import MAX_QUERY_CHARS

    params = urllib.parse.urlencode({field: "?" * MAX_QUERY_CHARS})
    url = f"{product_server_without_database}users/{'u' * IDENTIFIER_MAX}/{route}?{params}"
    assert len(url) > 6000
    status, raw = _request(url, headers={"Authorization": "Bearer mem_" + "k" * 43})
    assert status == 503, raw[:300]
    assert json.loads(raw)["code"] == "database_unavailable"


@pytest.mark.slow
@pytest.mark.parametrize("route,field", [("search", "q"), ("context", "task")])
def test_a_query_too_long_for_a_url_is_refused_in_json_by_the_web_server(product_server_without_database, route, field):
    """2,000 Cyrillic characters are a query the API accepts, but escaped in a URL they are ~12 kB of request
    line, over what gunicorn reads: the refusal is the API's JSON with a stable code and the limit, not
    gunicorn's HTML page."""
    from memory_admin.api.schemas.retrieval import MAX_QUERY_CHARS

    params = urllib.parse.urlencode({field: "ж" * MAX_QUERY_CHARS})
    url = f"{product_server_without_database}users/alice/{route}?{params}"
    assert len(url) > 12000
    status, raw = _request(url, headers={"Authorization": "Bearer mem_" + "k" * 43})
    assert status == 414, raw[:300]
    answer = json.loads(raw)
    assert answer["code"] == "request_line_too_long"
    assert answer["limit"] == 8190
    assert "Cyrillic" in answer["detail"] and "nothing was done" in answer["detail"]
    assert "POST the same parameters as a JSON body" in answer["detail"]


@pytest.mark.slow
def test_a_header_too_large_is_refused_in_json_by_the_web_server(product_server_without_database):
    status, raw = _request(
        f"{product_server_without_database}users/alice/search?q=tea",
        headers={"Authorization": "Bearer mem_" + "k" * 43, "X-Trace": "t" * 9000},
    )
    assert status == 431, raw[:300]
    answer = json.loads(raw)
    assert answer["code"] == "headers_too_large" and answer["limit"] == 8190
    # The server goes on answering.
    status, raw = _request(f"{product_server_without_database}users/alice/search?q=tea")
    assert status == 401 and json.loads(raw)["code"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "path", "body", "auth"),
    [
        pytest.param("GET", "health", None, False, id="health"),
        pytest.param("GET", "users/alice/facts", None, True, id="list facts"),
        pytest.param(
            "POST", "users/alice/facts", {"content": "Alice likes tea", "source": "user_stated"}, True, id="write fact"
        ),
        pytest.param("PUT", "users/alice/notebook", {"content": "# Alice", "version": 0}, True, id="save notebook"),
        pytest.param("GET", f"facts/{uuid.uuid4()}", None, True, id="get fact"),
    ],
)
def test_database_down_answers_503_database_unavailable(server_without_database, method, path, body, auth):
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Bearer mem_" + "k" * 43
    status, raw = _request(
        server_without_database + path, method, json.dumps(body).encode() if body is not None else None, headers
    )
    assert status == 503, raw[:500]
    out = json.loads(raw)
    assert out["code"] == "database_unavailable"
    assert out["detail"]


def test_contact_pii_in_metadata_follows_the_redact_policy(tenant, api, admin_api, alice):
    assert admin_api.patch("settings", {"pii_policy": {"email": "redact"}}).status_code == 200
    response = api.post(
        "users/alice/facts",
        {
            "content": "Alice's manager is Bob",
            "source": "user_stated",
            "metadata": {"ticket": 7, "cc": ["bob@example.com"]},
        },
    )
    assert response.status_code == 201, response.content
    assert response.json()["fact"]["metadata"] == {"ticket": 7, "cc": ["[REDACTED:email]"]}
    assert "bob@example.com" not in json.dumps(list(Fact.objects.values_list("metadata", flat=True)))
