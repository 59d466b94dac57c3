"""The LangGraph routes (store items and checkpoints) on bad input: a clear error with a stable code,
nothing written; and the retention and audit a person relies on."""

from __future__ import annotations

import base64

import pytest

from memory_admin.models import AuditEvent, Checkpoint, CheckpointWrite, StoreItem

B64 = base64.b64encode(b"\x81\xa1v\x01").decode()


def put_item(**overrides):
    item = {"user_id": "alice", "namespace": ["memories", "alice"], "key": "k", "value": {"text": "hi"}}
    return {"items": [{**item, **overrides}]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (put_item(namespace=["memories", "a.b"]), "items.0.namespace.1"),
        (put_item(namespace=[]), "items.0.namespace"),
        (put_item(namespace=["memories", ""]), "items.0.namespace.1"),
        (put_item(value=["not", "an", "object"]), "items.0.value"),
        (put_item(ttl_minutes=0), "items.0.ttl_minutes"),
        (put_item(key="bad\x00key"), "items.0.key"),
        (put_item(colour="red"), "items.0.colour"),
        ({"items": []}, "items"),
    ],
)
def test_a_malformed_store_put_is_422_and_nothing_is_written(api, body, field):
    answer = api.post("store/put", body)
    assert answer.status_code == 422 and answer.json()["field"] == field
    assert StoreItem.objects.count() == 0


def test_an_oversized_store_value_is_413_with_the_limit(api):
    answer = api.post("store/put", put_item(value={"text": "x" * 70_000}))
    assert answer.status_code == 413 and answer.json()["limit"] == 65536
    assert StoreItem.objects.count() == 0


def test_an_unknown_filter_operator_is_422_naming_the_filter(api):
    api.post("store/put", put_item())
    answer = api.post("store/search", {"queries": [{"namespace_prefix": ["memories"], "filter": {"n": {"$in": [1]}}}]})
    assert answer.status_code == 422 and answer.json()["field"] == "filter"
    answer = api.post("store/search", {"queries": [{"filter": {"n": {"$gt": "ten"}}}]})
    assert answer.status_code == 422 and "number" in answer.json()["detail"]


def test_store_writes_are_audited_without_their_values(api):
    assert api.post("store/put", put_item(value={"text": "Alice's locker code is 4411"})).status_code == 200
    assert api.post("store/put", put_item(value=None)).status_code == 200
    events = list(AuditEvent.objects.filter(action__startswith="store.").order_by("pk"))
    assert [(e.action, e.outcome) for e in events] == [("store.put", "created"), ("store.delete", "deleted")]
    assert all("4411" not in str(e.after) + str(e.before) for e in events)


def checkpoint(checkpoint_id, **overrides):
    body = {
        "user_id": "alice",
        "thread_id": "t-1",
        "checkpoint_id": checkpoint_id,
        "checkpoint": {"type": "msgpack", "data": B64},
        "metadata": {"step": int(checkpoint_id[-1]), "source": "loop"},
        "metadata_blob": {"type": "msgpack", "data": B64},
    }
    return {**body, **overrides}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"checkpoint": {"type": "msgpack", "data": "not base64!"}}, "checkpoint.data"),
        ({"thread_id": "a/b"}, "thread_id"),
        ({"keep_last": 0}, "keep_last"),
        ({"metadata": {"note": "nul\x00"}}, "metadata"),
    ],
)
def test_a_malformed_checkpoint_is_422_and_nothing_is_written(api, overrides, field):
    answer = api.post("checkpoints", checkpoint("cp-1", **overrides))
    assert answer.status_code == 422 and answer.json()["field"] == field
    assert Checkpoint.objects.count() == 0


def test_retention_keeps_the_newest_checkpoints_and_drops_the_writes_of_the_others(api, settings):
    settings.CHECKPOINT_KEEP_LAST = 3
    for n in range(1, 6):
        assert api.post("checkpoints", checkpoint(f"cp-{n}")).status_code == 200
        write = {"idx": 0, "channel": "notes", "value": {"type": "msgpack", "data": B64}}
        body = {"user_id": "alice", "thread_id": "t-1", "checkpoint_id": f"cp-{n}", "task_id": "x", "writes": [write]}
        assert api.post("checkpoints/writes", body).json() == {"stored": 1}
    kept = api.post("checkpoints/query", {"user_id": "alice", "thread_id": "t-1"}).json()["items"]
    assert [c["checkpoint_id"] for c in kept] == ["cp-5", "cp-4", "cp-3"]
    assert all(len(c["pending_writes"]) == 1 for c in kept)
    assert set(CheckpointWrite.objects.values_list("checkpoint_id", flat=True)) == {"cp-3", "cp-4", "cp-5"}
    # A client may keep fewer, never more than the server.
    answer = api.post("checkpoints", checkpoint("cp-6", keep_last=1000))
    assert answer.json()["pruned"] == 1
    answer = api.post("checkpoints", checkpoint("cp-7", keep_last=1))
    assert answer.json()["pruned"] == 3 and Checkpoint.objects.count() == 1


def test_filters_and_before_select_checkpoints(api):
    for n in range(1, 5):
        api.post("checkpoints", checkpoint(f"cp-{n}", metadata={"step": n, "source": "loop" if n % 2 else "input"}))
    query = {"user_id": "alice", "thread_id": "t-1"}
    found = api.post("checkpoints/query", {**query, "filter": {"source": "input"}}).json()["items"]
    assert [c["checkpoint_id"] for c in found] == ["cp-4", "cp-2"]
    found = api.post("checkpoints/query", {**query, "before": "cp-3", "limit": 1}).json()["items"]
    assert [c["checkpoint_id"] for c in found] == ["cp-2"]


def test_erasing_a_user_deletes_their_store_items_and_checkpoints(api, admin_api):
    assert api.post("store/put", put_item(value={"text": "Alice's therapist is Dr. Moreau"})).status_code == 200
    assert api.post("checkpoints", checkpoint("cp-1")).status_code == 200
    assert admin_api.delete("users/alice").status_code == 200
    assert StoreItem.objects.count() == 0 and Checkpoint.objects.count() == 0
    ref = {"user_id": "alice", "namespace": ["memories", "alice"], "key": "k"}
    assert api.post("store/get", {"items": [ref]}).json() == {"items": [None]}
