"""Hostile input (SPEC §11, issue 8 items 1-3), through the real HTTP API on the real Postgres.

Each value here answered 500 (or was stored and broke later reads) before: implausible or naive
times, NUL bytes, lone surrogates, control characters, NaN, oversized identifiers and cursors, a
settings change that zeroes every search weight, unknown routes and methods, deeply nested JSON.
Every one now gets a 4xx JSON answer with a stable code, names the field, and writes nothing.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from memory_admin.models import Fact, MemoryUser, Message, TenantSettings, Thread
from tests.api import test_bad_input
from tests.api.test_bad_input import alice_state, assert_refused, counts

alice = test_bad_input.alice  # the fixture: alice with a fact, a notebook and a tenant skill

# --- 1. timestamps -----------------------------------------------------------------------------------

BAD_TIMES = [
    pytest.param("1500-01-01T00:00:00Z", id="year 1500"),
    pytest.param("0001-01-01T00:00:00", id="year 1, no zone"),
    pytest.param("2024-05-01T09:30:00", id="no zone"),
    pytest.param("1899-12-31T23:59:59Z", id="just before 1900"),
    pytest.param("2200-01-01T00:00:00Z", id="the horizon"),
    pytest.param("9999-12-31T23:59:59+00:00", id="year 9999"),
    pytest.param("1700000000", id="seconds since 1970, not ISO 8601"),
    pytest.param("0.5", id="a number in a string"),
    pytest.param(1700000000, id="a JSON number"),
]


@pytest.mark.parametrize("when", BAD_TIMES)
def test_an_implausible_or_naive_observed_at_is_422_and_nothing_is_written(tenant, api, alice, when):
    before, state = counts(), alice_state(tenant)
    out = assert_refused(
        api.post("users/alice/facts", {"content": "Alice likes tea", "observed_at": when}), 422, "invalid"
    )
    assert out["field"] == "observed_at"
    assert counts() == before and alice_state(tenant) == state
    batch = api.post(
        "users/alice/facts/batch",
        {"facts": [{"content": "Alice likes tea"}, {"content": "Alice likes jam", "observed_at": when}]},
    )
    assert assert_refused(batch, 422, "invalid")["field"] == "facts.1.observed_at"
    assert counts() == before


@pytest.mark.parametrize("when", BAD_TIMES)
def test_an_implausible_or_naive_message_time_is_422_and_nothing_is_written(api, alice, when):
    before = (Message.objects.count(), Thread.objects.count())
    body = {
        "thread_id": "t1",
        "messages": [
            {"role": "user", "content": "hello there, I moved to Paris"},
            {"role": "user", "content": "and I like tea", "created_at": when},
        ],
    }
    out = assert_refused(api.post("users/alice/messages", body), 422, "invalid")
    assert out["field"] == "messages.1.created_at"
    assert (Message.objects.count(), Thread.objects.count()) == before


@pytest.mark.parametrize("name", ["since", "until"])
@pytest.mark.parametrize("when", BAD_TIMES)
def test_an_implausible_or_naive_episode_range_is_422(api, alice, name, when):
    out = assert_refused(api.get("users/alice/episodes", **{name: when}), 422, "invalid")
    assert out["field"] == name


@pytest.mark.parametrize("when", ["1900-01-01T00:00:00Z", "2024-05-01T09:30:00+02:00", "2199-12-31T23:59:59Z"])
def test_plausible_aware_times_are_accepted(api, alice, when):
    response = api.post(
        "users/alice/facts",
        {"content": f"Alice noted something at {when}", "observed_at": when, "source": "user_stated"},
    )
    assert response.status_code == 201, response.content
    stored = Fact.objects.get(pk=response.json()["fact"]["id"]).valid_from
    assert stored == datetime.fromisoformat(when.replace("Z", "+00:00"))
    assert api.get("users/alice/episodes", since=when).status_code == 200


def test_a_row_dated_1500_in_the_database_breaks_no_read(tenant, api, alice):
    """Rows written before validation existed (or straight into the table) must not make a read fail:
    the scoring forms are total, in SQL (exp() underflow raised in Postgres) and in Python."""
    ancient = datetime(1500, 1, 1, tzinfo=UTC)
    far = datetime(2199, 6, 1, tzinfo=UTC)
    made = [
        api.post("users/alice/facts", {"content": text, "source": "user_stated"}).json()["fact"]["id"]
        for text in ("Alice keeps bees in Lyon", "Alice keeps goats in Lyon", "Alice keeps hens in Lyon")
    ]
    Fact.objects.filter(pk=made[0]).update(valid_from=ancient, created_at=ancient, last_accessed_at=ancient)
    Fact.objects.filter(pk=made[1]).update(valid_from=far, created_at=far, last_accessed_at=far, access_count=2**31 - 1)
    Fact.objects.filter(pk=made[2]).update(confidence=1e-300, kind="inference", created_at=ancient)

    search = api.get("users/alice/search", q="Alice keeps animals in Lyon", k=10)
    assert search.status_code == 200, search.content[:500]
    hits = {h["fact"]["id"]: h for h in search.json()["hits"]}
    assert set(made) <= set(hits)
    assert hits[made[0]]["fact"]["effective_confidence"] == 0  # fully decayed, not an error
    assert all(0 <= h["score"]["final"] <= 10 for h in hits.values())

    context = api.get("users/alice/context", task="what animals does Alice keep", budget_tokens=2000)
    assert context.status_code == 200, context.content[:500]
    assert "Alice keeps goats in Lyon" in context.json()["text"]

    for fact_id in made:
        fact = api.get(f"facts/{fact_id}")
        assert fact.status_code == 200, fact.content[:300]
        assert 0 <= fact.json()["effective_confidence"] <= 1
        assert 0 <= fact.json()["staleness"] <= 1
    listed = api.get("users/alice/facts", limit=200)
    assert listed.status_code == 200 and set(made) <= {f["id"] for f in listed.json()["items"]}


# --- 2. strings: NUL, lone surrogates, control characters, NaN -------------------------------------

NUL, SURROGATE, BELL = "\\u0000", "\\ud800", "\\u0007"  # JSON escapes, sent verbatim

STRING_FIELDS = [
    # (method, path, raw JSON body with {bad} where the hostile character goes, field)
    ("post", "users/alice/facts", '{{"content": "Alice likes{bad} tea"}}', "content"),
    ("post", "users/alice/facts", '{{"content": "Alice likes tea", "key": "pref{bad}"}}', "key"),
    ("post", "users/alice/facts", '{{"content": "Alice likes tea", "task_id": "t{bad}"}}', "task_id"),
    ("post", "users/alice/facts", '{{"content": "Alice likes tea", "metadata": {{"a{bad}": 1}}}}', "metadata"),
    ("post", "users/alice/facts", '{{"content": "Alice likes tea", "metadata": {{"a": ["x{bad}"]}}}}', "metadata"),
    ("post", "users/alice/facts/batch", '{{"facts": [{{"content": "Alice likes{bad} tea"}}]}}', "facts.0.content"),
    ("post", "facts/{fact}/correct", '{{"content": "Alice likes{bad} coffee"}}', "content"),
    ("post", "facts/{fact}/correct", '{{"content": "Alice likes coffee", "reason": "r{bad}"}}', "reason"),
    ("delete", "facts/{fact}", '{{"reason": "gone{bad}"}}', "reason"),
    ("put", "users/alice/notebook", '{{"content": "# Alice{bad}", "version": 1}}', "content"),
    ("put", "users/alice/notebook", '{{"content": "# Alice", "version": 1, "note": "n{bad}"}}', "note"),
    ("put", "skills/ops/deploy.md", '{{"content": "helm{bad}", "version": 1}}', "content"),
    ("put", "skills/ops/new.md", '{{"content": "helm", "user_id": "alice{bad}"}}', "user_id"),
    (
        "post",
        "users/alice/messages",
        '{{"thread_id": "t1", "messages": [{{"role": "user", "content": "hi{bad}"}}]}}',
        "messages.0.content",
    ),
    (
        "post",
        "users/alice/messages",
        '{{"thread_id": "t{bad}", "messages": [{{"role": "user", "content": "hi"}}]}}',
        "thread_id",
    ),
]


@pytest.mark.parametrize("bad", [NUL, SURROGATE, BELL], ids=["NUL", "lone surrogate", "control character"])
@pytest.mark.parametrize(
    ("method", "path", "body", "field"), STRING_FIELDS, ids=[f"{m} {p} {f}" for m, p, _, f in STRING_FIELDS]
)
def test_unreadable_text_in_any_body_field_is_422_and_nothing_is_written(
    tenant, api, alice, method, path, body, field, bad
):
    before, state = counts(), alice_state(tenant)
    messages = Message.objects.count()
    response = getattr(api, method)(path.format(fact=alice["fact"]), body.format(bad=bad))
    out = assert_refused(response, 422, "invalid")
    assert out["field"] == field, out
    assert counts() == before and alice_state(tenant) == state and Message.objects.count() == messages


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("users/alice/search", {"q": "tea\x00"}, "q"),
        ("users/alice/search", {"q": "tea", "include": "notebook\x00"}, "include"),
        ("users/alice/context", {"task": "plan\x00"}, "task"),
        ("users/alice/context", {"task": "plan\x1b[2J"}, "task"),
        ("users/alice/facts", {"text": "tea\x00"}, "text"),
        ("users/alice/facts", {"key": "pref\x00"}, "key"),
        ("users/alice/episodes", {"thread_id": "t\x00"}, "thread_id"),
        ("skills", {"prefix": "ops\x00"}, "prefix"),
        ("skills", {"user_id": "alice\x00"}, "user_id"),
        ("users/al\x00ice/facts", {}, "user_id"),
        ("users/al\x00ice/notebook", {}, "user_id"),
    ],
)
def test_unreadable_text_in_a_query_or_path_is_422(api, alice, path, params, field):
    out = assert_refused(api.get(path, **params), 422, "invalid")
    assert out["field"] == field, out


@pytest.mark.parametrize("path", ["users/alice/search", "users/alice/facts", "users/alice/context", "skills"])
def test_more_query_parameters_than_django_reads_is_422_json(api, alice, path, settings):
    """Django refuses the query string itself (TooManyFieldsSent) before the route runs: the agent still
    gets the API's JSON error, not an HTML page."""
    query = "q=tea&" + "&".join(f"x{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    r = api.client.get(f"/api/v1/{path}?{query}", HTTP_AUTHORIZATION=f"Bearer {api.key}")
    out = assert_refused(r, 422, "invalid")
    assert out["field"] == "query" and r["Content-Type"].startswith("application/json")


def test_a_host_the_server_does_not_serve_is_400_json_under_the_api_and_a_page_elsewhere(api, alice, settings):
    settings.ALLOWED_HOSTS = ["memory.example"]
    r = api.client.get("/api/v1/users/alice/search", {"q": "tea"}, HTTP_HOST="evil.example", **api._headers())
    assert assert_refused(r, 400, "bad_request")["detail"]
    r = api.client.get("/accounts/login/", HTTP_HOST="evil.example")
    assert r.status_code == 400 and r["Content-Type"].startswith("text/html")
    r = api.client.get("/api/v1/users/alice/facts", HTTP_HOST="memory.example", **api._headers())
    assert r.status_code == 200


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("users/alice/facts", '{{"content": "Alice likes tea", "metadata": {{"score": {n}}}}}', "metadata"),
        ("users/alice/facts", '{{"content": "Alice likes tea", "metadata": {{"a": {{"b": [{n}]}}}}}}', "metadata"),
        ("users/alice/facts", '{{"content": "Alice likes tea", "confidence": {n}}}', "confidence"),
        ("users/alice/facts", '{{"content": "Alice likes tea", "importance": {n}}}', "importance"),
        ("users/alice/facts", '{{"content": "Alice likes tea", "ttl_days": {n}}}', "ttl_days"),
    ],
)
def test_nan_and_infinity_are_422(tenant, api, alice, path, body, field, number):
    before, state = counts(), alice_state(tenant)
    out = assert_refused(api.post(path, body.format(n=number)), 422, "invalid")
    assert out["field"] == field, out
    assert counts() == before and alice_state(tenant) == state


