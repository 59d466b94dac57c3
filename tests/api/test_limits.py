"""Every page size and count a request names is refused when out of range, with the same 422 `invalid`
naming the parameter as any other bad input, never clamped silently; the limits are the schemas' (and
the OpenAPI document states them)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

# (route, parameter, the largest value allowed, other parameters the route needs)
LIMITS = [
    ("users/alice/facts", "limit", 200, {}),
    ("users/alice/episodes", "limit", 200, {}),
    ("users", "limit", 500, {}),
    ("batches", "limit", 200, {}),
    ("users/alice/search", "k", 100, {"q": "tea"}),
    ("users/alice/context", "budget_tokens", 32000, {"task": "tea"}),
]


@pytest.fixture
def alice(api):
    r = api.post("users/alice/facts", {"content": "Alice drinks green tea every morning", "source": "user_stated"})
    assert r.status_code in (200, 201), r.content


@pytest.mark.parametrize(("path", "name", "largest", "params"), LIMITS)
def test_an_out_of_range_count_is_a_422_naming_it(api, alice, path, name, largest, params):
    for value in (0, -1, largest + 1):
        r = api.get(path, **params, **{name: value})
        assert r.status_code == 422, (path, value, r.content)
        body = r.json()
        assert body["code"] == "invalid" and body["field"] == name, body
    assert api.get(path, **params, **{name: largest}).status_code == 200
    assert api.get(path, **params, **{name: 1}).status_code == 200


def test_a_page_holds_at_most_what_was_asked(api, alice):
    api.post("users/alice/facts", {"content": "Alice cycles to the office on Mondays", "source": "user_stated"})
    assert len(api.get("users/alice/facts", limit=1).json()["items"]) == 1
    assert len(api.get("users/alice/search", q="Alice", k=1).json()["hits"]) == 1


def test_the_openapi_document_states_the_limits(api):
    from memory_admin.api import api as agent_api

    schema = agent_api.get_openapi_schema()
    for path, name, largest, _ in LIMITS:
        operation = schema["paths"][f"/api/v1/{path.replace('alice', '{user_id}')}"]["get"]
        (parameter,) = [p for p in operation["parameters"] if p["name"] == name]
        assert (parameter["schema"]["minimum"], parameter["schema"]["maximum"]) == (1, largest), path
