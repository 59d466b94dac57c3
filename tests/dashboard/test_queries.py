"""The busy pages run a bounded number of SQL queries, whatever the number of rows."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from memory_admin.models import AuditEvent, Episode, ExtractionBatch, Fact, MemoryUser, Message, Skill, Thread

ROWS = 30


@pytest.fixture
def busy(tenant, memory_user, make_fact, make_contradiction, make_block):
    from django.utils import timezone

    for i in range(ROWS):
        other = MemoryUser.objects.create(tenant=tenant, external_id=f"user-{i}")
        make_fact(other, f"user {i} likes number {i}")
        make_fact(memory_user, f"Alice fact number {i}", key=f"k.{i}")
        make_contradiction(memory_user, f"Tea {i}", f"Coffee {i}")
        make_fact(memory_user, f"Quarantined {i}", status="quarantined")
        make_block(tenant, memory_user, fingerprint=f"fp{i % 3}")
        AuditEvent.objects.create(
            tenant=tenant,
            memory_user=memory_user,
            actor_type="agent",
            actor="agent:x",
            action="fact.write",
            outcome="created",
            target_type="fact",
            target_id="",
        )
        Skill.objects.create(tenant=tenant, path=f"area{i % 4}/skill{i}.md", content="x")
    thread = Thread.objects.create(tenant=tenant, memory_user=memory_user, external_id="t")
    now = timezone.now()
    for i in range(ROWS):
        batch = ExtractionBatch.objects.create(tenant=tenant, memory_user=memory_user, thread=thread, status="failed")
        Episode.objects.create(tenant=tenant, memory_user=memory_user, thread=thread, started_at=now, ended_at=now)
        message = Message.objects.create(
            tenant=tenant,
            memory_user=memory_user,
            thread=thread,
            role="user",
            content=f"message {i}",
            created_at=now,
            batch=batch,
        )
        make_fact(memory_user, f"From message {i}", message=message, batch=batch)
        Thread.objects.create(tenant=tenant, memory_user=memory_user, external_id=f"t{i}")
    memory_user.thread_id = thread.pk
    return memory_user


# Session + user + memberships are 3 queries on every page; the rest is the page's own.
PAGES = [
    ("overview", lambda s, u: reverse("overview", args=[s]), 17),
    ("users", lambda s, u: reverse("users", args=[s]) + "?sort=staleness", 8),
    ("facts", lambda s, u: reverse("user_facts", args=[s, u]), 8),
    ("review", lambda s, u: reverse("review", args=[s]), 8),
    ("quarantine", lambda s, u: reverse("quarantine", args=[s]), 8),
    ("eviction", lambda s, u: reverse("eviction", args=[s]), 8),
    ("pii", lambda s, u: reverse("pii", args=[s]), 9),
    ("audit", lambda s, u: reverse("audit", args=[s]), 8),
    ("activity", lambda s, u: reverse("user_activity", args=[s, u]), 9),
    ("episodes", lambda s, u: reverse("user_episodes", args=[s, u]), 9),
    ("batches", lambda s, u: reverse("batches", args=[s]), 8),
    ("skills", lambda s, u: reverse("skills", args=[s]), 6),
    ("keys", lambda s, u: reverse("keys", args=[s]), 7),
    ("asof", lambda s, u: reverse("user_asof", args=[s, u]) + "?date=2999-01-01", 8),
    ("notebook", lambda s, u: reverse("user_notebook", args=[s, u]), 8),
    ("conversations", lambda s, u: reverse("conversations", args=[s]), 6),
    ("conversation", lambda s, u: reverse("conversation", args=[s, Thread.objects.get(external_id="t").pk]), 9),
    # search: candidate users (1, +1 for a sampled count), their users, one fact_search_users statement
    # and its facts: the same for 1 or SEARCH_USERS (10) users.
    ("search", lambda s, u: reverse("search", args=[s]) + "?q=Alice+fact+number", 9),
    (
        "playground",
        lambda s, u: reverse("playground", args=[s]) + "?user=alice&task=tea&budget_a=200&budget_b=900",
        24,
    ),  # two context_block calls (about 9 queries each)
    ("fact_detail", lambda s, u: reverse("fact_detail", args=[s, Fact.objects.filter(key="k.1").get().pk]), 14),
    ("audit_export", lambda s, u: reverse("audit_export", args=[s]), 6),
]


@pytest.mark.parametrize(("name", "url", "limit"), PAGES, ids=[p[0] for p in PAGES])
def test_query_count_is_bounded(admin, tenant, busy, name, url, limit, django_assert_max_num_queries):
    target = url(tenant.slug, busy.pk)
    admin.get(target)  # warm caches (settings rows, content types) so the count is the steady state
    started = time.perf_counter()
    with django_assert_max_num_queries(limit):
        r = admin.get(target)
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert r.status_code == 200
    print(f"{name}: {elapsed_ms:.0f} ms")
