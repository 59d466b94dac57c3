"""Tenant-wide search (issue 11, item 14) at scale: the product's ranking per user, the same hits
whether the users are searched one by one or together, a bounded number of queries whatever the
number of users searched, and a sampled count of candidate users when the words are common."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memory_admin.embedding import embed_query
from memory_admin.models import MemoryUser
from memory_admin.retrieval import fact_search
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import Principal


@pytest.fixture
def espresso(tenant, make_fact):
    """Twelve users who mention espresso (user-00 most often), each with some unrelated facts."""
    now = timezone.now()
    users = []
    for i in range(12):
        user = MemoryUser.objects.create(tenant=tenant, external_id=f"user-{i:02d}")
        users.append(user)
        mentions = 4 if i == 0 else 1
        for j in range(mentions):
            text = f"User {i} orders a double espresso at café {j}"
            make_fact(
                user,
                text,
                embedding=embed_query(text),
                importance=0.3 + 0.05 * (i % 5),
                valid_from=now - timedelta(days=i + j),
            )
        for text in (f"User {i} rides a bike to work", f"User {i} keeps a cat"):
            make_fact(user, text, embedding=embed_query(text), valid_from=now - timedelta(days=3 * i))
    return users


def _hit_texts(body: str) -> list[str]:
    table = body.split('id="search-hits"')[1].split("</table>")[0]
    return re.findall(r'<td class="content"><a href="[^"]+">([^<]+)</a>', table)


def _one_by_one(tenant, users, query: str, k: int = 30) -> list[str]:
    """What the page should show: fact_search for each user on its own, merged by final score, keeping
    hits that share a word with the query or are close in meaning."""
    principal = Principal(tenant_id=tenant.pk, role="operator", actor="t", actor_type="staff")
    vector = embed_query(query)
    hits = [
        h
        for u in users
        for h in fact_search(
            principal=principal, memory_user=u, query=query, k=k, query_vector=vector, shared=False, record=False
        ).hits
    ]
    hits = [h for h in hits if h.keyword > 0 or h.cosine >= sel.MATCH_MIN_COSINE]
    return [h.fact.content for h in sorted(hits, key=lambda h: -h.final)[:k]]


def test_the_page_shows_the_hits_fact_search_gives_each_user(operator, tenant, espresso):
    body = operator.get(reverse("search", args=[tenant.slug]), {"q": "espresso"}).content.decode()
    shown = _hit_texts(body)
    # Ten users (the bound) are searched: user-00 (four matches) first, then the lowest ids.
    searched = [espresso[0], *espresso[1:10]]
    assert shown == _one_by_one(tenant, searched, "espresso")
    assert "User 0 orders a double espresso at café 3" in shown
    assert not any(text.startswith(("User 10 ", "User 11 ")) for text in shown)
    assert "the 10 with the most matches" in body
    assert 'id="search-sample"' not in body


def test_the_number_of_queries_does_not_grow_with_the_users_searched(operator, tenant, espresso, make_fact):
    url = reverse("search", args=[tenant.slug])
    operator.get(url, {"q": "espresso"})  # warm caches (settings rows)
    with CaptureQueriesContext(connection) as ten:
        assert len(_hit_texts(operator.get(url, {"q": "espresso"}).content.decode())) > 10
    with CaptureQueriesContext(connection) as one:
        assert _hit_texts(operator.get(url, {"q": "espresso", "user": "user-03"}).content.decode())
    # Session, user, memberships; candidate users; their rows; one statement for every user's
    # candidates; the facts of the hits.
    assert len(ten.captured_queries) == len(one.captured_queries) == 7


def test_common_words_are_counted_in_a_sample_and_the_page_says_so(operator, tenant, espresso, monkeypatch):
    url = reverse("search", args=[tenant.slug])
    exact = operator.get(url, {"q": "espresso double"}).content.decode()
    # Fewer matches may be counted than there are: the users are ranked by their matches in a page
    # sample (here every page: the test table is small, so the sample is the whole table).
    monkeypatch.setattr(sel.search, "SEARCH_COUNT_LIMIT", 5)
    with CaptureQueriesContext(connection) as sampled_queries:
        sampled = operator.get(url, {"q": "espresso double"}).content.decode()
    assert _hit_texts(sampled) == _hit_texts(exact)
    note = sampled.split('id="search-sample"')[1].split("</span>")[0]
    assert "100.0% sample of stored facts" in note and "name a user" in note
    assert any("TABLESAMPLE SYSTEM" in q["sql"] for q in sampled_queries.captured_queries)
    assert len(sampled_queries.captured_queries) == 9  # the table size and the sample: two more


def test_a_sample_without_enough_matches_is_filled_up_from_the_counted_ones(tenant, espresso, monkeypatch):
    monkeypatch.setattr(sel.search, "SEARCH_COUNT_LIMIT", 5)
    monkeypatch.setattr(sel.search, "SEARCH_SAMPLE_ROWS", 0)  # a 0 % sample: no page read
    principal = Principal(tenant_id=tenant.pk, role="operator", actor="t", actor_type="staff")
    result = sel.tenant_search(principal, "espresso", {})
    assert result["sample_percent"] == 0
    # Ranked from the first SEARCH_COUNT_LIMIT + 1 matches counted: still users with espresso facts.
    assert result["searched"] and all("espresso" in h.fact.content for h in result["hits"])