def test_nan_in_settings_is_422(tenant, admin_api, alice):
    before = TenantSettings.objects.filter(tenant=tenant).values().get()
    out = assert_refused(admin_api.patch("settings", '{"search_weights": {"vector": NaN}}'), 422, "invalid")
    assert out["field"] == "search_weights.vector"
    assert TenantSettings.objects.filter(tenant=tenant).values().get() == before


# --- 2. identifiers, cursors, settings -------------------------------------------------------------


@pytest.mark.parametrize(
    ("user_id", "ok"),
    [
        ("a" * 200, True),
        ("a" * 201, False),
        ("alice@acme", True),
        ("auth0|1234", True),
        ("al ice", False),
        ("alice<script>", False),
        ("-alice", False),
        ("ålice", False),
    ],
)
def test_user_ids_have_a_length_limit_and_a_safe_character_set(api, user_id, ok):
    # (`@` is in the character set; a whole e-mail address as an id is contact PII, which the default
    # policy blocks: tests/security covers that.)
    response = api.post(f"users/{user_id}/facts", {"content": "This user likes tea", "source": "user_stated"})
    if ok:
        assert response.status_code == 201, response.content
        assert MemoryUser.objects.filter(external_id=user_id).exists()
    else:
        assert assert_refused(response, 422, "invalid")["field"] == "user_id"
        assert not MemoryUser.objects.exists()
        assert assert_refused(api.get(f"users/{user_id}/facts"), 422, "invalid")["field"] == "user_id"


