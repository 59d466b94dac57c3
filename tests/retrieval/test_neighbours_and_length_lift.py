"""Neighbour support and the length prior of the search ranking (retrieval/ranking.py), as a user of
`/search` and `/context` sees them: a turn that shares no word with the query but sits next to what
matches it is found, the reply right after a match before later turns of the same conversation, and a
turn of a conversation where several turns match before one next to a single match."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memory_admin.models import Fact, MemoryUser

pytestmark = pytest.mark.django_db

_users = itertools.count(1)


def new_user(tenant):
    return MemoryUser.objects.create(tenant=tenant, external_id=f"support-{next(_users)}")


def fact_row(user, content, at):
    """A fact straight into the table (no embedding: the ranking rests on words and time alone)."""
    return Fact.objects.create(
        tenant=user.tenant,
        memory_user=user,
        scope="user",
        content=content,
        content_hash="h",
        confidence=0.9,
        source="user_stated",
        valid_from=at,
    )


def ranked(api, user, q, k=20):
    r = api.get(f"users/{user.external_id}/search", q=q, k=k)
    assert r.status_code == 200, r.content
    return [h["fact"]["id"] for h in r.json()["hits"]], {h["fact"]["id"]: h["score"] for h in r.json()["hits"]}


def test_the_reply_right_after_a_match_comes_before_later_turns(api, tenant):
    user = new_user(tenant)
    start = timezone.now() - timedelta(days=40)
    match = fact_row(user, "Ben: I finally bought the kayak I wanted", start)
    # The reply names neither the kayak nor anything in the query.
    reply = fact_row(user, "Ana: Lovely, which colour did you pick?", start + timedelta(seconds=30))
    # Later turns of the same conversation, as long, just as unrelated to the query's words.
    later = [
        fact_row(user, f"Ana: Shall we meet for lunch on day {i} then?", start + timedelta(minutes=8 + 4 * i))
        for i in range(5)
    ]
    for i in range(30):
        fact_row(user, f"Status update {i}: the quarterly report is filed", start - timedelta(days=1 + i))
    order, scores = ranked(api, user, "kayak")
    assert order[0] == str(match.pk)
    assert order[1] == str(reply.pk), [scores[i] for i in order[:3]]
    assert all(order.index(str(reply.pk)) < order.index(str(f.pk)) for f in later)
    assert scores[str(reply.pk)]["keyword"] == 0 and scores[str(reply.pk)]["neighbour"] > 0


def test_a_turn_among_several_matches_comes_before_one_next_to_a_single_match(api, tenant):
    user = new_user(tenant)
    busy = timezone.now() - timedelta(days=30)
    quiet = timezone.now() - timedelta(days=20)
    # A conversation about the garden: three turns match the query ...
    for i, text in enumerate(["Ana: the garden needs water", "Ben: the garden gets sun", "Ana: our garden has roses"]):
        fact_row(user, text, busy + timedelta(minutes=i))
    among = fact_row(user, "Ben: and the tomatoes are nearly ripe", busy + timedelta(minutes=12))
    # ... another has one matching turn, as strong, and a turn a quarter of an hour after it.
    fact_row(user, "Ana: the garden needs weeding", quiet)
    beside = fact_row(user, "Ben: and the parcel arrives next Monday", quiet + timedelta(minutes=12))
    for i in range(30):
        fact_row(user, f"Status update {i}: the quarterly report is filed", quiet - timedelta(days=1 + i))
    order, scores = ranked(api, user, "garden")
    assert order.index(str(among.pk)) < order.index(str(beside.pk)), [scores[i] for i in order]
    assert scores[str(among.pk)]["neighbour"] > scores[str(beside.pk)]["neighbour"]


def test_the_reply_to_a_matching_turn_is_in_a_small_context_block(api, tenant):
    user = new_user(tenant)
    now = timezone.now()
    # Recent facts outrank an old conversation on recency ...
    for i in range(150):
        fact_row(user, f"Status update {i}: the quarterly report number {i} is filed", now - timedelta(hours=2 * i))
    # ... in which one turn names the task and the reply, which shares no word with it, holds the answer.
    start = now - timedelta(days=300)
    fact_row(user, "Ben: what did you think of the violin recital?", start)
    reply = fact_row(user, "Ana: moving, I cried at the second movement", start + timedelta(seconds=30))
    r = api.get(f"users/{user.external_id}/context", task="violin recital", budget_tokens=200)
    assert r.status_code == 200, r.content
    body = r.json()
    assert "I cried at the second movement" in body["text"]
    facts = next(s for s in body["sections"] if s["name"] == "facts")
    assert str(reply.pk) in facts["included"] and body["tokens"] <= 200


def test_a_longer_statement_gets_a_length_above_one(api, tenant):
    user = new_user(tenant)
    at = timezone.now() - timedelta(days=5)
    short = fact_row(user, "Thanks, kayak!", at)
    long = fact_row(user, "Ben: the kayak trip down the river took three days and two nights of camping", at)
    fact_row(user, "Ana: the kayak is in the shed", at - timedelta(days=3))
    _, scores = ranked(api, user, "kayak")
    assert scores[str(long.pk)]["length"] > 1 > scores[str(short.pk)]["length"]


def test_a_specific_statement_ranks_above_small_talk_with_the_same_words(api, tenant):
    """The specificity prior: of two statements that match the question's words alike, the one naming
    something particular (words the user's other memories rarely use) comes first, and the score says why."""
    user = new_user(tenant)
    start = timezone.now() - timedelta(days=40)
    for i in range(30):  # everyday small talk: its words are the user's most common ones
        fact_row(user, f"Sam: that was really great fun, loved it, thanks {i}", start - timedelta(days=2 + i))
    chatter = fact_row(user, "Sam: the weekend was really great fun, loved it", start)
    specific = fact_row(user, "Sam: the weekend I tried pottery at Riverside", start - timedelta(days=1))
    order, scores = ranked(api, user, "What did Sam do at the weekend?")
    assert order.index(str(specific.pk)) < order.index(str(chatter.pk))
    assert scores[str(specific.pk)]["specificity"] > 1 > scores[str(chatter.pk)]["specificity"]


def test_the_specificity_reported_is_the_mean_idf_of_each_facts_rarest_lexemes(api, tenant):
    """The specificity prior as the module docstring defines it, recomputed here from Postgres' own
    lexemes of every candidate (a small user: every own fact is one): (the mean IDF over the candidates
    of a fact's 3 rarest lexemes / its mean over the candidates) ** 0.4, a fact without lexemes a quarter
    of the mean; the hits in the order of their final scores."""
    user = new_user(tenant)
    at = timezone.now() - timedelta(days=3)
    texts = [f"Ivo: the garden was lovely today, thanks {w}" for w in ("again", "so much", "a lot", "Ana")]
    texts += [
        "Ivo: I planted quinces and medlars in the garden",
        "Ivo: the garden shed holds a Bakelite radio from Turin",
        "Ivo: thanks, lovely",
        "Ivo: loved the garden",
        "...!?",  # no lexeme at all
    ]
    for i, text in enumerate(texts):
        fact_row(user, text, at - timedelta(hours=3 * i))
    r = api.get(f"users/{user.external_id}/search", q="what grows in the garden", k=50)
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["candidates"] == len(texts) == len(body["hits"])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id::text, tsvector_to_array(to_tsvector('english', content)) FROM memory_admin_fact"
            " WHERE memory_user_id = %s",
            [user.pk],
        )
        lexemes = dict(cursor.fetchall())
    n = len(lexemes)
    df = Counter(word for words in lexemes.values() for word in words)
    idf = {word: math.log(1 + (n - count + 0.5) / (count + 0.5)) for word, count in df.items()}
    mean = {i: sum(sorted((idf[w] for w in words), reverse=True)[:3]) / 3 for i, words in lexemes.items()}
    average = sum(mean.values()) / n
    expected = {i: max(0.25, m / average) ** 0.4 for i, m in mean.items()}
    reported = {h["fact"]["id"]: h["score"]["specificity"] for h in body["hits"]}
    assert reported == pytest.approx(expected, abs=1e-4)
    assert min(reported.values()) == pytest.approx(0.25**0.4, abs=1e-4)  # the fact without lexemes
    finals = [h["score"]["final"] for h in body["hits"]]
    assert finals == sorted(finals, reverse=True)


