"""Questions that name a time (SPEC §6): the time a query names is matched against when each memory was
observed, and `as_of` / `between` filter a search by time; through the HTTP API on the real Postgres."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_admin.models import MemoryUser
from memory_admin.retrieval.candidates import candidates
from memory_admin.retrieval.query import search_vectors
from memory_admin.retrieval.ranking import score, weights_of
from memory_admin.retrieval.search import DEFAULT_STATUSES
from memory_admin.retrieval.timeq import Period, Yearless, query_time
from memory_admin.selectors.access import Principal

pytestmark = pytest.mark.django_db


def write(api, user, content, observed_at, **extra):
    body = {"content": content, "source": "user_stated", "observed_at": observed_at, **extra}
    r = api.post(f"users/{user}/facts", body)
    assert r.status_code in (200, 201), r.content
    assert r.json()["fact"]["content"] == content, r.json()  # stored as its own fact, not merged
    return r.json()["fact"]["id"]


def search(api, user, q, **params):
    r = api.get(f"users/{user}/search", q=q, **params)
    assert r.status_code == 200, r.content
    return r.json()


def contents(body):
    return [h["fact"]["content"] for h in body["hits"]]


CONCERTS = {
    "2023-03-11T20:00:00Z": "I went to a jazz concert at the club downtown",
    "2023-05-13T20:00:00Z": "I went to a folk concert at the old theatre",
    "2023-07-22T20:00:00Z": "I went to a rock concert in the park with friends",
    "2023-09-16T20:00:00Z": "I went to a piano concert at the city hall",
    "2022-05-14T20:00:00Z": "I went to a choir concert at the cathedral",
}


def test_a_question_naming_a_month_ranks_that_months_memory_first_among_look_alikes(api):
    for observed_at, content in CONCERTS.items():
        write(api, "tess", content, observed_at)
    body = search(api, "tess", "what concert did I go to in May 2023?")
    assert contents(body)[0] == "I went to a folk concert at the old theatre"
    top, others = body["hits"][0]["score"], [h["score"] for h in body["hits"][1:]]
    assert top["time"] == 1.0 and all(s["time"] < 1.0 for s in others)
    # A month without a year matches it in every year: both Mays match.
    body = search(api, "tess", "what concert did I go to in May?")
    times = {h["fact"]["content"]: h["score"]["time"] for h in body["hits"]}
    mays = {CONCERTS["2023-05-13T20:00:00Z"], CONCERTS["2022-05-14T20:00:00Z"]}
    assert all(times[c] == 1.0 for c in mays) and all(t < 0.01 for c, t in times.items() if c not in mays)
    assert contents(body)[0] == CONCERTS["2023-05-13T20:00:00Z"]
    # Without the month, another concert comes first: the month is what lifted it.
    assert contents(search(api, "tess", "what concert did I go to?"))[0] != CONCERTS["2023-05-13T20:00:00Z"]


def test_a_question_relative_to_an_event_uses_when_the_event_was_observed(api):
    write(api, "uma", "I ran the city marathon race this morning", "2023-06-10T09:00:00Z")
    write(api, "uma", "I bought a new pair of hiking boots", "2023-02-04T12:00:00Z")
    write(api, "uma", "I bought a new pair of running shoes", "2023-06-05T12:00:00Z")
    write(api, "uma", "I bought a new pair of tennis shoes", "2023-09-23T12:00:00Z")
    body = search(api, "uma", "what did I buy the week before the race?")
    bought = [c for c in contents(body) if c.startswith("I bought")]
    assert bought[0] == "I bought a new pair of running shoes"
    times = {h["fact"]["content"]: h["score"]["time"] for h in body["hits"]}
    assert times["I bought a new pair of running shoes"] == 1.0
    assert times["I bought a new pair of hiking boots"] < 0.01 and times["I bought a new pair of tennis shoes"] < 0.01


def test_relative_times_count_from_as_of(api):
    write(api, "vic", "I painted the garden fence green", "2023-05-10T15:00:00Z")
    write(api, "vic", "I painted the kitchen walls white", "2023-04-02T15:00:00Z")
    write(api, "vic", "I painted the garage door blue", "2023-03-15T15:00:00Z")
    # 15 May 2023 is a Monday: "last week" is 8-14 May.
    body = search(api, "vic", "what did I paint last week?", as_of="2023-05-15T09:00:00Z")
    assert contents(body)[0] == "I painted the garden fence green"
    assert body["hits"][0]["score"]["time"] == 1.0


def test_as_of_shows_what_was_true_then(api):
    berlin = write(api, "wes", "I live in Berlin", "2022-01-10T00:00:00Z", key="home.city")
    lisbon = write(api, "wes", "I live in Lisbon", "2023-06-01T00:00:00Z", key="home.city")
    job = write(api, "wes", "I work at Globex as a product manager", "2024-02-01T00:00:00Z")

    def found(as_of):
        return {h["fact"]["id"] for h in search(api, "wes", "where do I live and work?", as_of=as_of)["hits"]}

    # Lisbon superseded Berlin: Berlin was true in 2022 (a superseded fact, shown for then), and neither
    # Lisbon nor the job had begun.
    assert found("2022-12-01T00:00:00Z") == {berlin}
    # Berlin was superseded before the end of 2023 (by Lisbon, observed in June), the job not begun.
    assert found("2023-12-01T00:00:00Z") == {lisbon}
    assert found("2024-06-01T00:00:00Z") == {lisbon, job}
    assert found("2021-01-01T00:00:00Z") == set()
    # Without as_of, only what holds now.
    assert {h["fact"]["id"] for h in search(api, "wes", "where do I live and work?")["hits"]} == {lisbon, job}


def test_between_keeps_what_was_observed_within_the_period(api):
    for observed_at, content in CONCERTS.items():
        write(api, "xia", content, observed_at)
    body = search(api, "xia", "which concerts did I go to?", between="2023-05-01/2023-07-31")
    assert sorted(contents(body)) == sorted([CONCERTS["2023-05-13T20:00:00Z"], CONCERTS["2023-07-22T20:00:00Z"]])
    body = search(api, "xia", "which concerts?", between="2023-07-22T21:00:00Z/2023-12-31T00:00:00+02:00")
    assert contents(body) == [CONCERTS["2023-09-16T20:00:00Z"]]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"between": "2023-07-01/2023-05-01"}, "between"),  # ends before it starts
        ({"between": "2023-05-01T10:00:00Z/2023-05-01T10:00:00Z"}, "between"),  # empty
        ({"between": "2023-05-01"}, "between"),
        ({"between": "May 2023/June 2023"}, "between"),
        ({"between": "2023-05-01T10:00:00/2023-06-01"}, "between"),  # no timezone
        ({"between": "0000-01-01/2023-01-01"}, "between"),
        ({"between": "2023-05-01/99999-01-01"}, "between"),
        ({"as_of": "yesterday"}, "as_of"),
        ({"as_of": "2023-05-01T10:00:00"}, "as_of"),  # no timezone
        ({"as_of": "1700000000"}, "as_of"),
        ({"as_of": "9999-01-01T00:00:00Z"}, "as_of"),
    ],
)
def test_a_bad_time_filter_is_invalid(api, params, field):
    write(api, "yan", "I went to a folk concert", "2023-05-13T20:00:00Z")
    r = api.get("users/yan/search", q="concert", **params)
    assert r.status_code == 422, r.content
    assert r.json()["code"] == "invalid" and r.json()["field"] == field


TIMELESS = [
    "what concert did I go to?",
    "you may like the folk one",  # "may" is a word here, not a month
    "which band played at the old theatre",
    "jazz or rock",
]


@pytest.mark.parametrize("q", TIMELESS)
def test_a_query_that_names_no_time_ranks_exactly_as_without_time_matching(api, tenant, q):
    for observed_at, content in CONCERTS.items():
        write(api, "zoe", content, observed_at)
    body = search(api, "zoe", q, k=10)
    assert all(h["score"]["time"] == 0.0 for h in body["hits"])
    # The same candidates ranked by the ranking without any time component: same order, same finals.
    user = MemoryUser.objects.get(tenant=tenant, external_id="zoe")
    principal = Principal.system(tenant.pk)
    vector, whole = search_vectors(q)
    weights_json, rows, _ = candidates(
        principal, [user], query=q, vector=vector, statuses=DEFAULT_STATUSES, n_shared=20, entity_vector=whole
    )
    plain = score(rows, weights_of(weights_json))
    assert [str(row.id) for _, row, _ in plain] == [h["fact"]["id"] for h in body["hits"]]
    assert [round(final, 6) for final, _, _ in plain] == [h["score"]["final"] for h in body["hits"]]


NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)  # a Friday


def _period(a: str, b: str) -> Period:
    return Period(datetime.fromisoformat(a).replace(tzinfo=UTC), datetime.fromisoformat(b).replace(tzinfo=UTC))


@pytest.mark.parametrize(
    ("text", "periods", "yearless"),
    [
        ("what did I do in May 2023", [_period("2023-05-01", "2023-06-01")], []),
        ("Who did Maria have dinner with on May 3, 2023?", [_period("2023-05-03", "2023-05-04")], []),
        ("What movie did Joanna watch on 1 May, 2022?", [_period("2022-05-01", "2022-05-02")], []),
        ("the weekend of 24June, 2022", [_period("2022-06-21", "2022-06-28")], []),
        ("notes from 2023-06-08", [_period("2023-06-08", "2023-06-09")], []),
        ("what happened in 2022", [_period("2022-01-01", "2023-01-01")], []),
        ("Where was John between August 11 and August 15 2023?", [_period("2023-08-11", "2023-08-16")], []),
        ("Where was Tim in the week before 16 November 2023?", [_period("2023-11-09", "2023-11-16")], []),
        ("the summer of 2022", [_period("2022-06-01", "2022-09-01")], []),
        ("yesterday", [_period("2026-11-26", "2026-11-27")], []),
        ("what did I do last week", [_period("2026-11-16", "2026-11-23")], []),
        ("last year's trip", [_period("2025-01-01", "2026-01-01")], []),
        ("last month", [_period("2026-10-01", "2026-11-01")], []),
        ("last Friday", [_period("2026-11-20", "2026-11-21")], []),
        ("last summer", [_period("2026-06-01", "2026-09-01")], []),  # the one just gone
        ("this winter", [_period("2026-12-01", "2027-03-01")], []),
        ("next spring", [_period("2027-03-01", "2027-06-01")], []),
        ("what did I do on 8 June", [], [Yearless(6, 8, 8)]),
        ("Which outdoor spot did Joanna visit in May?", [], [Yearless(5)]),
        ("during the summer", [], [Yearless(6), Yearless(7), Yearless(8)]),
        ("you may want tea", [], []),
        ("I march on", [], []),
        ("the fall of Rome", [], []),
        ("When did Nate win his first video game tournament?", [], []),
    ],
)
def test_the_times_a_query_names(text, periods, yearless):
    when = query_time(text, NOW)
    assert list(when.periods) == periods and list(when.yearless) == yearless and not when.events


def test_an_event_a_query_names_is_read_with_its_window():
    (event,) = query_time("what did I buy the week before the race?", NOW).events
    assert (event.event, event.direction, event.days) == ("race", -1, 7.0)
    (event,) = query_time("two days after my wedding", NOW).events
    assert (event.event, event.direction, event.days) == ("wedding", 1, 2.0)


HOSTILE = [
    "",
    " ",
    "0000",
    "in the year 0000",
    "on 00 May 0000",
    "99999999999999999999",
    "in 99999",
    "in May 9999",
    "9999-99-99",
    "2023-02-31",
    "on 31 February 2023",
    "between 2023 and 2022",
    "between May and",
    "the 999 weeks before the 999 years after 2199",
    "999 years ago",
    "last " * 400,
    "🎉📅🗓️ in 🎂 May 🎈 2023 🎊",
    "\u202e2023 yaM ni\u202c",
    "x" * 2000,
    "May " * 500,
    "2023 " * 400,
    "the week before " * 120,
    "between " + "August 11 and " * 140,
    "ᛗᚨᚤ ２０２３ 五月",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_parsing_never_fails_on_hostile_text(text):
    query_time(text, NOW)  # raises nothing
    query_time(text, datetime(1900, 1, 1, tzinfo=UTC))  # nor at the edges of the calendar
    query_time(text, datetime(9999, 12, 31, tzinfo=UTC))


def test_a_search_with_a_hostile_time_answers(api):
    write(api, "ann", "I went to a folk concert", "2023-05-13T20:00:00Z")
    for text in HOSTILE:
        if text.strip():
            r = api.get("users/ann/search", q=text[:2000])
            assert r.status_code == 200, (text[:40], r.content)