def test_a_thread_id_with_a_slash_is_refused_so_every_thread_can_be_closed(api, alice):
    """A thread id is one URL path segment: ids with `/` were accepted and could never be closed."""
    refused = api.post(
        "users/alice/messages",
        {"thread_id": "support/42", "messages": [{"role": "user", "content": "I moved to Paris"}]},
    )
    assert assert_refused(refused, 422, "invalid")["field"] == "thread_id"
    assert not Thread.objects.exists()
    for thread_id in ("support:42", "ticket-7.b", "x" * 200):
        posted = api.post(
            "users/alice/messages",
            {"thread_id": thread_id, "messages": [{"role": "user", "content": "I moved to Paris"}]},
        )
        assert posted.status_code == 202, posted.content
        closed = api.post(f"users/alice/threads/{thread_id}/close", {"outcome": "success"})
        assert closed.status_code == 202, closed.content
        assert closed.json()["thread_id"] == thread_id
    out = assert_refused(api.post(f"users/alice/threads/{'x' * 201}/close", {}), 422, "invalid")
    assert out["field"] == "thread_id"


@pytest.mark.parametrize("task_id", ["t" * 201, "a/b", "two words"])
def test_task_ids_are_identifiers(api, alice, task_id):
    out = assert_refused(
        api.post("users/alice/facts", {"content": "Alice likes tea", "task_id": task_id}), 422, "invalid"
    )
    assert out["field"] == "task_id"