def test_a_list_question_finds_matches_from_more_than_one_conversation(api, tenant):
    """The spread: when two conversations match a question about equally, the best k hold statements of
    both instead of every statement of the one that matches a shade better (here: a day more recent)."""
    user = new_user(tenant)
    recent, earlier = timezone.now() - timedelta(days=40), timezone.now() - timedelta(days=41)
    titles = iter(["Dune", "Emma", "Ulysses", "Beloved", "Rebecca", "Middlemarch", "Persuasion", "Kindred"])
    first = [fact_row(user, f"Tim: I read the novel {next(titles)}", recent + timedelta(minutes=i)) for i in range(4)]
    second = [fact_row(user, f"Tim: I read the novel {next(titles)}", earlier + timedelta(minutes=i)) for i in range(4)]
    for i in range(20):
        fact_row(user, f"Tim: the bus was late again on route {i}", recent - timedelta(days=5 + i))
    order, scores = ranked(api, user, "Which novels has Tim read?", k=4)
    assert {str(f.pk) for f in first} & set(order) and {str(f.pk) for f in second} & set(order), order
    # The third statement of the first conversation yielded, and the score reports the factor.
    _, everything = ranked(api, user, "Which novels has Tim read?", k=10)
    assert sorted(everything[str(f.pk)]["spread"] for f in first)[0] < 1.0
    assert all(s["spread"] <= 1.0 for s in everything.values())


