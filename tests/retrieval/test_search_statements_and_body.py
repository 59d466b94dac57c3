"""The search request's hot path (issue 9 §2): how many statements it sends, that its statements compiled
once serve every principal and user correctly, and that its body is what the schema says."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from ninja.responses import NinjaJSONEncoder

from memory_admin.api.retrieval import SearchOut
from memory_admin.embedding import embed_one
from memory_admin.models import Fact, MemoryUser
from memory_admin.services.message_index import messages_index

pytestmark = pytest.mark.django_db

# Written inside the request only in the test suite (ACCESS_COUNT_FLUSH_SECONDS = 0); in production a
# background flush writes them once a second for every request together.
DEFERRED_WRITES = (
    'UPDATE "memory_admin_fact"',
    "INSERT INTO memory_admin_usage_day",
    "INSERT INTO memory_admin_factread",  # the access log: like the counts, a flush's in production
)
# The rate limiter's housekeeping: one request in _SWEEP_ONE_IN (at random) also deletes old windows.
HOUSEKEEPING = "DELETE FROM memory_admin_throttlewindow"


def write(api, user, content):
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    return r.json()["fact"]["id"]


def search(api, user, q, **params):
    r = api.get(f"users/{user}/search", q=q, **params)
    assert r.status_code == 200, r.content
    return r


def org_fact(tenant, content):
    fact = Fact.objects.create(
        tenant=tenant,
        memory_user=None,
        scope=Fact.Scope.ORG,
        content=content,
        content_hash=content,
        confidence=1.0,
        source="user_stated",
        valid_from=timezone.now(),
        embedding=embed_one(content),
    )
    return str(fact.pk)


def _sent(api, user, q, **params):
    with CaptureQueriesContext(connection) as ctx:
        r = search(api, user, q, **params)
    return r, [
        q["sql"]
        for q in ctx.captured_queries
        if not q["sql"].startswith((*DEFERRED_WRITES, HOUSEKEEPING)) and "SAVEPOINT" not in q["sql"]
    ]


def test_a_search_sends_one_statement_per_kind_of_candidate(api, tenant):
    write(api, "sam", "Sam keeps bees in the garden")
    write(api, "sam", "Sam's sister lives in Lyon")
    org_fact(tenant, "The office has a rooftop garden")
    search(api, "sam", "garden bees")  # warm: compiled statements cached, connection settings read
    # Facts only: the key with its request count (rate limit) and the memory user; the candidates (own
    # facts, shared nearest, shared full text, weights: one statement), each carrying what the body shows.
    r, sent = _sent(api, "sam", "where does the garden grow", k=5, kinds="fact")
    assert len(sent) == 2, sent
    assert all(table in sent[0] for table in ("memory_admin_apikey", "throttlewindow", "memory_admin_memoryuser"))
    assert sent[1].startswith("WITH search_qv")
    # Facts and document chunks: the tenant has none (the candidate statement says so): no statement more.
    _, sent = _sent(api, "sam", "where does the garden grow", k=5, kinds="fact,chunk")
    assert len(sent) == 2 and sent[1].startswith("WITH search_qv"), sent
    assert {h["fact"]["content"] for h in r.json()["hits"]} >= {
        "Sam keeps bees in the garden",
        "The office has a rooftop garden",
    }
    # Every kind (the default): the user's messages are one more statement, carrying what a hit shows; the
    # tenant has no document chunk (the candidate statement says so), so the chunks' is not sent.
    r = api.post(
        "users/sam/messages", {"thread_id": "t", "messages": [{"role": "user", "content": "The garden grows"}]}
    )
    assert r.status_code == 202, r.content
    messages_index()
    r, sent = _sent(api, "sam", "where does the garden grow", k=5)
    assert len(sent) == 3, sent
    assert sent[1].startswith("WITH search_qv") and sent[2].startswith("WITH message_qv")
    assert {h["kind"] for h in r.json()["hits"]} == {"fact", "message"}


def test_the_body_is_what_the_schema_would_render(api, admin_api):
    write(api, "ria", "Ria collects vinyl records")
    write(api, "ria", "Ria plays bass in a jazz trio")
    # Whole numbers stored as weights come out as floats, as the schema's dict[str, float] has them.
    r = admin_api.patch("settings", {"search_weights": {"vector": 1, "keyword": 1, "recency": 0, "importance": 0}})
    assert r.status_code == 200, r.content
    # Django's JSON encoder keeps milliseconds ("…:33.000Z" for 500 µs, "…:33Z" for 0 µs), so a body
    # read back and re-encoded is byte-equal only for whole-millisecond times: make them so.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_admin_fact SET "
            + ", ".join(f"{c} = date_trunc('milliseconds', {c})" for c in ("valid_from", "created_at", "updated_at"))
        )
    r = search(api, "ria", "jazz records", k=3)
    validated = SearchOut.model_validate(r.json()).model_dump()
    # The renderer's text of the validated body: the same JSON, key for key, in the same order.
    assert r.content.decode() == json.dumps(validated, cls=NinjaJSONEncoder)
    assert r.json()["weights"]["vector"] == 1.0 and b'"vector": 1.0' in r.content
    assert r["Content-Type"] == "application/json; charset=utf-8"
    assert "server_ms_excluding_embed;dur=" in r["Server-Timing"]


def test_cached_statements_bind_each_requests_user_and_key(tenant, make_api):
    full = make_api(tenant)
    restricted = make_api(tenant, users=["una"], agent="una-agent")
    una = write(full, "una", "Una grows tomatoes on the balcony")
    vic = write(full, "vic", "Vic grows tomatoes in a greenhouse")
    shared = org_fact(tenant, "The tenant's allotment grows tomatoes")

    def hits(api, user):
        return {h["fact"]["id"] for h in search(api, user, "who grows tomatoes").json()["hits"]}

    # Same key, same query shape, another user: only that user's own facts (and the shared one).
    assert hits(full, "una") == {una, shared}
    assert hits(full, "vic") == {vic, shared}
    # A restricted key after the unrestricted one warmed the caches: its own access filter.
    assert hits(restricted, "una") == {una, shared}
    r = restricted.get("users/vic/search", q="who grows tomatoes")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    assert hits(full, "una") == {una, shared}


def test_the_ranking_carries_the_columns_asked_for_the_same_ranking_without_them(api, tenant):
    """`fact_ranking(carry=...)` (what the context block renders from): the same scored order and scores
    as without, and the carried values are the facts' own, for the user's facts and the shared ones."""
    from memory_admin.models import MemoryUser
    from memory_admin.retrieval import fact_ranking
    from memory_admin.selectors.access import Principal

    write(api, "cara", "Cara keeps bees in the garden")
    write(api, "cara", "Cara's sister lives in Lyon, near the garden of the museum")
    org_fact(tenant, "The office has a rooftop garden")
    user = MemoryUser.objects.get(tenant=tenant, external_id="cara")
    staff = Principal(tenant_id=tenant.pk, role="operator", actor="op@example.com", actor_type="staff")
    carry = ("content", "valid_from", "contested", "memory_user", "message")
    plain = fact_ranking(principal=staff, memory_user=user, query="garden bees")
    carried = fact_ranking(principal=staff, memory_user=user, query="garden bees", carry=carry)
    assert [(final, row.id) for final, row, _ in plain.scored] == [(final, row.id) for final, row, _ in carried.scored]
    assert [parts for _, _, parts in plain.scored] == [parts for _, _, parts in carried.scored]
    facts = {f.pk: f for f in Fact.objects.filter(pk__in=[row.id for _, row, _ in carried.scored])}
    assert len(facts) == 3
    for _, row, _ in carried.scored:
        fact = facts[row.id]
        expected = (fact.content, fact.valid_from, fact.contested, fact.memory_user_id, fact.message_id)
        assert row.carried == expected


def test_a_metadata_number_past_64_bits_is_rendered_as_every_other_route_renders(api):
    """A fact whose metadata holds an integer past 64 bits (JSON allows it, and the API stores it) is
    rendered, not refused."""
    huge = 10**30
    r = api.post(
        "users/nia/facts",
        {"content": "Nia keeps a ledger of big numbers", "source": "user_stated", "metadata": {"n": huge}},
    )
    assert r.status_code in (200, 201), r.content
    r = search(api, "nia", "ledger of big numbers")
    assert r.status_code == 200 and r["Content-Type"] == "application/json; charset=utf-8"
    assert r.json()["hits"][0]["fact"]["metadata"] == {"n": huge}
    assert "server_ms_excluding_embed;dur=" in r["Server-Timing"]


def test_facts_in_the_body_are_spelled_as_the_renderer_spells_them(api):
    """The route writes the facts' ids and times as strings before rendering: the same text as the API's
    renderer gives the model's values (sub-millisecond times and missing times included)."""
    from memory_admin.api.schemas import FactOut

    fact_id = write(api, "max", "Max restores old bicycles on weekends")
    Fact.objects.filter(pk=fact_id).update(soft_expires_at=None, valid_from=timezone.now().replace(microsecond=123456))
    hit = search(api, "max", "bicycles").json()["hits"][0]["fact"]
    fact = Fact.objects.select_related("memory_user").get(pk=fact_id)
    expected = json.loads(json.dumps(FactOut.of(fact), cls=NinjaJSONEncoder))
    changed_by_the_read = ("access_count", "last_accessed_at", "effective_confidence", "staleness", "stale")
    assert {k: v for k, v in hit.items() if k not in changed_by_the_read} == {
        k: v for k, v in expected.items() if k not in changed_by_the_read
    }
    assert hit["valid_from"].endswith(".123Z") and hit["soft_expires_at"] is None and hit["id"] == fact_id