@pytest.mark.parametrize(
    ("path", "cursor"),
    [
        ("users/alice/facts", "A" * 201),
        ("users/alice/facts", "not a cursor!"),
        ("users/alice/facts", "%%%"),
        ("users/alice/facts", "QUJD"),  # valid base64 but not a cursor this API returned
        ("users/alice/episodes", "9" * 40),
        ("users/alice/episodes", "-1"),
        ("users/alice/episodes", "abc"),
        ("users/alice/episodes", "²"),
    ],
)
def test_oversized_or_malformed_cursors_are_422(api, alice, path, cursor):
    assert assert_refused(api.get(path, cursor=cursor), 422, "invalid")["field"] == "cursor"


def test_a_returned_cursor_still_pages(api, alice):
    for i in range(3):
        api.post("users/alice/facts", {"content": f"Alice owns {i + 2} bicycles in total now", "source": "user_stated"})
    first = api.get("users/alice/facts", limit=2).json()
    second = api.get("users/alice/facts", limit=2, cursor=first["next_cursor"])
    assert second.status_code == 200
    assert not {f["id"] for f in first["items"]} & {f["id"] for f in second.json()["items"]}


def test_setting_every_search_weight_to_zero_is_422(tenant, admin_api, alice):
    before = TenantSettings.objects.filter(tenant=tenant).values().get()
    zero = {"vector": 0, "keyword": 0, "recency": 0, "importance": 0}
    out = assert_refused(admin_api.patch("settings", {"search_weights": zero}), 422, "invalid")
    assert out["field"] == "search_weights"
    # Zeroing the last non-zero weight after the others is refused the same way.
    assert admin_api.patch("settings", {"search_weights": zero | {"importance": 0.5}}).status_code == 200
    out = assert_refused(admin_api.patch("settings", {"search_weights": {"importance": 0}}), 422, "invalid")
    assert out["field"] == "search_weights"
    after = TenantSettings.objects.filter(tenant=tenant).values().get()
    assert after["search_weights"] == zero | {"importance": 0.5}
    assert {k: v for k, v in after.items() if k not in ("search_weights", "updated_at")} == {
        k: v for k, v in before.items() if k not in ("search_weights", "updated_at")
    }
    assert admin_api.get("users/alice/search", q="vim").status_code == 200


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("users/alice/facts", {"stauts": "stale"}),
        ("users/alice/search", {"q": "vim", "top_k": "3"}),
        ("batches", {"": "null"}),
        ("health", {"verbose": "1"}),
    ],
)
def test_an_undocumented_query_parameter_is_422_not_ignored(api, alice, path, params):
    out = assert_refused(api.get(path, **params), 422, "invalid")
    assert out["field"] == ([name for name in params if name != "q"][0] or "query")
    assert api.get(path, **{k: v for k, v in params.items() if k in ("q",)}).status_code == 200


