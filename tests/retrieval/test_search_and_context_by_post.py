"""Search and the context block by POST: the query's parameters in a JSON body, for a query too long for a
URL (a 2,000-character `q` in a non-Latin script is 12-18 kB escaped, over what gunicorn reads of a request
line). The same answer as GET, the same refusals, the same keys; through the HTTP API on the real Postgres."""

from __future__ import annotations

import re

import pytest

from memory_admin.api.schemas.retrieval import MAX_QUERY_CHARS
from memory_admin.models import Fact
from memory_admin.services.keys import api_key_create
from tests.conftest import Api

pytestmark = pytest.mark.django_db


def write(api, user, content):
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    return r.json()["fact"]["id"]


@pytest.fixture
def alice(api):
    cat = write(api, "alice", "Alice's cat is called Miso and sleeps on the piano")
    editor = write(api, "alice", "Alice prefers vim as her editor for Go code")
    old_city = write(api, "alice", "Alice lives in Berlin")
    r = api.post(f"facts/{old_city}/correct", {"content": "Alice lives in Lisbon since March"})
    assert r.status_code in (200, 201), r.content
    return {"cat": cat, "editor": editor, "old_city": old_city, "city": r.json()["id"]}


def _answer(response) -> dict:
    assert response.status_code == 200, response.content
    body = response.json()
    body.pop("timings")
    return body


def test_post_search_answers_what_get_answers(api, alice):
    got = _answer(api.get("users/alice/search", q="where does she live?", k=3, include="superseded", kinds="fact"))
    for kinds in (["fact"], "fact"):
        body = {"q": "where does she live?", "k": 3, "include": ["superseded"], "kinds": kinds}
        posted = _answer(api.post("users/alice/search", body))
        assert [h["fact"]["id"] for h in posted["hits"]] == [h["fact"]["id"] for h in got["hits"]]
        assert posted["hits"][0]["fact"]["id"] == alice["city"]
        assert alice["old_city"] in [h["fact"]["id"] for h in posted["hits"]]  # include reached the search
        for name in ("user_id", "query", "k", "include", "kinds", "weights", "candidates"):
            assert posted[name] == got[name], name
        for mine, theirs in zip(posted["hits"], got["hits"], strict=True):
            assert mine["score"]["relevance"] == pytest.approx(theirs["score"]["relevance"], abs=1e-3)


def test_post_search_keeps_the_time_filter(api, alice):
    r = api.post("users/alice/search", {"q": "cat", "between": "2001-01-01/2001-12-31"})
    assert _answer(r)["hits"] == []
    r = api.post("users/alice/search", {"q": "cat", "as_of": "2001-06-01T00:00:00Z"})
    assert _answer(r)["hits"] == []
    assert _answer(api.post("users/alice/search", {"q": "cat"}))["hits"][0]["fact"]["id"] == alice["cat"]


