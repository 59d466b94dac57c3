"""A search's query (a context block's task) is embedded from the moment its request arrives
(selectors/search.py: VectorsAhead, started by the WSGI entry, or else by middleware.SearchAheadMiddleware,
through api.start_ahead):
Django dispatches the request and the key statement waits for Postgres while onnxruntime runs the model on
a helper thread. Only a key that authenticated in this process before, within its rate limit, and only a
query the handler accepts, get one: a request without a valid key never costs an embedding."""

from __future__ import annotations

import functools
import os
import threading
import time

import pytest

from memory_admin.api.schemas import MAX_QUERY_CHARS
from memory_admin.embedding import ahead as embeddings
from memory_admin.embedding.ahead import _search_helpers, search_ahead_executor, search_ahead_submit
from memory_admin.models import ApiKey
from memory_admin.selectors import search as search_module
from memory_admin.selectors.search import VectorsAhead, search_vectors
from memory_admin.services.keys import api_key_revoke
from tests.wsgi_call import wsgi_get

pytestmark = pytest.mark.django_db

FACTS = (
    "Priya adopted a rescue greyhound called Biscuit last spring.",
    "Priya is allergic to shellfish.",
    "The team retro moved to Thursday afternoons.",
)
QUESTION = "What is the name of Priya's dog?"


def search(api, q, **params):
    r = api.get("users/priya/search", q=q, k=10, **params)
    return r, getattr(r.wsgi_request, "vectors_ahead", None)


def ranked(r):
    assert r.status_code == 200, r.content
    return [(h["fact"]["content"], h["score"]) for h in r.json()["hits"]]


def test_a_known_keys_search_is_embedded_ahead_and_ranks_as_without(tenant, make_api):
    api, fresh = make_api(tenant), make_api(tenant, agent="fresh")
    for content in FACTS:
        assert api.post("users/priya/facts", {"content": content, "source": "user_stated"}).status_code in (200, 201)
    # The key wrote before: its search's vectors were embedded while the key statement ran, and used.
    r, ahead = search(api, QUESTION)
    assert ahead is not None and ahead.text == QUESTION
    assert "embed_ahead_ms" in r.json()["timings"] and "embed_ahead_ms" in r["Server-Timing"]
    # A key's first request embeds in the handler, as before: the same hits, scores and order.
    r2, ahead2 = search(fresh, QUESTION)
    assert ahead2 is None and "embed_ahead_ms" not in r2.json()["timings"]
    assert ranked(r) == ranked(r2)
    assert ranked(r)[0][0] == FACTS[0]
    # Surrounding blanks are stripped before embedding, as the search strips them.
    r3, ahead3 = search(api, f"  {QUESTION}\n")
    assert ahead3.text == QUESTION and ranked(r3) == ranked(r)


def test_no_embedding_ahead_for_a_request_without_a_valid_key(tenant, make_api):
    api = make_api(tenant)
    assert api.get("users/priya/facts").status_code == 404  # authenticated once: known to this process
    assert search(api, QUESTION)[1] is not None
    for raw in ("mem_" + "x" * 43, "", "not-a-key", api.key + "x"):
        r, ahead = search(type(api)(raw), QUESTION)
        assert r.status_code == 401 and ahead is None
    # Revoked: the first request after it is refused (and forgets the key), none after it embeds.
    api_key_revoke(key=ApiKey.objects.get(prefix=api.key[:12]))
    r, _ = search(api, QUESTION)
    assert r.status_code == 401
    r, ahead = search(api, QUESTION)
    assert r.status_code == 401 and ahead is None


def test_no_embedding_ahead_for_a_key_over_its_rate_limit(settings, tenant, make_api):
    settings.API_RATE_LIMIT, settings.API_RATE_WINDOW_SECONDS = 3, 3600
    api = make_api(tenant)
    assert api.get("users/priya/facts").status_code == 404
    assert search(api, QUESTION)[1] is not None
    assert search(api, QUESTION)[0].status_code == 404  # the third request: still within the limit
    # The first refused request was known from the one before it; it forgets the key, so none after embeds.
    assert search(api, QUESTION)[0].status_code == 429
    for _ in range(3):
        r, ahead = search(api, QUESTION)
        assert r.status_code == 429 and ahead is None


