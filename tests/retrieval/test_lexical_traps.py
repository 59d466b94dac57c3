"""Lexical traps of search (issue 33), through the HTTP API on the real Postgres: a name every candidate
shares does not decide the ranking, word forms and abbreviations match, a negated topic is not what the
search answers first."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.models import Fact

pytestmark = pytest.mark.django_db


def write(api, user, content, **extra):
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated", **extra})
    assert r.status_code in (200, 201), r.content
    return r.json()["fact"]["id"]


def ranked(api, user, q, k=10):
    r = api.get(f"users/{user}/search", q=q, k=k)
    assert r.status_code == 200, r.content
    return [h["fact"]["id"] for h in r.json()["hits"]]


def spaced(user_external_id, ids, *, hours=6):
    """Observe the facts hours apart (separate conversations), in the order given, oldest first."""
    start = timezone.now() - timedelta(days=30)
    for i, pk in enumerate(ids):
        Fact.objects.filter(pk=pk).update(valid_from=start + timedelta(hours=hours * i))


def test_a_name_every_fact_shares_does_not_outrank_the_topic(api):
    facts = [
        write(api, "jo", "Jo: I moved to Leeds last year"),
        write(api, "jo", "Jo: I work as a nurse at the hospital"),
        write(api, "jo", "Jo: my birthday is in March"),
        write(api, "jo", "Jo: I have two cats"),
        write(api, "jo", "Jo: I always drink green tea"),
    ]
    spaced("jo", facts)
    r = api.get("users/jo/search", q="what tea does Jo drink?", k=10).json()
    assert r["hits"][0]["fact"]["id"] == facts[-1]
    # Every fact names Jo: the name lifts none of them above the others.
    assert {h["score"]["entity"] for h in r["hits"]} == {0.0}


def test_a_name_few_facts_share_still_lifts_them(api):
    facts = [
        write(api, "kit", "My sister Jo always drinks green tea"),
        *(write(api, "kit", text) for text in ("I drink coffee at work", "My boss drinks tea", "Tea prices rose")),
    ]
    spaced("kit", facts)
    r = api.get("users/kit/search", q="what tea does Jo drink?", k=10).json()
    assert r["hits"][0]["fact"]["id"] == facts[0]
    assert r["hits"][0]["score"]["entity"] > 0.5


def test_broken_matches_broke_down(api):
    facts = [
        write(api, "sam", "The kitchen was painted blue"),
        write(api, "sam", "The kitchen tap is new"),
        write(api, "sam", "I cleaned the kitchen"),
        write(api, "sam", "The dishwasher broke down yesterday"),
    ]
    spaced("sam", facts)
    assert ranked(api, "sam", "is anything in the kitchen broken?")[0] == facts[-1]


def test_gf_matches_girlfriend(api):
    facts = [
        write(api, "lee", "My boss is called Tom"),
        write(api, "lee", "My brother is called Ed"),
        write(api, "lee", "My cat is called Miso"),
        write(api, "lee", "My girlfriend is called Ana"),
    ]
    spaced("lee", facts)
    r = api.get("users/lee/search", q="gf name", k=10).json()
    assert r["hits"][0]["fact"]["id"] == facts[-1]
    # Matched by its word, not only by meaning: the keyword component counts "girlfriend".
    assert r["hits"][0]["score"]["keyword"] == 1.0


def test_a_negated_topic_is_not_ranked_first(api):
    cars = [
        write(api, "max", "Max spends his weekends fixing cars in the garage"),
        write(api, "max", "Max loves fixing old cars, it is his favourite hobby"),
    ]
    others = [
        write(api, "max", "Max took up painting landscapes as a hobby"),
        write(api, "max", "Max plays chess in a club on Thursdays"),
        write(api, "max", "Max bought a new kettle"),
    ]
    spaced("max", [*cars, *others])
    top = ranked(api, "max", "What hobbies does Max have other than fixing cars?")
    assert top[0] == others[0]
    # Without the negation, the cars come first: the words are matched, only the negation demotes them.
    assert ranked(api, "max", "Does Max like fixing cars?")[0] in cars
