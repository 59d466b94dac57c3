"""Contradiction resolution (each action, and two reviewers at once) and erase."""

from __future__ import annotations

import pytest

from memory_admin.errors import AlreadyResolved, Forbidden
from memory_admin.models import AuditEvent, Contradiction, Fact, MemoryUser, Message, Notebook, Thread
from memory_admin.selectors.access import Principal
from memory_admin.services.contradictions import contradiction_resolve
from tests.services.test_planted_secrets import pg_dump_text


def contested(api, user="alice"):
    a = api.post(f"users/{user}/facts", {"content": "Alice prefers tea in the morning", "confidence": 0.8}).json()
    b = api.post(f"users/{user}/facts", {"content": "Alice prefers coffee in the morning", "confidence": 0.85}).json()
    assert b["outcome"] == "queued_for_review"
    return a["fact"]["id"], b["fact"]["id"], b["contradiction_id"]


def operator(tenant, name="op1"):
    return Principal(tenant_id=tenant.pk, role="operator", actor=f"staff:{name}", actor_type="staff")


@pytest.mark.parametrize(
    ("action", "a_status", "b_status"),
    [
        ("keep_a", "active", "superseded"),
        ("keep_b", "superseded", "active"),
        ("both_true", "active", "active"),
        ("dismiss", "active", "active"),
    ],
)
def test_each_resolution(api, tenant, action, a_status, b_status):
    a, b, item_id = contested(api)
    item = contradiction_resolve(principal=operator(tenant), contradiction_id=item_id, action=action, note="checked")
    assert item.status == ("dismissed" if action == "dismiss" else "resolved")
    fa, fb = Fact.objects.get(pk=a), Fact.objects.get(pk=b)
    assert (fa.status, fb.status) == (a_status, b_status)
    assert not fa.contested and not fb.contested
    assert AuditEvent.objects.filter(action="contradiction.resolve", outcome=action).exists()


def test_merge_replaces_both_sides_with_the_edited_text(api, tenant):
    a, b, item_id = contested(api)
    item = contradiction_resolve(
        principal=operator(tenant),
        contradiction_id=item_id,
        action="merge",
        merged_text="Alice prefers tea in the morning, coffee after lunch",
    )
    merged = item.merged_fact
    assert merged.status == "active" and merged.source == "user_correction"
    assert set(Fact.objects.filter(pk__in=[a, b]).values_list("superseded_by_id", flat=True)) == {merged.pk}
    active = [f["content"] for f in api.get("users/alice/facts").json()["items"]]
    assert active == ["Alice prefers tea in the morning, coffee after lunch"]


def test_the_second_reviewer_is_told_and_nothing_is_applied_twice(api, tenant):
    a, b, item_id = contested(api)
    contradiction_resolve(principal=operator(tenant, "first"), contradiction_id=item_id, action="keep_a")
    with pytest.raises(AlreadyResolved) as info:
        contradiction_resolve(principal=operator(tenant, "second"), contradiction_id=item_id, action="keep_b")
    assert "staff:first" in info.value.detail
    assert Fact.objects.get(pk=a).status == "active" and Fact.objects.get(pk=b).status == "superseded"
    assert AuditEvent.objects.filter(action="contradiction.resolve").count() == 1


def test_an_auditor_cannot_resolve(api, tenant):
    _, _, item_id = contested(api)
    auditor = Principal(tenant_id=tenant.pk, role="auditor", actor="staff:aud", actor_type="staff")
    with pytest.raises(Forbidden):
        contradiction_resolve(principal=auditor, contradiction_id=item_id, action="keep_a")
    assert Contradiction.objects.get(pk=item_id).status == "open"


@pytest.mark.django_db(transaction=True)
def test_erase_scrubs_every_piece_of_content_and_frees_the_id(api, admin_api):
    marker = "Zanzibar-Quokka-Lighthouse"
    api.post("users/erin/facts", {"content": f"Erin's codename is {marker}", "source": "user_stated"})
    api.put("users/erin/notebook", {"content": f"# Erin\n- Erin loves {marker}\n", "version": 0})
    user = MemoryUser.objects.get(external_id="erin")
    thread = Thread.objects.create(tenant_id=user.tenant_id, memory_user=user, external_id="t1")
    Message.objects.create(
        tenant_id=user.tenant_id,
        memory_user=user,
        thread=thread,
        role="user",
        content=f"my codename is {marker}",
        created_at=thread.created_at,
    )
    export = admin_api.get("users/erin/export")
    assert export.status_code == 200 and marker in export.content.decode()

    r = admin_api.delete("users/erin")
    assert r.status_code == 200 and r.json()["counts"]["facts"] == 1
    assert marker not in pg_dump_text()
    assert api.get("users/erin/facts").status_code == 404
    assert AuditEvent.objects.filter(action="user.erase").count() == 1
    assert Notebook.objects.get(memory_user=user).content == "[erased]"
    # The id is free again: a new write starts a new, empty user.
    fresh = api.post("users/erin/facts", {"content": "Erin joined the team", "source": "user_stated"})
    assert fresh.status_code == 201
    assert [f["content"] for f in api.get("users/erin/facts").json()["items"]] == ["Erin joined the team"]


def test_audit_events_are_immutable(api):
    api.post("users/alice/facts", {"content": "Alice likes tea", "source": "user_stated"})
    from django.db import DatabaseError, transaction

    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.update(reason="rewritten")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.all().delete()
