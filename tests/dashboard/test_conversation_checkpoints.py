"""The conversation page shows the thread's LangGraph checkpoints (MemoryAdminSaver's), newest first."""

from __future__ import annotations

import base64

from django.urls import reverse

from memory_admin.models import Thread

B64 = base64.b64encode(b"\x81\xa1v\x01").decode()


def put_checkpoint(api, checkpoint_id, parent="", step=0, source="loop"):
    body = {
        "user_id": "alice",
        "thread_id": "agent-run-7",
        "checkpoint_id": checkpoint_id,
        "parent_checkpoint_id": parent,
        "checkpoint": {"type": "msgpack", "data": B64},
        "metadata": {"step": step, "source": source},
        "metadata_blob": {"type": "msgpack", "data": B64},
    }
    assert api.post("checkpoints", body).status_code == 200


def test_a_thread_lists_its_checkpoints_with_step_source_and_pending_writes(api, operator, tenant, make_staff):
    put_checkpoint(api, "1ef-aaa1", step=-1, source="input")
    put_checkpoint(api, "1ef-aaa2", parent="1ef-aaa1", step=0)
    write = {"idx": 0, "channel": "notes", "value": {"type": "msgpack", "data": B64}}
    body = {
        "user_id": "alice",
        "thread_id": "agent-run-7",
        "checkpoint_id": "1ef-aaa2",
        "task_id": "t",
        "writes": [write],
    }
    assert api.post("checkpoints/writes", body).status_code == 200
    thread = Thread.objects.get(external_id="agent-run-7")

    listing = operator.get(reverse("conversations", args=[tenant.slug])).content.decode()
    assert "agent-run-7" in listing  # a checkpointed thread is a conversation like any other
    page = operator.get(reverse("conversation", args=[tenant.slug, thread.pk])).content.decode()
    section = page.split('id="checkpoints-h"')[1].split("</section>")[0]
    rows = section.split("<tbody>")[1].split("</tr>")
    assert "1ef-aaa2" in rows[0] and "1ef-aaa1" in rows[1]  # newest first
    cells = [c.split(">", 1)[1].split("<")[0] for c in rows[0].split("<td")[2:]]
    assert cells[:4] == ["(root)", "0", "loop", "1"]  # namespace, step, source, pending writes
    assert 'href="#cp-1ef-aaa1"' in rows[0]  # the parent, linked


def test_another_tenants_operator_sees_no_such_conversation(api, other_tenant, make_staff):
    put_checkpoint(api, "1ef-bbb1")
    thread = Thread.objects.get(external_id="agent-run-7")
    outsider = make_staff(other_tenant, "operator")
    assert outsider.get(reverse("conversation", args=[other_tenant.slug, thread.pk])).status_code == 404
