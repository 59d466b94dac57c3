"""GET /entities/{id} lists the threads and episodes an entity came up in (SPEC §12, issue 13 item 3):
through the messages and extraction batches its facts came from and the episodes that hold them,
drawn by the real pipeline (offline rules), over real HTTP, under the one access function."""

from __future__ import annotations

from django.utils import timezone

from memory_admin.models import Entity, Episode, Fact
from memory_admin.selectors import entities as entity_selectors
from tests.extraction.test_entities_extraction import close
from tests.extraction.test_pipeline import post


def converse(api, user: str, thread: str, *lines: str) -> None:
    assert post(api, user, thread, *lines).status_code == 202
    close(api, user=user, thread=thread)


def detail(api, entity: Entity) -> dict:
    r = api.get(f"entities/{entity.pk}")
    assert r.status_code == 200, r.content
    return r.json()


def test_the_threads_and_episodes_that_mention_an_entity(api, offline, dispatched):
    converse(api, "alice", "t-job", "I work at Acme Robotics.")
    converse(api, "alice", "t-home", "I live in Berlin these days.")
    converse(api, "alice", "t-project", "I manage Project Falcon.")
    acme, user = Entity.objects.get(name="Acme Robotics"), Entity.objects.get(name="the user")

    body = detail(api, acme)
    assert [t["thread_id"] for t in body["threads"]] == ["t-job"] and body["thread_count"] == 1
    job = Episode.objects.get(thread__external_id="t-job")
    assert [e["id"] for e in body["episodes"]] == [str(job.pk)] and body["episode_count"] == 1
    assert body["episodes"][0]["summary"] == job.summary and body["episodes"][0]["user_id"] == "alice"

    # The user themself came up in every thread; most recent first.
    body = detail(api, user)
    assert [t["thread_id"] for t in body["threads"]] == ["t-project", "t-home", "t-job"]
    assert [e["thread_id"] for e in body["episodes"]] == ["t-project", "t-home", "t-job"]
    assert body["thread_count"] == body["episode_count"] == 3


def test_an_entity_that_came_up_nowhere_lists_nothing(api, tenant):
    now = timezone.now()
    lonely = Entity.objects.create(
        tenant=tenant,
        scope="org",
        name="Initech",
        aliases=["Initech"],
        alias_keys=["initech"],
        first_seen=now,
        last_seen=now,
    )
    body = detail(api, lonely)
    assert body["threads"] == [] and body["episodes"] == []
    assert body["thread_count"] == 0 and body["episode_count"] == 0


def test_the_lists_are_bounded_and_the_counts_are_whole(api, offline, dispatched, monkeypatch):
    monkeypatch.setattr(entity_selectors, "SOURCES_SHOWN", 2)
    converse(api, "alice", "t-job", "I work at Acme Robotics.")
    converse(api, "alice", "t-home", "I live in Berlin these days.")
    converse(api, "alice", "t-project", "I manage Project Falcon.")
    body = detail(api, Entity.objects.get(name="the user"))
    assert [t["thread_id"] for t in body["threads"]] == ["t-project", "t-home"] and body["thread_count"] == 3
    assert len(body["episodes"]) == 2 and body["episode_count"] == 3


def test_a_shared_entity_shows_each_key_only_the_threads_it_may_read(api, make_api, tenant, offline, dispatched):
    now = timezone.now()
    acme = Entity.objects.create(
        tenant=tenant,
        scope="org",
        name="Acme Robotics",
        type="company",
        aliases=["Acme Robotics"],
        alias_keys=["acme robotics"],
        first_seen=now,
        last_seen=now,
    )
    converse(api, "alice", "alice-secret-thread", "I work at Acme Robotics.")
    converse(api, "bob", "bob-thread", "I work at Acme Robotics.")
    assert Fact.objects.filter(mentions__entity=acme).count() == 2  # both resolved to the org entity

    everyone = detail(api, acme)
    assert {t["thread_id"] for t in everyone["threads"]} == {"alice-secret-thread", "bob-thread"}

    bobs_agent = make_api(tenant, users=["bob"])
    seen = detail(bobs_agent, acme)
    assert [t["thread_id"] for t in seen["threads"]] == ["bob-thread"] and seen["thread_count"] == 1
    assert [e["user_id"] for e in seen["episodes"]] == ["bob"] and seen["episode_count"] == 1
    assert "alice-secret-thread" not in str(seen)


def test_another_tenant_or_user_gets_404_for_the_entity(api, make_api, tenant, other_tenant, offline, dispatched):
    converse(api, "alice", "t1", "I work at Acme Robotics.")
    acme = Entity.objects.get(name="Acme Robotics")
    assert make_api(other_tenant).get(f"entities/{acme.pk}").status_code == 404
    assert make_api(tenant, users=["bob"]).get(f"entities/{acme.pk}").status_code == 404


def test_openapi_documents_the_threads_and_episodes(api):
    spec = api.client.get("/api/v1/openapi.json").json()
    detail_schema = spec["components"]["schemas"]["EntityDetailOut"]
    assert {"threads", "thread_count", "episodes", "episode_count"} <= set(detail_schema["properties"])
    assert {"thread_id", "last_message_at"} <= set(spec["components"]["schemas"]["EntityThreadOut"]["properties"])
    assert {"id", "started_at", "summary"} <= set(spec["components"]["schemas"]["EntityEpisodeOut"]["properties"])


def test_the_detail_runs_a_fixed_number_of_statements(api, offline, dispatched):
    """No N+1: the statements of GET /entities/{id} do not grow with its facts, threads or episodes."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    converse(api, "alice", "t-job", "I work at Acme Robotics.")
    user = Entity.objects.get(name="the user")
    with CaptureQueriesContext(connection) as few:
        detail(api, user)
    converse(api, "alice", "t-home", "I live in Berlin these days.")
    converse(api, "alice", "t-project", "I manage Project Falcon.")
    with CaptureQueriesContext(connection) as more:
        body = detail(api, user)
    assert body["thread_count"] == 3 and len(body["facts"]) == 3
    assert len(more.captured_queries) == len(few.captured_queries)
