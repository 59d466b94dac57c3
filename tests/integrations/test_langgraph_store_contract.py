"""The store contract: the same scenarios, run against LangGraph's own `InMemoryStore` (given the server's
embedder, so that scores are comparable) and against `MemoryAdminStore` on the live server, give the same
answers. A scenario returns what a user of the store observes; the two lists must be equal."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from memory_admin_client import MemoryAdmin
from memory_admin_client.langgraph import MemoryAdminStore

from memory_admin import embedding

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def seen(result):
    """What a user sees of a result: items as (namespace, key, value[, score to 4 places])."""
    if result is None:
        return None
    if isinstance(result, list):
        return [seen(r) for r in result]
    if isinstance(result, tuple):
        return result
    shown = (result.namespace, result.key, result.value)
    score = getattr(result, "score", None)
    return (*shown, round(score, 4)) if score is not None else shown


def unordered(items):
    return sorted(seen(items), key=repr)


# --- scenarios: each takes a store and returns what it observed ---------------------------------------


def same_text_under_two_keys(store):
    store.put(("memories", "dana"), "k1", {"text": "Dana prefers neovim"})
    store.put(("memories", "dana"), "k2", {"text": "Dana prefers neovim"})
    return [seen(store.get(("memories", "dana"), "k2")), seen(store.get(("memories", "dana"), "k1"))]


def put_update_delete(store):
    ns = ("memories", "eli")
    observed = [seen(store.get(ns, "editor"))]
    store.put(ns, "editor", {"text": "Eli uses emacs", "since": 2019})
    observed.append(seen(store.get(ns, "editor")))
    store.put(ns, "editor", {"text": "Eli uses helix"})
    observed.append(seen(store.get(ns, "editor")))
    store.delete(ns, "editor")
    store.delete(ns, "never-written")
    observed.append(seen(store.get(ns, "editor")))
    return observed


def deep_namespaces(store):
    store.put(("acme", "team-a", "fay", "notes"), "n1", {"text": "Fay owns the billing service"})
    store.put(("acme", "team-a", "fay", "prefs", "ui"), "theme", {"mode": "dark"})
    store.put(("acme", "team-b", "gus"), "n1", {"text": "Gus is on call this week"})
    return [
        seen(store.get(("acme", "team-a", "fay", "notes"), "n1")),
        seen(store.get(("acme", "team-a", "fay", "prefs", "ui"), "theme")),
        unordered(store.search(("acme", "team-a"))),
        unordered(store.search(("acme",))),
        unordered(store.search(())),
    ]


def filters(store):
    ns = ("memories", "hal")
    store.put(ns, "a", {"kind": "trip", "city": "Oslo", "days": 3, "tags": ["work"], "meta": {"by": "agent", "v": 1}})
    store.put(ns, "b", {"kind": "trip", "city": "Lima", "days": 10, "tags": ["fun", "work"], "meta": {"by": "user"}})
    store.put(ns, "c", {"kind": "note", "text": "Hal likes tea", "days": 7})
    store.put(ns, "d", {"kind": "trip", "city": None, "days": 1.5})
    return [
        unordered(store.search(ns, filter={"kind": "trip"})),
        unordered(store.search(ns, filter={"kind": "trip", "city": "Lima"})),
        unordered(store.search(ns, filter={"days": {"$gt": 5}})),
        unordered(store.search(ns, filter={"days": {"$gte": 3, "$lt": 10}})),
        unordered(store.search(ns, filter={"kind": {"$ne": "trip"}})),
        unordered(store.search(ns, filter={"meta": {"by": "agent"}})),
        unordered(store.search(ns, filter={"tags": ["work"]})),
        unordered(store.search(ns, filter={"city": None})),
        unordered(store.search(ns, filter={"kind": {"$eq": "note"}})),
        unordered(store.search(ns, filter={"missing": "x"})),
    ]


def ranked_search(store):
    ns = ("memories", "ivy")
    store.put(ns, "home", {"text": "Ivy lives in a flat in Lisbon"})
    store.put(ns, "food", {"text": "Ivy is allergic to peanuts"})
    store.put(ns, "work", {"text": "Ivy works as a nurse at the city hospital"})
    store.put(ns, "hobby", {"text": "Ivy plays the violin in an orchestra"})
    store.put(("memories", "jon"), "home", {"text": "Jon lives in Porto"})
    return [
        seen(store.search(ns, query="where does Ivy live?")),
        seen(store.search(ns, query="what can Ivy not eat?", limit=2)),
        seen(store.search(ns, query="music", limit=2, offset=1)),
        seen(store.search(("memories",), query="which city is home?", limit=3)),
        seen(store.search(ns, query="job", filter={"text": "Ivy works as a nurse at the city hospital"})),
    ]


def index_choices(store):
    ns = ("memories", "kim")
    store.put(ns, "doc1", {"title": "Sourdough starter care", "body": "Feed it flour and water daily"}, index=["title"])
    store.put(ns, "doc2", {"title": "Tax return checklist", "body": "Receipts, forms, deadlines"}, index=["title"])
    store.put(ns, "secret-plan", {"title": "Bread festival plan"}, index=False)
    return [
        seen(store.search(ns, query="baking bread", limit=2)),
        # The item not indexed is found by key and by filter, but never scored.
        seen(store.get(ns, "secret-plan")),
        [s for s in seen(store.search(ns, query="baking bread", limit=5)) if s[1] == "secret-plan"],
    ]


def list_namespaces(store):
    for ns in [("memories", "lea"), ("memories", "max"), ("memories", "max", "trips"), ("a", "b", "c", "d"), ("x",)]:
        store.put(ns, "k", {"v": 1})
    return [
        store.list_namespaces(),
        store.list_namespaces(prefix=("memories",)),
        store.list_namespaces(prefix=("memories", "*", "trips")),
        store.list_namespaces(suffix=("trips",)),
        store.list_namespaces(suffix=("*", "d")),
        store.list_namespaces(max_depth=2),
        store.list_namespaces(prefix=("memories",), max_depth=2),
        store.list_namespaces(limit=2, offset=1),
        store.list_namespaces(prefix=("nothing",)),
    ]


def batch_reads_see_the_store_before_its_puts(store):
    ns = ("memories", "ned")
    store.put(ns, "old", {"text": "Ned drinks coffee"})
    results = store.batch(
        [
            PutOp(ns, "tea", {"text": "Ned drinks green tea"}),
            GetOp(ns, "tea"),
            GetOp(ns, "old"),
            SearchOp(ns, filter={"text": "Ned drinks green tea"}),
            PutOp(ns, "old", None),
            ListNamespacesOp(),
            PutOp(ns, "tea", {"text": "Ned drinks black tea"}),
        ]
    )
    return [seen(results), seen(store.get(ns, "tea")), seen(store.get(ns, "old"))]


def async_side(store):
    async def run():
        ns = ("memories", "olga")
        await store.aput(ns, "city", {"text": "Olga lives in Riga"})
        await store.aput(ns, "pet", {"text": "Olga has a cat called Miso"})
        item = await store.aget(ns, "city")
        hits = await store.asearch(ns, query="what animal does Olga have?", limit=1)
        await store.adelete(ns, "city")
        return [seen(item), seen(hits), seen(await store.aget(ns, "city")), await store.alist_namespaces()]

    return asyncio.run(run())


SCENARIOS = [
    same_text_under_two_keys,
    put_update_delete,
    deep_namespaces,
    filters,
    ranked_search,
    index_choices,
    list_namespaces,
    batch_reads_see_the_store_before_its_puts,
    async_side,
]


def server_embeddings(texts):
    """The server's own embedder, in this process, for the reference store."""
    return embedding.embed(list(texts))


@pytest.fixture
def client(gunicorn_server, tenant, make_key):
    with MemoryAdmin(gunicorn_server, make_key(tenant)) as client:
        yield client


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_memory_admin_store_answers_as_the_in_memory_store(scenario, client):
    reference = InMemoryStore(index={"dims": 384, "embed": server_embeddings, "fields": ["$"]})
    expected = scenario(reference)
    assert scenario(MemoryAdminStore(client)) == expected