def test_the_facts_carried_by_the_candidates_are_the_stored_facts(api, tenant):
    """A search describes its hits from the columns the candidate rows carry (no second read): every
    field of every hit, own and shared, is what the ORM reads for that fact, metadata and keys included."""
    from memory_admin.api.schemas import FactOut

    r = api.post(
        "users/ivy/facts",
        {
            "content": "Ivy's favourite tea is oolong",
            "source": "user_stated",
            "key": "tea",
            "metadata": {"n": [1, "x"]},
        },
    )
    assert r.status_code in (200, 201), r.content
    write(api, "ivy", "Ivy drinks tea every morning at seven")
    shared = org_fact(tenant, "The tenant's kitchen stocks green tea")
    Fact.objects.filter(pk=shared).update(metadata={"from": "ops"}, task_ref="t-1")
    hits = search(api, "ivy", "what tea does Ivy drink", k=10).json()["hits"]
    assert len(hits) == 3 and shared in {h["fact"]["id"] for h in hits}
    for hit in hits:
        fact = Fact.objects.select_related("memory_user").get(pk=hit["fact"]["id"])
        expected = json.loads(json.dumps(FactOut.of(fact), cls=NinjaJSONEncoder))
        changed_by_the_read = ("access_count", "last_accessed_at", "effective_confidence", "staleness", "stale")
        assert {k: v for k, v in hit["fact"].items() if k not in changed_by_the_read} == {
            k: v for k, v in expected.items() if k not in changed_by_the_read
        }
    assert {h["fact"]["key"] for h in hits} == {"tea", None} and any(
        h["fact"]["metadata"] == {"n": [1, "x"]} for h in hits
    )