def test_a_2000_character_query_in_chinese_is_searched_whole(api):
    cat = write(api, "mei", "我的猫叫小米，它喜欢睡在钢琴上。")
    write(api, "mei", "我每天早上七点去公司上班。")
    question = "我的猫叫什么名字？它喜欢睡在哪里？"
    q = (question * (MAX_QUERY_CHARS // len(question) + 1))[:MAX_QUERY_CHARS]
    body = _answer(api.post("users/mei/search", {"q": q}))
    assert body["query"] == q and len(body["query"]) == MAX_QUERY_CHARS
    assert body["hits"][0]["fact"]["id"] == cat
    over = api.post("users/mei/search", {"q": q + "猫"})
    assert over.status_code == 422 and over.json()["field"] == "q"


def test_post_context_is_the_block_get_gives(api, alice):
    task = "pick a name for the cat's new bed"
    got = _answer(api.get("users/alice/context", task=task, budget_tokens=300))
    posted = _answer(api.post("users/alice/context", {"task": task, "budget_tokens": 300}))
    nonce = re.compile(r"MEMORY_DATA [0-9a-f]+")  # each block fences its data with a nonce of its own
    assert nonce.sub("", posted["text"]) == nonce.sub("", got["text"])
    assert posted["tokens"] <= 300 and abs(posted["tokens"] - got["tokens"]) <= 4  # the nonces' tokens differ
    assert "Miso" in posted["text"]
    assert [s["included"] for s in posted["sections"]] == [s["included"] for s in got["sections"]]
    default = _answer(api.post("users/alice/context", {}))
    assert default["budget_tokens"] == 2000 and default["task"] == ""


def test_a_2000_character_task_in_cyrillic_gets_its_block(api):
    write(api, "ivan", "Иван любит зелёный чай без сахара")
    task = ("Что Иван любит пить утром? " * 100)[:MAX_QUERY_CHARS]
    block = _answer(api.post("users/ivan/context", {"task": task, "budget_tokens": 500}))
    assert block["task"] == task and "зелёный чай" in block["text"] and block["tokens"] <= 500


def test_a_read_only_key_may_search_and_fetch_a_block_by_post_but_not_write(tenant, alice):
    _, raw = api_key_create(tenant_id=tenant.pk, agent_name="reader", read_only=True)
    reader = Api(raw)
    assert _answer(reader.post("users/alice/search", {"q": "cat"}))["hits"][0]["fact"]["id"] == alice["cat"]
    assert "Miso" in _answer(reader.post("users/alice/context", {"task": "the cat"}))["text"]
    refused = reader.post("users/alice/facts", {"content": "Alice has a dog", "source": "user_stated"})
    assert refused.status_code == 403 and refused.json()["code"] == "read_only_key"


@pytest.mark.parametrize("route", ["search", "context"])
def test_a_key_for_other_users_gets_by_post_what_it_gets_by_get(tenant, make_api, alice, route):
    bobs = make_api(tenant, users=["bob"])
    field = "q" if route == "search" else "task"
    got, posted = bobs.get(f"users/alice/{route}", **{field: "cat"}), bobs.post(f"users/alice/{route}", {field: "cat"})
    assert posted.status_code == got.status_code >= 400
    assert posted.json()["code"] == got.json()["code"]
    assert "Miso" not in posted.content.decode()


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("search", {}, "q"),
        ("search", {"q": "   "}, "q"),
        ("search", {"q": 5}, "q"),
        ("search", {"q": "tea\x00"}, "q"),
        ("search", {"q": "cat", "k": 0}, "k"),
        ("search", {"q": "cat", "k": 101}, "k"),
        ("search", {"q": "cat", "kinds": ["fact", "notes"]}, "kinds"),
        ("search", {"q": "cat", "kinds": []}, "kinds"),
        ("search", {"q": "cat", "kinds": "fact,notes"}, "kinds"),
        ("search", {"q": "cat", "include": ["deleted"]}, "include"),
        ("search", {"q": "cat", "include": "notebook\x00"}, "include"),
        ("search", {"q": "cat", "between": "2023-05-31/2023-05-01"}, "between"),
        ("search", {"q": "cat", "as_of": "yesterday"}, "as_of"),
        ("search", {"q": "cat", "colour": "red"}, "colour"),
        ("context", {"task": "x" * (MAX_QUERY_CHARS + 1)}, "task"),
        ("context", {"task": "plan\x1b[2J"}, "task"),
        ("context", {"task": "plan", "budget_tokens": -5}, "budget_tokens"),
        ("context", {"task": "plan", "budget_tokens": 10**9}, "budget_tokens"),
        ("context", {"task": "plan", "budget": 500}, "budget"),
    ],
)
def test_a_bad_body_is_refused_naming_its_field_and_changes_nothing(api, alice, route, body, field):
    before = list(Fact.objects.order_by("pk").values_list("pk", "status", "access_count"))
    r = api.post(f"users/alice/{route}", body)
    assert r.status_code == 422, r.content
    assert r.json()["code"] == "invalid" and r.json()["field"] == field, r.json()
    assert list(Fact.objects.order_by("pk").values_list("pk", "status", "access_count")) == before


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", '"cat"', '{"q": "cat"'])
def test_a_body_that_is_not_a_json_object_is_refused_in_json(api, alice, raw):
    r = api.post("users/alice/search", raw)
    assert r.status_code in (400, 422) and r["Content-Type"].startswith("application/json"), r.content
    assert r.json()["code"] in ("invalid", "bad_request")
