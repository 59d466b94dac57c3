"""`manage.py entities_backfill` (issue 13 §5): draws entities for facts stored without them, with a
progress bar, resumable from its marker, idempotent, one tenant at a time when asked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memory_admin.models import Entity, EntityBackfill, FactEntity, MemoryUser, Relation
from memory_admin.selectors.access import Principal
from memory_admin.services.facts import fact_write

pytestmark = pytest.mark.django_db

TEXTS = [
    "Sam: I work at Acme Robotics.",
    "Dana Scully moved to Lisbon.",
    "The user manages Project Falcon.",
    "Kim Wexler met Dana Scully in Lisbon.",
]


def stored(tenant, texts=TEXTS, user="alice") -> list:
    """Facts as they were before entities existed: written, never drawn (no task ran)."""
    owner, _ = MemoryUser.objects.get_or_create(tenant=tenant, external_id=user)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    return [
        fact_write(
            principal=Principal.system(tenant.pk),
            memory_user=owner,
            content=text,
            source="user_stated",
            observed_at=start + timedelta(days=i),
        ).fact
        for i, text in enumerate(texts)
    ]


def backfill(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("entities_backfill", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def graph() -> tuple[int, int, int]:
    return Entity.objects.count(), FactEntity.objects.count(), Relation.objects.count()


def test_it_draws_every_facts_entities_with_a_progress_bar(tenant):
    facts = stored(tenant)
    assert graph() == (0, 0, 0)
    out, err = backfill("--batch-size", "3")
    assert "went through 4 facts" in out
    assert "100%" in err and "4/4" in err  # the progress bar
    assert set(Entity.objects.values_list("name", flat=True)) == {
        "Sam",
        "Acme Robotics",
        "Dana Scully",
        "Lisbon",
        "the user",
        "Project Falcon",
        "Kim Wexler",
    }
    assert all(FactEntity.objects.filter(fact=f).exists() for f in facts)
    assert set(Relation.objects.values_list("subject__name", "type", "object__name")) == {
        ("Sam", "works_at", "Acme Robotics"),
        ("Dana Scully", "moved_to", "Lisbon"),  # a named person's sentence draws a relation too
        ("Dana Scully", "lives_in", "Lisbon"),  # and a move says where they live now (rules-v2)
        ("the user", "manages", "Project Falcon"),
    }
    assert EntityBackfill.objects.get(scope="*").finished_at is not None


def test_an_interrupted_run_resumes_after_its_marker(tenant):
    facts = stored(tenant)
    out, _ = backfill("--batch-size", "1", "--limit", "2", "--no-progress")
    assert "went through 2 facts" in out
    assert [FactEntity.objects.filter(fact=f).exists() for f in facts] == [True, True, False, False]
    marker = EntityBackfill.objects.get(scope="*")
    assert (marker.facts_done, marker.last_fact_id, marker.finished_at) == (2, facts[1].pk, None)
    out, _ = backfill("--no-progress")
    assert "resuming after 2 facts" in out and "went through 2 facts" in out  # only the rest
    assert all(FactEntity.objects.filter(fact=f).exists() for f in facts)
    assert EntityBackfill.objects.get(scope="*").facts_done == 4


def test_a_rerun_creates_nothing_new(tenant):
    stored(tenant)
    backfill("--no-progress")
    before = graph()
    out, _ = backfill("--no-progress")
    assert "went through 0 facts" in out
    backfill("--restart", "--no-progress")  # every fact again: all linked already
    assert graph() == before


def test_one_tenant_at_a_time(tenant, other_tenant):
    stored(tenant)
    stored(other_tenant, ["Dana Scully moved to Lisbon."])
    backfill("--tenant", other_tenant.slug, "--no-progress")
    assert set(Entity.objects.values_list("tenant_id", flat=True)) == {other_tenant.pk}
    with pytest.raises(CommandError):
        backfill("--tenant", "no-such-tenant")
