"""Decay and staleness: the Python form (API, fact detail) and the SQL form (ranking, queues) agree,
and the fact-detail page explains a score with the numbers that produced it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from memory_admin import scoring
from memory_admin.models import Fact
from memory_admin.services.facts import content_hash


def _fact(memory_user, content, *, created_days, valid_days, read_days=None, reads=0, **fields):
    now = timezone.now()
    fact = Fact.objects.create(
        id=uuid.uuid4(),
        tenant_id=memory_user.tenant_id,
        memory_user=memory_user,
        scope="user",
        content=content,
        content_hash=content_hash(content),
        confidence=0.9,
        source="user_stated",
        valid_from=now,
        **fields,
    )
    Fact.objects.filter(pk=fact.pk).update(
        created_at=now - timedelta(days=created_days),
        valid_from=now - timedelta(days=valid_days),
        last_accessed_at=None if read_days is None else now - timedelta(days=read_days),
        access_count=reads,
    )
    return fact


@pytest.fixture
def facts(db):
    from memory_admin.models import MemoryUser
    from memory_admin.services.tenants import tenant_create

    user = MemoryUser.objects.create(tenant=tenant_create(slug="scoring"), external_id="sam")
    return [
        _fact(user, "imported today, true since long ago", created_days=0, valid_days=400),
        _fact(user, "old and never read", created_days=200, valid_days=200, kind="inference"),
        _fact(user, "old, read last week", created_days=300, valid_days=300, read_days=7, reads=9),
        _fact(user, "contested and old", created_days=500, valid_days=500, contested=True),
        _fact(user, "pinned and old", created_days=500, valid_days=500, pinned=True),
    ]


def test_python_and_sql_forms_agree(facts):
    rows = scoring.annotate_scores(Fact.objects.filter(pk__in=[f.pk for f in facts]))
    assert len(rows) == len(facts)
    for row in rows:
        assert scoring.effective_confidence(row) == pytest.approx(row.eff_conf, abs=1e-4), row.content
        assert scoring.staleness(row) == pytest.approx(row.stale_score, abs=1e-3), row.content


def test_a_fact_stored_today_has_not_decayed_whatever_its_valid_from(facts):
    fresh = Fact.objects.get(pk=facts[0].pk)
    terms = scoring.terms(fresh)
    assert terms["days_since_access"] < 0.01 and terms["effective"] == pytest.approx(0.9, abs=1e-3)
    assert terms["age_days"] == pytest.approx(400, abs=0.01)


def test_fact_detail_shows_the_terms_of_the_score_it_reports(facts, client):
    from django.contrib.auth import get_user_model

    from memory_admin.models import Membership

    fact = Fact.objects.get(pk=facts[0].pk)
    account = get_user_model().objects.create_user("op-scoring", password="pw-123456789")
    Membership.objects.create(user=account, tenant_id=fact.tenant_id, role="operator")
    client.force_login(account)
    page = client.get(reverse("fact_detail", args=["scoring", fact.pk])).content.decode()
    assert "× 0.0 days since last read" in page  # stored today, never read: no decay yet


def test_the_sql_form_of_effective_confidence_is_pythons_to_the_bit(facts):
    """Evaluated at the same instant, Postgres's effective confidence is the very float Python computes:
    the same float8 operations in the same order (no numeric arithmetic on the way), for read counts from
    none to a million, every kind, pinned or not."""
    from django.db import connection

    fact = facts[2]
    now = timezone.now()
    sql = f"SELECT {scoring.effective_confidence_sql(now='%s::timestamptz')} FROM memory_admin_fact WHERE id = %s"
    for kind in scoring.DECAY_LAMBDA:
        for reads in (0, 1, 2, 3, 7, 9, 13, 42, 99, 250, 1000, 10**6):
            for pinned in (False, True):
                Fact.objects.filter(pk=fact.pk).update(access_count=reads, kind=kind, pinned=pinned)
                stored = Fact.objects.get(pk=fact.pk)
                with connection.cursor() as cursor:
                    cursor.execute(sql, [now, fact.pk])
                    (in_sql,) = cursor.fetchone()
                assert in_sql == scoring.effective_confidence(stored, now), (kind, reads, pinned)