@pytest.mark.parametrize(
    ("q", "status"),
    [
        ("", 422),
        ("   \n\t", 422),
        ("a\x00b", 422),
        ("bell\x07", 422),
        ("x" * (MAX_QUERY_CHARS + 1), 422),
    ],
)
def test_no_embedding_ahead_for_a_query_the_handler_refuses(tenant, make_api, q, status):
    api = make_api(tenant)
    assert api.get("users/priya/facts").status_code == 404
    r, ahead = search(api, q)
    assert r.status_code == status and ahead is None
    assert r.json()["code"] == "invalid"


def test_a_context_blocks_task_is_embedded_ahead_and_the_block_is_the_same(tenant, make_api):
    api, fresh = make_api(tenant), make_api(tenant, agent="fresh")
    for content in FACTS:
        assert api.post("users/priya/facts", {"content": content, "source": "user_stated"}).status_code in (200, 201)
    r = api.get("users/priya/context", task=f" {QUESTION} ", budget_tokens=500)
    assert r.status_code == 200 and r.wsgi_request.vectors_ahead.text == QUESTION
    assert "search_embed_ahead_ms" in r.json()["timings"]
    r2 = fresh.get("users/priya/context", task=f" {QUESTION} ", budget_tokens=500)
    assert not hasattr(r2.wsgi_request, "vectors_ahead") and "search_embed_ahead_ms" not in r2.json()["timings"]
    drop = ("timings", "text", "tokens")  # the text's fence holds a nonce drawn per response (its tokens vary)
    assert {k: v for k, v in r.json().items() if k not in drop} == {k: v for k, v in r2.json().items() if k not in drop}
    assert FACTS[0] in r.json()["text"]
    # No task: nothing to embed.
    r = api.get("users/priya/context", budget_tokens=500)
    assert r.status_code == 200 and not hasattr(r.wsgi_request, "vectors_ahead")


def test_only_the_search_and_context_routes_embed_ahead(tenant, make_api):
    api = make_api(tenant)
    assert api.get("users/priya/facts").status_code == 404
    r = api.get("users/priya/facts", q=QUESTION)
    assert r.status_code == 422 and not hasattr(r.wsgi_request, "vectors_ahead")  # an unknown parameter there
    r = api.get("users/priya/context", q=QUESTION)  # search's parameter on the context route: refused
    assert r.status_code == 422 and not hasattr(r.wsgi_request, "vectors_ahead")
    r = api.get("users/priya/search", task=QUESTION)
    assert r.status_code == 422 and not hasattr(r.wsgi_request, "vectors_ahead")
    r = api.get("users/priya/search/", q=QUESTION)
    assert r.status_code == 404 and not hasattr(r.wsgi_request, "vectors_ahead")
    r = api.client.post("/api/v1/users/priya/search?q=x", HTTP_AUTHORIZATION=f"Bearer {api.key}")
    assert r.status_code == 405 and not hasattr(r.wsgi_request, "vectors_ahead")
    # Another scheme than Bearer: refused by the key check, never embedded.
    r = api.client.get("/api/v1/users/priya/search", {"q": QUESTION}, HTTP_AUTHORIZATION=f"Basic {api.key}")
    assert r.status_code == 401 and not hasattr(r.wsgi_request, "vectors_ahead")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/users/priya/search",
        "/api/v1/users/a.b-c_d@e/search",
        "/api/v1/users/priya/search/",
        "/api/v1/users/priya/facts",
        "/api/v1/users//search",
        "/api/v1/users/a/b/search",
        "/api/v1/users/priya/context",
        "/api/v1/users/priya/context/",
        "/api/v1/users/priya/notebook",
        "/api/v2/users/priya/search",
        "/t/acme/users/priya/search",
    ],
)
def test_the_paths_the_middleware_starts_on_are_the_search_and_context_routes(path):
    from django.urls import Resolver404, resolve

    from memory_admin.api import AHEAD_PATH

    try:
        route = resolve(path).route
    except Resolver404:
        route = None
    routes = ("api/v1/users/<user_id>/search", "api/v1/users/<user_id>/context")
    assert (AHEAD_PATH.fullmatch(path) is not None) == (route in routes)