def test_a_search_without_candidates_answers_the_tenants_weights(api, admin_api, tenant):
    # The candidate statement carries the weights on its rows: with no row at all (a user without facts,
    # no shared fact), they come from the tenant's settings, not the defaults.
    weights = {"vector": 0.7, "keyword": 0.1, "recency": 0.15, "importance": 0.05}
    r = admin_api.patch("settings", {"search_weights": weights})
    assert r.status_code == 200, r.content
    MemoryUser.objects.create(tenant=tenant, external_id="ada")
    r = search(api, "ada", "tomatoes in the greenhouse")
    assert r.json()["hits"] == []
    assert r.json()["weights"] == weights


def test_which_query_lexemes_a_candidate_holds_is_what_postgres_matches(api, tenant):
    """`matched` (bit i: the fact holds the query's i-th lexeme, read from the candidates' lexemes in
    Python) against Postgres' own match of each query lexeme as a one-lexeme tsquery, on words with
    quotes, backslashes, colons, signs and accents."""
    from memory_admin.retrieval import fact_ranking
    from memory_admin.selectors.access import Principal

    contents = [
        "O'Brien's café serves naïve crêpes",
        "a back\\slash and C:\\temp\\path in notes",
        "x:y ratio, A&B company, it's 50% off",
        "Crêpes at O'Brien's, again! c++ and c# talk",
        "nothing relevant here",
    ]
    for content in contents:
        write(api, "oli", content)
    user = MemoryUser.objects.get(tenant=tenant, external_id="oli")
    staff = Principal(tenant_id=tenant.pk, role="operator", actor="op@example.com", actor_type="staff")
    query = "O'Brien crêpes back\\slash C:\\temp x:y A&B 50% c++ naïve café"
    ranking = fact_ranking(principal=staff, memory_user=user, query=query)
    assert len(ranking.scored) == len(contents)
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [query])
        lexemes = cursor.fetchone()[0]
        for _, row, _ in ranking.scored:
            cursor.execute(
                # The one-lexeme tsquery of each query lexeme, quoted as tsquery input expects.
                "SELECT search_vector @@ ('''' || replace(replace(l, E'\\\\', E'\\\\\\\\'), '''', '''''')"
                " || '''')::tsquery"
                " FROM memory_admin_fact, unnest(%s::text[]) WITH ORDINALITY AS u(l, i) WHERE id = %s ORDER BY i",
                [lexemes, row.id],
            )
            expected = sum(1 << i for i, (hit,) in enumerate(cursor.fetchall()) if hit)
            assert row.matched == expected
    assert any(row.matched for _, row, _ in ranking.scored)


