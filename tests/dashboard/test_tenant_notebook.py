"""The tenant-wide notebook (memory_user NULL): the user-notebook editor with the same conflict-safe
save and revisions; admins and operators edit, auditors and members read."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory_admin.models import AuditEvent, MemoryUser, Notebook
from memory_admin.selectors.access import Principal
from memory_admin.services.notebook import notebook_save


def _url(tenant, name="tenant_notebook"):
    return reverse(name, args=[tenant.slug])


def _tenant_notebook(tenant) -> Notebook:
    return Notebook.objects.get(tenant=tenant, memory_user__isnull=True)


def _save(tenant, content: str, base: int) -> Notebook:
    return notebook_save(principal=Principal.system(tenant.pk), memory_user=None, content=content, base_version=base)


@pytest.mark.parametrize("role", ["admin", "operator"])
def test_admins_and_operators_save_it_and_it_is_audited(tenant, make_staff, memory_user, role):
    client = make_staff(tenant, role)
    r = client.post(
        _url(tenant), {"content": "# Team\n- Standups are at 09:30 CET\n", "base_version": "0", "note": "first"}
    )
    assert r.status_code == 302 and r["Location"] == _url(tenant) + "?saved=1"
    notebook = _tenant_notebook(tenant)
    assert notebook.version == 1 and "09:30 CET" in notebook.content
    assert not Notebook.objects.filter(memory_user=memory_user).exists()  # no user notebook touched
    event = AuditEvent.objects.get(action="notebook.save")
    assert event.actor == f"staff:{client.username}" and event.memory_user_id is None
    page = client.get(r["Location"]).content.decode()
    assert "Saved: version 1." in page and 'id="notebook-form"' in page and "Standups are at 09:30 CET" in page


def test_a_stale_save_shows_the_conflict_and_overwrites_nothing(tenant, make_staff):
    first, second = make_staff(tenant, "operator"), make_staff(tenant, "admin")
    first.post(_url(tenant), {"content": "- Release freeze on Fridays\n", "base_version": "0"})
    r = second.post(_url(tenant), {"content": "- Deploys any day of the week\n", "base_version": "0"})
    assert r.status_code == 409
    body = r.content.decode()
    assert f"Not saved: staff:{first.username} saved a newer version first" in body
    assert "Deploys any day of the week" in body
    notebook = _tenant_notebook(tenant)
    assert notebook.version == 1 and "Release freeze" in notebook.content
    # Saving again on top of the version now shown is a deliberate overwrite.
    second.post(_url(tenant), {"content": "- Deploys any day of the week\n", "base_version": "1"})
    assert _tenant_notebook(tenant).version == 2


@pytest.mark.parametrize("role", ["auditor", "member"])
def test_auditors_and_members_read_it_but_cannot_change_it(tenant, make_staff, memory_user, role):
    _save(tenant, "- The office closes at 18:00\n", 0)
    _save(tenant, "- The office closes at 19:00\n", 1)
    client = make_staff(tenant, role, memory_user if role == "member" else None)
    page = client.get(_url(tenant))
    assert page.status_code == 200
    body = page.content.decode()
    assert "The office closes at 19:00" in body and "v2" in body
    assert 'id="notebook-form"' not in body and "Restore" not in body
    r = client.post(_url(tenant), {"content": "- Hijacked\n", "base_version": "2"})
    assert r.status_code == 403
    assert (
        client.post(_url(tenant, "tenant_notebook_restore"), {"version": "1", "base_version": "2"}).status_code == 403
    )
    notebook = _tenant_notebook(tenant)
    assert notebook.version == 2 and "19:00" in notebook.content


def test_members_still_edit_their_own_notebook(tenant, make_staff, memory_user):
    member = make_staff(tenant, "member", memory_user)
    r = member.post(
        reverse("user_notebook", args=[tenant.slug, memory_user.pk]),
        {"content": "- I prefer short answers\n", "base_version": "0"},
    )
    assert r.status_code == 302
    assert Notebook.objects.get(memory_user=memory_user).version == 1
    assert _tenant_notebook(tenant).version == 0  # an empty one comes with every tenant


def test_revisions_diff_and_restore(tenant, operator):
    for base, text in enumerate(["- one line here\n", "- two lines here\n"]):
        operator.post(_url(tenant), {"content": text, "base_version": str(base)})
    diff = operator.get(_url(tenant), {"diff": "2"}).content.decode()
    assert "Changes in version 2" in diff and "one line here" in diff and "two lines here" in diff
    r = operator.post(_url(tenant, "tenant_notebook_restore"), {"version": "1", "base_version": "2"})
    assert r.status_code == 302 and r["Location"] == _url(tenant) + "?saved=1"
    notebook = _tenant_notebook(tenant)
    assert notebook.version == 3 and notebook.content == "- one line here\n"
    assert notebook.revisions.get(version=3).note == "restored version 1"
    # Restoring from a page that is out of date is a conflict, not an overwrite.
    assert (
        operator.post(_url(tenant, "tenant_notebook_restore"), {"version": "2", "base_version": "1"}).status_code == 409
    )
    assert _tenant_notebook(tenant).version == 3


def test_preview_without_javascript_saves_nothing(tenant, operator):
    r = operator.post(_url(tenant), {"content": "# Draft\n- *not saved*", "base_version": "0", "preview": "1"})
    assert r.status_code == 200 and "<em>not saved</em>" in r.content.decode()
    notebook = _tenant_notebook(tenant)
    assert notebook.version == 0 and not notebook.revisions.exists()


def test_another_tenant_is_404_and_its_notebook_is_never_shown(tenant, other_tenant, make_staff):
    _save(other_tenant, "- Other tenant secret plan\n", 0)
    admin = make_staff(tenant, "admin")
    assert admin.get(_url(other_tenant)).status_code == 404
    assert admin.post(_url(other_tenant), {"content": "- x\n", "base_version": "1"}).status_code == 404
    assert "Other tenant secret plan" not in admin.get(_url(tenant)).content.decode()
    assert _tenant_notebook(other_tenant).version == 1


def test_a_user_notebook_is_not_the_tenant_notebook(tenant, operator, memory_user):
    notebook_save(
        principal=Principal.system(tenant.pk), memory_user=memory_user, content="- Alice private note\n", base_version=0
    )
    body = operator.get(_url(tenant)).content.decode()
    assert "Alice private note" not in body and "No revisions yet." in body
    assert _tenant_notebook(tenant).version == 0 and MemoryUser.objects.count() == 1


def test_content_is_escaped(tenant, operator):
    _save(tenant, '- <script>alert("nb")</script> <img src=x onerror=alert(1)>\n', 0)
    body = operator.get(_url(tenant)).content.decode()
    assert "<script>alert" not in body and "onerror=alert(1)>" not in body
