"""Races: writers on one user and key, and notebook saves from the same version."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from memory_admin.models import Fact
from tests.conftest import Api


def race(n: int, work) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.django_db(transaction=True)
def test_racing_writers_on_one_key_leave_one_active_fact_and_an_intact_chain(api):
    api.post("users/alice/facts", {"content": "warm-up so the model is loaded", "source": "user_stated"})
    cities = ["Berlin", "Paris", "Lisbon", "Oslo", "Rome", "Vienna"]

    def work(i: int):
        r = Api(api.key).post(
            "users/alice/facts",
            {"content": f"Alice's home city is {cities[i]}", "key": "personal.city", "source": "user_stated"},
        )
        return r.status_code, r.json()["outcome"]

    results = race(len(cities), work)
    assert all(status == 201 for status, _ in results), results
    assert sorted(outcome for _, outcome in results) == ["created"] + ["updated"] * (len(cities) - 1)

    chain = list(Fact.objects.filter(key="personal.city").order_by("version"))
    assert [f.version for f in chain] == list(range(1, len(cities) + 1))
    assert [f.status for f in chain] == ["superseded"] * (len(cities) - 1) + ["active"]
    for older, newer in zip(chain, chain[1:], strict=False):
        assert older.superseded_by_id == newer.pk and newer.supersedes_id == older.pk


@pytest.mark.django_db(transaction=True)
def test_racing_identical_writes_store_one_fact(api):
    api.post("users/bob/facts", {"content": "warm-up so the model is loaded", "source": "user_stated"})

    def work(i: int):
        return (
            Api(api.key)
            .post("users/bob/facts", {"content": "Bob is allergic to peanuts", "source": "user_stated"})
            .json()["outcome"]
        )

    outcomes = race(4, work)
    assert sorted(outcomes) == ["created", "deduplicated", "deduplicated", "deduplicated"]
    assert Fact.objects.filter(content="Bob is allergic to peanuts").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_notebook_saves_from_the_same_version_one_wins_one_conflicts(api):
    assert api.put("users/alice/notebook", {"content": "# Alice\n", "version": 0}).status_code == 200

    def work(i: int):
        r = Api(api.key).put("users/alice/notebook", {"content": f"# Alice\n- edit from tab {i}\n", "version": 1})
        return r.status_code, r.json()

    results = race(2, work)
    assert sorted(status for status, _ in results) == [200, 409]
    conflict = next(body for status, body in results if status == 409)
    assert conflict["code"] == "version_conflict" and conflict["current_version"] == 2
    winner = next(body for status, body in results if status == 200)
    assert api.get("users/alice/notebook").json()["content"] == winner["content"]
