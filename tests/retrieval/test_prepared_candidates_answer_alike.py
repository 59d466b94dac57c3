"""The candidate statement is a prepared statement of the connection (issue 9 §2: Postgres parses its
~7 kB once per connection, not on every search). What a client must never notice: whichever plan
Postgres then picks (one per execution, or a generic one), the answer is the same; a rolled-back
transaction (which drops the connection's prepared statements) costs nothing but a new preparation."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from memory_admin.models import MemoryUser

pytestmark = pytest.mark.django_db


def write(api, user, content):
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    return r.json()["fact"]["id"]


def ranked(api, user, q):
    r = api.get(f"users/{user}/search", q=q, k=5)
    assert r.status_code == 200, r.content
    return [(h["fact"]["id"], h["score"]) for h in r.json()["hits"]]


def prepared_candidates() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'WITH search_qv%%'")
        return cursor.fetchone()[0]


@pytest.fixture
def facts(api):
    for content in (
        "Mia keeps three hives of bees behind the barn",
        "Mia's brother Tom repairs bicycles in Leeds",
        "Mia sells honey at the Saturday market",
        "Tom rides to work on a red bicycle",
    ):
        write(api, "mia", content)


def test_the_candidate_statement_is_prepared_once_per_connection(api, facts):
    first = ranked(api, "mia", "who keeps bees")
    assert prepared_candidates() == 1
    assert ranked(api, "mia", "who keeps bees") == first
    assert ranked(api, "mia", "where does Tom work") != first  # another query, the same statement
    assert prepared_candidates() == 1


def test_a_generic_plan_and_a_custom_plan_answer_the_same(api, facts):
    answers = {}
    for mode in ("force_custom_plan", "force_generic_plan", "auto"):
        with connection.cursor() as cursor:
            cursor.execute(f"SET plan_cache_mode = {mode}")
        answers[mode] = [ranked(api, "mia", q) for q in ("who keeps bees", "Tom's bicycle", "honey market")]
    with connection.cursor() as cursor:
        cursor.execute("RESET plan_cache_mode")
    assert answers["force_generic_plan"] == answers["force_custom_plan"] == answers["auto"]
    assert all(answers["auto"])


def test_a_rolled_back_savepoint_between_searches_costs_no_error(api, facts, tenant):
    first = ranked(api, "mia", "who keeps bees")
    with pytest.raises(IntegrityError), transaction.atomic():  # ROLLBACK TO SAVEPOINT: psycopg drops its names
        MemoryUser.objects.create(tenant=tenant, external_id="mia")
    assert ranked(api, "mia", "who keeps bees") == first
    assert prepared_candidates() == 1
