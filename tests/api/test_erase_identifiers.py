"""Erase leaves nothing that names the user (issue 8 item 12): after `DELETE /users/{id}` no table
holds the user's id, its thread ids, task refs, fact keys, skill paths, metadata, review reasons,
PII previews or batch errors, checked on a `pg_dump` of the whole database; keys restricted to the
user stay restricted."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from memory_admin.models import ApiKey, ExtractionBatch, MemoryUser, Thread
from memory_admin.selectors.access import Principal
from memory_admin.services.staff import staff_create
from memory_admin.services.tenant_admin import dashboard_key_create
from tests.services.test_planted_secrets import pg_dump_text

MARK = "quokka7731"
PASSWORD = "correct horse battery"
USER = f"erin-{MARK}"


@pytest.mark.django_db(transaction=True)
def test_erase_leaves_no_identifier_or_content_in_any_table(tenant, api, admin_api, make_api):
    uid = USER
    assert (
        api.post(
            f"users/{uid}/facts",
            {
                "content": f"Erin's codename is {MARK}",
                "source": "user_stated",
                "key": f"codename.{MARK}",
                "task_id": f"task-{MARK}",
                "metadata": {"ref": f"ticket-{MARK}"},
            },
        ).status_code
        == 201
    )
    # Same key, close confidence: a contradiction for review, with its reason.
    api.post(
        f"users/{uid}/facts",
        {
            "content": f"Erin's codename is not {MARK} but heron",
            "key": f"codename.{MARK}",
            "source": "agent_inferred",
            "confidence": 0.95,
        },
    )
    blocked = api.post(
        f"users/{uid}/facts", {"content": f"{MARK}: write to erin.{MARK}@example.com", "source": "user_stated"}
    )
    assert blocked.status_code == 422
    assert api.put(f"users/{uid}/notebook", {"content": f"# Erin\n- loves {MARK}\n", "version": 0}).status_code == 200
    assert api.put(f"skills/notes/{MARK}.md", {"content": f"how Erin likes {MARK}", "user_id": uid}).status_code == 200
    posted = api.post(
        f"users/{uid}/messages",
        {"thread_id": f"thread-{MARK}", "messages": [{"role": "user", "content": f"call me {MARK}"}]},
    )
    assert posted.status_code == 202
    user = MemoryUser.objects.get(external_id=uid)
    thread = Thread.objects.get(memory_user=user)
    ExtractionBatch.objects.create(
        tenant=tenant, memory_user=user, thread=thread, status="failed", error=f"model echoed: call me {MARK}"
    )
    # Erin signs in to the dashboard as a member and edits her own notebook.
    staff_create(
        tenant_slug=tenant.slug, username=f"erin.{MARK}", role="member", memory_user_external_id=uid, password=PASSWORD
    )
    member = Client()
    assert member.post("/accounts/login/", {"username": f"erin.{MARK}", "password": PASSWORD}).status_code == 302
    saved = member.post(
        reverse("user_notebook", args=[tenant.slug, user.pk]),
        {"content": f"# Erin\n- loves {MARK} a lot\n", "base_version": 1},
    )
    assert saved.status_code == 302, saved.content
    key, raw = dashboard_key_create(
        principal=Principal.system(tenant.pk), agent_name="erin's agent", allowed_user_ids=[uid]
    )
    assert MARK in pg_dump_text()

    response = admin_api.delete(f"users/{uid}")
    assert response.status_code == 200, response.content
    counts = response.json()["counts"]
    assert counts["facts"] >= 2 and counts["threads"] == 1 and counts["skills"] == 1 and counts["api_keys"] == 1
    assert counts["accounts"] == 1

    dump = pg_dump_text()
    assert MARK not in dump.lower()
    # The key made for Erin is still limited to her (now erased) user: it reaches no one else.
    key.refresh_from_db()
    assert key.allowed_user_ids and uid not in key.allowed_user_ids
    MemoryUser.objects.create(tenant=tenant, external_id="bob")
    assert api.post("users/bob/facts", {"content": "Bob likes tea", "source": "user_stated"}).status_code == 201
    erin_key = type(api)(raw)
    assert erin_key.get("users/bob/facts").status_code == 404
    assert erin_key.get(f"users/{uid}/facts").status_code == 404
    assert erin_key.get("users/" + key.allowed_user_ids[0] + "/facts").status_code == 404
    assert ApiKey.objects.filter(allowed_user_ids__contains=[uid]).count() == 0
    # Erin's dashboard account is gone with her memory: no sign-in, no session.
    assert member.get(reverse("user_notebook", args=[tenant.slug, user.pk])).status_code == 302
    assert Client().post("/accounts/login/", {"username": f"erin.{MARK}", "password": PASSWORD}).status_code == 200


def test_a_new_user_with_the_erased_id_starts_empty(api, admin_api):
    hello = {"thread_id": "t-1", "messages": [{"role": "user", "content": "hello"}]}
    assert api.post(f"users/{USER}/messages", hello).status_code == 202
    assert api.put(f"skills/notes/{MARK}.md", {"content": "x", "user_id": USER}).status_code == 200
    assert admin_api.delete(f"users/{USER}").status_code == 200
    # The same thread id and skill path are free for the new user of that id.
    assert api.post(f"users/{USER}/messages", hello).status_code == 202
    assert api.put(f"skills/notes/{MARK}.md", {"content": "y", "user_id": USER}).json()["version"] == 1
