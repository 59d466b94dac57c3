"""A user's own facts in a search (retrieval/candidates.py): every one of them is ranked while the user has
at most OWN_EXACT_LIMIT; above it a search weighs the OWN_NEAREST nearest, the OWN_KEYWORD nearest that hold
each word of the query and the OWN_ENTITY facts that mention an entity the query names, and still finds a fact by its
rare word, by its meaning and by the entity it names. The limits are lowered here (a user of 1,000+ facts
would cost the suite minutes of embedding), so the statement is compiled again around each test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pgvector.django import CosineDistance

from memory_admin.embedding import embed
from memory_admin.models import Fact, MemoryUser
from memory_admin.retrieval import candidates
from memory_admin.retrieval.query import vectors_for
from memory_admin.retrieval.search import fact_ranking
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, fact_entities_link

pytestmark = pytest.mark.django_db

PAST = datetime(2025, 3, 1, tzinfo=UTC)
LIMIT, NEAREST, KEYWORD, ENTITY = 12, 4, 1, 2

# Facts near each question's meaning that are not its answer: they fill the nearest slots.
FILLERS = [
    *(
        f"An invoice from the electricity company arrived for {m}, a little higher than last time."
        for m in ("January", "February", "March", "April", "May", "June")
    ),
    *(
        f"Robert's colleague sent the {d} meeting notes about the quarterly budget."
        for d in ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
    ),
    *(f"Went to a jazz concert in the {p} and loved the saxophone solo." for p in ("park", "old theatre", "cellar")),
]
RARE = "Kowalczyk repaired the leaking boiler in the basement."
MEANING = "My daughter performs a violin piece at the school recital on Friday evening."
ALIASED = "Bob fixed the broken gutter above the porch."


@pytest.fixture
def capped(monkeypatch):
    monkeypatch.setattr(candidates, "OWN_EXACT_LIMIT", LIMIT)
    monkeypatch.setattr(candidates, "OWN_NEAREST", NEAREST)
    monkeypatch.setattr(candidates, "OWN_KEYWORD", KEYWORD)
    monkeypatch.setattr(candidates, "OWN_ENTITY", ENTITY)
    candidates._statement.cache_clear()
    yield
    candidates._statement.cache_clear()


def own_facts(tenant, user_id: str, contents: list[str]) -> dict[str, str]:
    """The user's facts as stored in bulk (no write-path merging of near-duplicates), content -> id."""
    user, _ = MemoryUser.objects.get_or_create(tenant=tenant, external_id=user_id)
    facts = Fact.objects.bulk_create(
        Fact(
            tenant=tenant,
            memory_user=user,
            scope=Fact.Scope.USER,
            content=content,
            content_hash=f"{user_id}-{i}",
            confidence=0.9,
            source="user_stated",
            valid_from=PAST + timedelta(hours=i),
            embedding=vector,
            entities_due=False,
        )
        for i, (content, vector) in enumerate(zip(contents, embed(contents), strict=True))
    )
    return {f.content: str(f.pk) for f in facts}


def nearest(user_id: str, query: str, n: int) -> list[str]:
    """The contents of the user's n facts nearest the vector a search compares them with."""
    vector, _, _ = vectors_for(query)
    near = Fact.objects.filter(memory_user__external_id=user_id).order_by(CosineDistance("embedding", vector))
    return list(near.values_list("content", flat=True)[:n])


def search(api, user_id: str, q: str) -> dict:
    r = api.get(f"users/{user_id}/search", q=q, k=10, kinds="fact")
    assert r.status_code == 200, r.content
    return r.json()


def contents(body: dict) -> list[str]:
    return [h["fact"]["content"] for h in body["hits"]]


def test_a_user_within_the_limit_has_every_own_fact_ranked(api, tenant, capped, monkeypatch):
    own_facts(tenant, "ada", [*FILLERS[: LIMIT - 1], RARE])
    q = "who repaired the boiler downstairs"
    assert search(api, "ada", q)["candidates"] == LIMIT
    # Ranked exactly as without any cap: every candidate, the same scores, in the same order.
    ada = MemoryUser.objects.get(tenant=tenant, external_id="ada")
    system = Principal.system(tenant.pk)
    within = fact_ranking(principal=system, memory_user=ada, query=q).scored
    monkeypatch.setattr(candidates, "OWN_EXACT_LIMIT", 10**6)
    candidates._statement.cache_clear()
    exact = fact_ranking(principal=system, memory_user=ada, query=q).scored
    assert len(within) == LIMIT
    assert [(final, row.id) for final, row, _ in within] == [(final, row.id) for final, row, _ in exact]
    # One fact more and the user is above the limit: no longer every fact.
    own_facts(tenant, "ada", [FILLERS[LIMIT]])
    monkeypatch.setattr(candidates, "OWN_EXACT_LIMIT", LIMIT)
    candidates._statement.cache_clear()
    assert search(api, "ada", q)["candidates"] < LIMIT + 1


def test_a_user_above_the_limit_finds_a_fact_by_its_rare_word_and_by_its_meaning(api, tenant, capped):
    own_facts(tenant, "lee", [*FILLERS, RARE, MEANING])
    assert Fact.objects.filter(memory_user__external_id="lee").count() > LIMIT
    q = "the invoice Kowalczyk sent"
    # The fact holding the rare word is not among the nearest: only its word can bring it in.
    assert RARE not in nearest("lee", q, NEAREST)
    body = search(api, "lee", q)
    assert RARE in contents(body)
    # The nearest, the matches of its three words and (no entity named) nothing more: not all 17 facts.
    assert body["candidates"] <= NEAREST + 3 * KEYWORD
    body = search(api, "lee", "when does my kid play music on stage")
    assert contents(body)[0] == MEANING


def test_a_user_above_the_limit_finds_a_fact_by_the_entity_it_names(api, tenant, capped):
    ids = own_facts(tenant, "lee", [*FILLERS, ALIASED])
    system = Principal.system(tenant.pk)
    fact = Fact.objects.get(pk=ids[ALIASED])
    robert = EntityMention("Robert Vance", "person", "subject", ("Bob",))
    fact_entities_link(principal=system, fact=fact, mentions=[robert], relations=[])
    q = "what did Robert Vance do"
    # Neither its meaning nor its words ("Bob", not "Robert") bring it in: only the entity it names.
    assert ALIASED not in nearest("lee", q, NEAREST)
    body = search(api, "lee", q)
    hit = next(h for h in body["hits"] if h["fact"]["content"] == ALIASED)
    assert hit["score"]["entity"] == 1.0
    assert body["candidates"] <= NEAREST + 2 * KEYWORD + ENTITY