def test_a_hits_fact_shows_the_scores_its_ranking_used(api):
    """A hit's fact shows the effective confidence, staleness and stale flag of its score (Postgres's
    evaluation of scoring's formulas for the candidate), which agree with scoring's Python form of them:
    fresh and old, read and unread, pinned, contested, fully decayed, dated far back, marked stale."""
    from datetime import timedelta

    from memory_admin import scoring

    now = timezone.now()
    variants = [
        {},
        {"valid_from": now - timedelta(days=400), "created_at": now - timedelta(days=400)},
        {"last_accessed_at": now - timedelta(days=45), "access_count": 7},
        {"pinned": True, "created_at": now - timedelta(days=900)},
        {"contested": True, "valid_from": now - timedelta(days=200)},
        {"kind": "inference", "created_at": now - timedelta(days=3000), "confidence": 0.4},
        {"valid_from": now.replace(year=1500), "created_at": now.replace(year=1500)},
        {"status": Fact.Status.STALE},
    ]
    contents = [
        "Sam grows cherry tomatoes on the balcony",
        "Sam's garden shed needs a new roof",
        "Sam waters the garden before breakfast",
        "Sam planted basil next to the tomatoes",
        "The allotment committee fined Sam for tall hedges",
        "Sam thinks slugs ate the lettuce seedlings",
        "Sam inherited a greenhouse from an aunt",
        "Compost from the garden goes to Sam's neighbour",
    ]
    ids = []
    for content, change in zip(contents, variants, strict=True):
        fact_id = write(api, "sam", content)
        Fact.objects.filter(pk=fact_id).update(**change)
        ids.append(fact_id)
    assert len(set(ids)) == len(variants)
    before = {str(f.pk): scoring.scores(f) for f in Fact.objects.filter(pk__in=ids)}  # the search counts a read
    hits = search(api, "sam", "Sam's garden and tomatoes", k=len(variants)).json()["hits"]
    assert sorted(h["fact"]["id"] for h in hits) == sorted(ids)
    for hit in hits:
        fact, score = hit["fact"], hit["score"]
        assert (fact["effective_confidence"], fact["staleness"], fact["stale"]) == (
            score["effective_confidence"],
            score["staleness"],
            score["stale"],
        )
        effective, staleness, stale = before[fact["id"]]
        assert fact["effective_confidence"] == pytest.approx(effective, abs=1e-4)
        assert fact["staleness"] == pytest.approx(staleness, abs=1e-4) and fact["stale"] == stale
