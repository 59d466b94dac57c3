"""Hostile values in the dashboard (SPEC §11, issue 8 items 1-2): a stored row dated 1500 breaks no
page, and any filter or form field with a NUL, a control character or a malformed number gets a 4xx
page that says what was wrong, with nothing changed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.urls import reverse

from memory_admin.models import Fact, Notebook, Skill


@pytest.fixture
def ancient(memory_user, make_fact):
    """Rows no API would accept any more, written straight into the table."""
    old = datetime(1500, 1, 1, tzinfo=UTC)
    facts = [
        make_fact(memory_user, "Alice kept bees in 1500"),
        make_fact(memory_user, "Alice's tiny confidence"),
        make_fact(memory_user, "Alice in 2199"),
    ]
    Fact.objects.filter(pk=facts[0].pk).update(valid_from=old, created_at=old, last_accessed_at=old)
    Fact.objects.filter(pk=facts[1].pk).update(confidence=1e-300, kind="inference", created_at=old)
    far = datetime(2199, 6, 1, tzinfo=UTC)
    Fact.objects.filter(pk=facts[2].pk).update(valid_from=far, created_at=far, access_count=2**31 - 1)
    return facts


def test_rows_dated_1500_break_no_dashboard_page(tenant, memory_user, ancient, operator, admin):
    slug, uid = tenant.slug, memory_user.pk
    pages = [
        reverse("overview", args=[slug]),
        reverse("users", args=[slug]),
        reverse("user_facts", args=[slug, uid]) + "?status=all",
        reverse("eviction", args=[slug]),
        reverse("user_asof", args=[slug, uid]) + "?date=2024-01-01",
        reverse("lifecycle", args=[slug]),
        *[reverse("fact_detail", args=[slug, f.pk]) for f in ancient],
    ]
    for client in (operator, admin):
        for url in pages:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)
    facts_page = operator.get(reverse("user_facts", args=[slug, uid]) + "?status=all").content.decode()
    assert "Alice kept bees in 1500" in facts_page
    users_page = operator.get(reverse("users", args=[slug])).content.decode()
    assert memory_user.external_id in users_page


@pytest.mark.parametrize("value", ["vim\x00", "vim\x1b[2J", "\x7f"])
@pytest.mark.parametrize(
    ("page", "field"), [("users", "q"), ("audit", "actor"), ("skills", "prefix"), ("review", "user"), ("pii", "agent")]
)
def test_unreadable_filters_get_a_422_page_naming_the_field(tenant, admin, page, field, value):
    response = admin.get(reverse(page, args=[tenant.slug]), {field: value})
    assert response.status_code == 422
    body = response.content.decode()
    assert "Invalid input" in body and f"“{field}”" in body


def test_a_nul_in_a_notebook_save_changes_nothing(tenant, memory_user, operator):
    url = reverse("user_notebook", args=[tenant.slug, memory_user.pk])
    response = operator.post(url, {"content": "# Alice\x00\n- likes tea", "base_version": "0"})
    assert response.status_code == 422
    assert "“content”" in response.content.decode()
    assert not Notebook.objects.filter(memory_user=memory_user).exists()


def test_a_control_character_in_a_correction_reason_changes_nothing(tenant, memory_user, make_fact, operator):
    fact = make_fact(memory_user, "Alice prefers vim")
    response = operator.post(
        reverse("fact_correct", args=[tenant.slug, fact.pk]), {"content": "Alice prefers emacs", "reason": "typo\x07"}
    )
    assert response.status_code == 422
    assert "“reason”" in response.content.decode()
    fact.refresh_from_db()
    assert fact.status == "active" and Fact.objects.filter(memory_user=memory_user).count() == 1


@pytest.mark.parametrize("base_version", ["abc", "-1", "1.5", "²", "9" * 30])
def test_a_malformed_base_version_on_a_skill_save_is_422_with_a_clear_message(tenant, admin, base_version):
    Skill.objects.create(tenant=tenant, path="deploy/kubernetes.md", content="kubectl apply", version=1)
    response = admin.post(
        reverse("skill_edit", args=[tenant.slug]),
        {"path": "deploy/kubernetes.md", "content": "helm upgrade", "base_version": base_version},
    )
    assert response.status_code == 422
    assert "base_version must be a whole number" in response.content.decode()
    assert Skill.objects.get(tenant=tenant, path="deploy/kubernetes.md").content == "kubectl apply"


@pytest.mark.parametrize("base_version", ["abc", "9" * 30])
def test_a_malformed_base_version_on_a_notebook_save_is_422(tenant, memory_user, operator, base_version):
    url = reverse("user_notebook", args=[tenant.slug, memory_user.pk])
    response = operator.post(url, {"content": "# Alice", "base_version": base_version})
    assert response.status_code == 422
    assert "base_version must be a whole number" in response.content.decode()
    assert not Notebook.objects.filter(memory_user=memory_user).exists()


@pytest.mark.parametrize("diff", ["abc", "²", "9" * 30])
def test_a_malformed_diff_version_is_422_not_500(tenant, memory_user, admin, diff):
    skill = Skill.objects.create(tenant=tenant, path="deploy/kubernetes.md", content="kubectl apply", version=1)
    assert admin.get(reverse("skill_edit", args=[tenant.slug]), {"id": skill.pk, "diff": diff}).status_code == 422
    Notebook.objects.create(tenant=tenant, memory_user=memory_user, content="# Alice", version=1)
    url = reverse("user_notebook", args=[tenant.slug, memory_user.pk])
    assert admin.get(url, {"diff": diff}).status_code == 422


@pytest.mark.parametrize("date", ["1500-01-01", "2300-01-01", "0001-01-01T00:00"])
def test_an_implausible_as_of_date_is_explained(tenant, memory_user, operator, date):
    response = operator.get(reverse("user_asof", args=[tenant.slug, memory_user.pk]), {"date": date})
    assert response.status_code == 200
    assert "must lie between 1900-01-01 and 2200-01-01" in response.content.decode()


@pytest.mark.parametrize("page", ["audit", "pii"])
@pytest.mark.parametrize("until", ["9999-12-31", "0001-01-01"])
def test_date_filters_at_the_ends_of_the_calendar_do_not_fail(tenant, admin, page, until):
    response = admin.get(reverse(page, args=[tenant.slug]), {"since": until, "until": until})
    assert response.status_code == 200


@pytest.mark.parametrize("version", ["abc", "9" * 30])
def test_a_malformed_restore_version_is_422(tenant, memory_user, operator, version):
    Notebook.objects.create(tenant=tenant, memory_user=memory_user, content="# Alice", version=1)
    url = reverse("notebook_restore", args=[tenant.slug, memory_user.pk])
    response = operator.post(url, {"version": version, "base_version": "1"})
    assert response.status_code == 422
    assert "version must be a whole number" in response.content.decode()
    assert Notebook.objects.get(memory_user=memory_user).version == 1