def test_a_statement_past_the_best_twenty_comes_before_picks_that_yielded(api, tenant):
    """The spread re-ranks the best 20 only, but a pick that yields can fall below a candidate outside
    them: a statement of another conversation that was not among the best 20 then comes before the late
    picks of the first, and every hit is still in the order of its final score."""
    user = new_user(tenant)
    recent, earlier = timezone.now() - timedelta(days=40), timezone.now() - timedelta(days=41)
    first = [fact_row(user, f"Tim: I read the novel, part {i}", recent + timedelta(minutes=i)) for i in range(24)]
    second = [fact_row(user, f"Tim: I read the novel, part {i}", earlier + timedelta(minutes=i)) for i in range(6)]
    for i in range(10):
        fact_row(user, f"Tim: the bus was late again on route {i}", recent - timedelta(days=5 + i))
    order, scores = ranked(api, user, "Which novel parts has Tim read?", k=50)
    finals = [scores[i]["final"] for i in order]
    assert finals == sorted(finals, reverse=True)
    before_spread = {i: s["final"] / s["spread"] for i, s in scores.items()}
    best_second = max(before_spread[str(f.pk)] for f in second)
    assert sum(1 for value in before_spread.values() if value > best_second) >= 20  # outside the best 20 ...
    yielded = [str(f.pk) for f in first if scores[str(f.pk)]["spread"] < 1.0]
    assert yielded
    last_yielded = max(order.index(i) for i in yielded)
    assert min(order.index(str(f.pk)) for f in second) < last_yielded  # ... and before a pick that yielded


def test_each_hits_neighbour_support_is_its_definition_over_the_candidates(api, tenant):
    # Support computed from every candidate's reported relevance (all of them are hits here): the best
    # within NEIGHBOUR_MINUTES plus the mean of the best three, plus the best within ADJACENT_MINUTES; a
    # fact with no other within NEIGHBOUR_MINUTES gets none.
    user = new_user(tenant)
    start = timezone.now() - timedelta(days=3)
    minutes = {
        0: "Lena bakes sourdough bread",
        4: "the oven runs hot",
        5: "Lena sells bread at the market",
        20: "the weather was rainy",
        49: "Lena bakes rye bread",
        600: "Lena plans a trip to Porto",
        1440: "bread again today",
        1441: "the starter is alive",
        3000: "nothing about baking at all",
    }
    for minute, content in minutes.items():
        fact_row(user, content, start + timedelta(minutes=minute))
    r = api.get(f"users/{user.external_id}/search", q="Lena bread", k=20)
    assert r.status_code == 200, r.content
    hits = r.json()["hits"]
    assert len(hits) == len(minutes)
    at = {h["fact"]["id"]: timezone.datetime.fromisoformat(h["fact"]["valid_from"]) for h in hits}
    relevance = {h["fact"]["id"]: h["score"]["relevance"] for h in hits}
    for h in hits:
        me = h["fact"]["id"]
        gap = {o: abs((at[o] - at[me]).total_seconds()) / 60 for o in at if o != me}
        best = sorted((relevance[o] for o in gap if gap[o] <= 30), reverse=True)[:3]
        expected = (best[0] + sum(best) / 3 if best else 0.0) + max(
            (relevance[o] for o in gap if gap[o] <= 1.25), default=0.0
        )
        assert h["score"]["neighbour"] == pytest.approx(expected, abs=1e-5), h["fact"]["content"]
    by_content = {h["fact"]["content"]: h["score"]["neighbour"] for h in hits}
    assert by_content["Lena plans a trip to Porto"] == by_content["nothing about baking at all"] == 0
    assert by_content["the oven runs hot"] > by_content["Lena bakes rye bread"] > 0