@pytest.mark.parametrize("batch_id", ["0", "9" * 30])
def test_out_of_range_batch_ids_are_422(api, batch_id):
    assert assert_refused(api.post(f"batches/{batch_id}/retry"), 422, "invalid")["field"] == "batch_id"


# --- 2. routes, methods, nesting ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nope",
        "/api/v1/users/alice/nope",
        "/api/v1/facts/x/y/z",
        "/api/v1/health/",
        "/api/v1/users/alice/facts/",
        "/api/v1/skills/a%0Ab",
    ],
)
@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_unknown_api_routes_answer_json_404(api, path, method):
    response = getattr(api.client, method)(path, HTTP_AUTHORIZATION=f"Bearer {api.key}")
    assert_refused(response, 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("put", "health"),
        ("delete", "settings"),
        ("patch", "facts/{fact}"),
        ("get", "users/alice/messages"),
        ("delete", "users/alice/context"),
    ],
)
def test_a_wrong_method_answers_json_405_with_the_allowed_ones(api, alice, method, path):
    path = path.format(fact=alice["fact"])
    response = api.get(path) if method == "get" else getattr(api, method)(path, {})
    out = assert_refused(response, 405, "method_not_allowed")
    assert response["Allow"] and set(out["allowed"]) == {m.strip() for m in response["Allow"].split(",")}


@pytest.mark.parametrize("depth", [100, 5000, 100_000])
def test_deeply_nested_json_is_422(tenant, api, alice, depth):
    before = counts()
    body = '{"content": "Alice likes tea", "metadata": {"a": ' + "[" * depth + "]" * depth + "}}"
    response = api.post("users/alice/facts", body)
    assert response.status_code in (413, 422), response.content[:300]
    assert_refused(response, response.status_code, "invalid" if response.status_code == 422 else "content_too_large")
    assert counts() == before


# --- 3. OpenAPI ----------------------------------------------------------------------------------------


def _operations(api):
    schema = api.get("/api/v1/openapi.json").json()
    return schema, [(path, method, op) for path, methods in schema["paths"].items() for method, op in methods.items()]


def test_every_operation_documents_its_error_answers(api):
    schema, operations = _operations(api)
    assert "ErrorOut" in schema["components"]["schemas"]
    for path, method, op in operations:
        codes = set(op["responses"])
        assert {"422", "503"} <= codes, (method, path)
        if op.get("security"):
            assert {"401", "403", "404", "429"} <= codes, (method, path)
        if "requestBody" in op:
            assert "413" in codes, (method, path)
        if method in ("put", "patch") or path.endswith(("/correct", "/retry", "/promote")):
            assert "409" in codes, (method, path)
        for code in codes - {"200", "201", "202"}:
            ref = op["responses"][code]["content"]["application/json"]["schema"]["$ref"]
            assert ref == "#/components/schemas/ErrorOut"


def test_operation_ids_are_the_handler_names(api):
    from memory_admin.api import (
        checkpoints,
        entities,
        entity_curation,
        facts,
        knowledge,
        memory,
        messages,
        retrieval,
        store,
        system,
    )

    _, operations = _operations(api)
    ids = [op["operationId"] for _, _, op in operations]
    assert len(ids) == len(set(ids))
    modules = (facts, memory, messages, retrieval, system, entities, entity_curation, store, checkpoints, knowledge)
    assert all(any(callable(getattr(m, name, None)) for m in modules) for name in ids), ids
    assert {"write_fact", "search", "context", "put_notebook", "close_thread", "patch_settings"} <= set(ids)


def test_error_answers_match_the_documented_schema(api, alice):
    """A sample of real refusals carries what ErrorOut promises (code and detail strings)."""
    for response in (
        api.get("users/nobody/facts"),
        api.post("users/alice/facts", {"content": 1}),
        api.get(f"facts/{uuid.uuid4()}"),
        api.get("/api/v1/nope"),
    ):
        body = json.loads(response.content)
        assert isinstance(body["code"], str) and isinstance(body["detail"], str)
