"""Compile once, bind per request (memory_admin.db.compiled): the code's own constants are written into a
hot statement, a request's values stay parameters, and the rows are the ORM's own. Written in, the constants
let Postgres keep one generic plan for the candidate statement instead of planning every search."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from memory_admin.db.compiled import bind, compiled, inline_constants
from memory_admin.embedding import embed_one
from memory_admin.models import Fact

pytestmark = pytest.mark.django_db

SENTINEL = "\x00sentinel-content\x00"


def test_a_constant_of_the_code_is_written_in_and_a_requests_value_stays_a_parameter():
    sql, params = inline_constants(
        "a = %s AND b LIKE '50%%s' AND c IN (%s, %s) AND d = %s AND e = %s AND f = %s AND g = %s",
        (7, Fact.Status.ACTIVE, "active", Fact.Status.SUPERSEDED, SENTINEL, 3, True),
        tenant_id=3,
    )
    # The plain string "active" may be a request's text: only the enum member is the code's constant. The
    # tenant's id is written in; another int, and True (an int to Python, not the tenant), stay parameters.
    assert (
        sql == "a = %s AND b LIKE '50%%s' AND c IN ('active', %s) AND d = 'superseded' AND e = %s AND f = 3 AND g = %s"
    )
    assert params == (7, "active", SENTINEL, True)


def test_a_compiled_queryset_gives_the_orms_rows(api, tenant):
    for content in ("Lea grows tomatoes", "Lea keeps bees"):
        assert api.post("users/lea/facts", {"content": content, "source": "user_stated"}).status_code in (200, 201)
    qs = Fact.objects.filter(status=Fact.Status.ACTIVE, memory_user__external_id="lea", content=SENTINEL).values(
        "content"
    )
    assert Fact.Status.ACTIVE in compiled(qs)[1]  # without a tenant, nothing is written in
    sql, params = compiled(qs, tenant_id=tenant.pk)
    assert "'active'" in sql and Fact.Status.ACTIVE not in params and SENTINEL in params
    with connection.cursor() as cursor:
        cursor.execute(sql, bind(params, {SENTINEL: "Lea keeps bees"}))
        assert cursor.fetchall() == [("Lea keeps bees",)]
    assert list(Fact.objects.filter(content="Lea keeps bees").values_list("content")) == [("Lea keeps bees",)]


def test_repeated_searches_settle_on_one_generic_plan_with_the_same_hits(api, tenant):
    for content in ("Mia's sister lives in Porto", "Mia plays the cello", "Mia is allergic to peanuts"):
        assert api.post("users/mia/facts", {"content": content, "source": "user_stated"}).status_code in (200, 201)
    office = "The office closes at six on Fridays"
    Fact.objects.create(
        tenant=tenant,
        memory_user=None,
        scope=Fact.Scope.ORG,
        content=office,
        content_hash="office",
        confidence=1.0,
        source="user_stated",
        valid_from=timezone.now(),
        embedding=embed_one(office),
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    answers = []
    for question in ["where does her sister live"] * 10 + ["when does the office close"]:
        r = api.get("users/mia/search", q=question, kinds="fact")
        assert r.status_code == 200, r.content
        answers.append([hit["fact"]["content"] for hit in r.json()["hits"]])
    assert answers.pop()[0] == office  # the shared facts' branch, served by the generic plan
    # The same facts every time, the sister's first (reads counted by each search may reorder near ties below).
    assert all(a[0] == "Mia's sister lives in Porto" and sorted(a) == sorted(answers[0]) for a in answers)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH search_qv%%'"
        )
        (generic, custom), *others = cursor.fetchall()
    assert others == []
    # Postgres plans the first five executions for their parameters, then keeps the generic plan.
    assert custom == 5 and generic == 6


def test_a_small_tenant_beside_a_large_one_finds_its_shared_facts_and_the_large_one_is_not_replanned(
    api, tenant, other_tenant, make_api
):
    # The large tenant's 4,000 shared facts fill the shared HNSW index; the small tenant has five. A plan
    # that walked the index for the small tenant would find few of its own among the nearest, whichever
    # plan Postgres settles on after its first five executions.
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(4000, 384))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    Fact.objects.bulk_create(
        Fact(
            tenant=other_tenant,
            memory_user=None,
            scope=Fact.Scope.ORG,
            content=f"Large tenant note {i}",
            content_hash=f"large-{i}",
            confidence=1.0,
            source="user_stated",
            valid_from=timezone.now(),
            embedding=vector.tolist(),
        )
        for i, vector in enumerate(vectors)
    )
    notes = [
        "The office closes at six on Fridays",
        "Parking is on level minus two",
        "The VPN certificate renews every March",
        "Lunch is served in the atrium at noon",
        "The fire drill is on the first Monday",
    ]
    for i, note in enumerate(notes):
        Fact.objects.create(
            tenant=tenant,
            memory_user=None,
            scope=Fact.Scope.ORG,
            content=note,
            content_hash=f"small-{i}",
            confidence=1.0,
            source="user_stated",
            valid_from=timezone.now(),
            embedding=embed_one(note),
        )
    assert api.post("users/noa/facts", {"content": "Noa cycles to work", "source": "user_stated"}).status_code in (
        200,
        201,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as autovacuum leaves a database in use
    for _ in range(12):
        r = api.get("users/noa/search", q="when does the office close", kinds="fact", k=10)
        assert r.status_code == 200, r.content
        found = {hit["fact"]["content"] for hit in r.json()["hits"]}
        assert set(notes) <= found
    # The large tenant's searches settle on a generic plan that walks the shared HNSW index: each search is
    # no longer planned (with the status a parameter, that plan could not use the partial index and lost).
    large = make_api(other_tenant)
    assert large.post("users/ola/facts", {"content": "Ola runs the archive", "source": "user_stated"}).status_code in (
        200,
        201,
    )
    for _ in range(8):
        r = large.get("users/ola/search", q="large tenant note", kinds="fact", k=10)
        assert r.status_code == 200, r.content
        assert len(r.json()["hits"]) == 10
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH search_qv%%'"
            " AND statement LIKE %s",
            [f'%"tenant_id" = {other_tenant.pk} %'],
        )
        assert cursor.fetchall() == [(3, 5)]