def test_take_gives_the_vectors_of_its_own_text_only_and_never_waits_in_the_queue():
    ahead = VectorsAhead(QUESTION)
    assert ahead.take("another question") is None
    done = VectorsAhead(QUESTION)
    done.future.result(timeout=60)  # started and finished (a take before it starts embeds in the caller)
    (vector, whole), ms = done.take(QUESTION)
    assert (vector, whole) == search_vectors(QUESTION) and ms >= 0
    # Every helper busy: a request's embedding has not started when the handler asks, so it is cancelled
    # and the handler embeds (take gives None) rather than waiting behind the others.
    pool, release = search_ahead_executor(), threading.Event()
    busy = [pool.submit(release.wait, 10) for _ in range(pool._max_workers)]
    try:
        queued = VectorsAhead(QUESTION)
        assert queued.take(QUESTION) is None and queued.future.cancelled()
    finally:
        release.set()
        for future in busy:
            future.result()


def wait_until(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_an_idle_helper_has_the_gil_before_the_request_goes_on_and_busy_helpers_are_not_waited_for(monkeypatch):
    """The request hands the GIL to an idle helper at once (its Python before the model would otherwise
    wait for the request's next wait on I/O); with every helper busy it goes straight on."""
    monkeypatch.setattr(search_module, "HANDOFF_WAIT_S", 30.0)  # the bound never decides this test
    ahead = VectorsAhead(QUESTION)
    assert ahead._started.is_set()
    assert ahead.take(QUESTION)[0] == search_vectors(QUESTION)
    release = threading.Event()
    busy = [search_ahead_submit(functools.partial(release.wait, 30))[0] for _ in range(_search_helpers())]
    try:
        started = time.monotonic()
        queued = VectorsAhead(QUESTION)
        assert time.monotonic() - started < 10  # did not sit out the 30 s bound
        assert not queued._started.is_set()
        assert queued.take(QUESTION) is None and queued.future.cancelled()
    finally:
        release.set()
        for future in busy:
            future.result()
    # Finished and cancelled runs alike are counted out: the next request finds its helpers idle again.
    assert wait_until(lambda: embeddings._search_busy.get(os.getpid(), 0) == 0)
    assert VectorsAhead(QUESTION)._started.is_set()


def test_a_submission_the_pool_refuses_is_not_counted_as_a_busy_helper(monkeypatch):
    class ShutDown:
        def submit(self, fn):  # noqa: ANN001
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    before = embeddings._search_busy.get(os.getpid(), 0)
    monkeypatch.setattr(embeddings, "search_ahead_executor", ShutDown)
    with pytest.raises(RuntimeError):
        search_ahead_submit(lambda: None)
    assert embeddings._search_busy.get(os.getpid(), 0) == before


def traced_get(path: str, key: str, query: str = "") -> tuple[int, dict, list[str]]:
    """A GET through the WSGI application exactly as gunicorn calls it, and the order in which the query's
    embedding was started and Django's request built ("ahead", "request")."""
    import json
    from unittest import mock

    from django.core.handlers.wsgi import WSGIRequest

    import memory_admin.api as api_module

    events: list[str] = []
    original_ahead, original_request = api_module.VectorsAhead.__init__, WSGIRequest.__init__

    def ahead_init(self, text):  # noqa: ANN001
        events.append("ahead")
        original_ahead(self, text)

    def request_init(self, environ):  # noqa: ANN001
        events.append("request")
        original_request(self, environ)

    with (
        mock.patch.object(api_module.VectorsAhead, "__init__", ahead_init),
        mock.patch.object(WSGIRequest, "__init__", request_init),
    ):
        status, body, environ = wsgi_get(path, key, query)
    assert api_module.AHEAD_ENVIRON_KEY not in environ  # taken by the request, not left in its META
    return status, json.loads(body), events


@pytest.mark.django_db(transaction=True)  # Django's request signals run, as in a gunicorn thread
def test_under_the_server_the_embedding_starts_before_django_builds_the_request(tenant, make_api):
    """Through the WSGI entry (what gunicorn calls), a known key's search starts its query's embedding
    before Django's request exists, once, under the same rules as the middleware, and ranks as without."""
    from urllib.parse import urlencode

    api, fresh = make_api(tenant), make_api(tenant, agent="fresh")
    for content in FACTS:
        assert api.post("users/priya/facts", {"content": content, "source": "user_stated"}).status_code in (200, 201)
    status, body, events = traced_get("/api/v1/users/priya/search", api.key, urlencode({"q": QUESTION, "k": 10}))
    assert status == 200 and events == ["ahead", "request"]
    assert "embed_ahead_ms" in body["timings"]
    query = urlencode({"q": QUESTION, "k": 10})
    status, body_fresh, events = traced_get("/api/v1/users/priya/search", fresh.key, query)
    assert status == 200 and events == ["request"] and "embed_ahead_ms" not in body_fresh["timings"]

    # The query's own components are equal; the rest of a score may move between the two searches, since
    # the first search's reads are counted (in the background, as in production) before the second.
    def query_parts(hits):
        return [(h["fact"]["content"], *(h["score"][k] for k in ("vector", "cosine", "keyword"))) for h in hits]

    assert query_parts(body["hits"]) == query_parts(body_fresh["hits"])
    status, body, events = traced_get("/api/v1/users/priya/context", api.key, urlencode({"task": QUESTION}))
    assert status == 200 and events == ["ahead", "request"] and "search_embed_ahead_ms" in body["timings"]
    # Bytes that are not UTF-8 read as replacement characters here as in Django's request: the same text.
    status, body, events = traced_get("/api/v1/users/priya/search", api.key, "q=%ff%fe")
    assert (status, body["query"], events) == (200, "\ufffd\ufffd", ["ahead", "request"])
    assert "embed_ahead_ms" in body["timings"]
    # Nothing started (and nothing started again by the middleware) where the rules say no.
    refused = [
        ("/api/v1/users/priya/search", "mem_" + "x" * 43, urlencode({"q": QUESTION}), 401),  # unknown key
        ("/api/v1/users/priya/search", api.key, "q=a%00b", 422),  # NUL
        ("/api/v1/users/priya/search", api.key, "q=%20%20", 422),  # blank
        ("/api/v1/users/priya/search", api.key, urlencode({"q": "x" * (MAX_QUERY_CHARS + 1)}), 422),
        ("/api/v1/users/priya/search", api.key, urlencode({"task": QUESTION}), 422),  # the other route's name
        ("/api/v1/users/priya/search/", api.key, urlencode({"q": QUESTION}), 404),
        ("/api/v1/users/priya/facts", api.key, urlencode({"q": QUESTION}), 422),
        # More parameters than Django reads: the entry starts nothing and does not fail the request either;
        # Django answers it as the API does (api.bad_request), for a known key and an unknown one alike.
        ("/api/v1/users/priya/search", api.key, "q=tea&" + "&".join(["a"] * 1200), 422),
        ("/api/v1/users/priya/search", "mem_" + "x" * 43, "q=tea&" + "&".join(["a"] * 1200), 422),
    ]
    for path, key, query, expected in refused:
        status, body, events = traced_get(path, key, query)
        assert (status, events) == (expected, ["request"]), (path, query, body)
