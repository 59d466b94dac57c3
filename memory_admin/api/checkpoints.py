"""LangGraph checkpoints (services/checkpoints.py): what `memory_admin_client.checkpoint.MemoryAdminSaver`
stores. Serialised values travel as base64 with the serde's type name; the server never decodes them."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any

from ninja import Query, Router, Schema
from pydantic import AfterValidator, Field, StrictInt

from memory_admin.api.schemas import Identifier, Metadata, StrictIn, UserId, text
from memory_admin.services.checkpoints import (
    Blob,
    CheckpointDraft,
    CheckpointQuery,
    Found,
    WriteDraft,
    checkpoint_put,
    checkpoint_thread_delete,
    checkpoint_writes_put,
    checkpoints_found,
)

router = Router(tags=["langgraph"])


def _base64(value: str) -> str:
    try:
        base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError("not base64") from exc
    return value


CheckpointNs = text(max_length=500)
CheckpointId = text(min_length=1, max_length=100)
Base64 = Annotated[str, Field(max_length=8 * 1024 * 1024), AfterValidator(_base64)]


class BlobIn(StrictIn):
    type: text(min_length=1, max_length=50)
    data: Base64

    def blob(self) -> Blob:
        return Blob(self.type, base64.b64decode(self.data))


class CheckpointIn(StrictIn):
    user_id: UserId
    thread_id: Identifier
    checkpoint_ns: CheckpointNs = ""
    checkpoint_id: CheckpointId
    parent_checkpoint_id: text(max_length=100) = ""
    checkpoint: BlobIn
    metadata: Metadata = Field(default={}, description="The metadata as JSON, for `filter` in queries.")
    metadata_blob: BlobIn
    keep_last: Annotated[StrictInt, Field(ge=1, le=100_000)] | None = Field(
        default=None, description="Keep at most this many checkpoints per thread and namespace."
    )


class CheckpointPutOut(Schema):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    pruned: int


class WriteIn(StrictIn):
    idx: Annotated[StrictInt, Field(ge=-1000, le=1_000_000)]
    channel: text(min_length=1, max_length=200)
    value: BlobIn


class WritesIn(StrictIn):
    user_id: UserId
    thread_id: Identifier
    checkpoint_ns: CheckpointNs = ""
    checkpoint_id: CheckpointId
    task_id: text(min_length=1, max_length=200)
    task_path: text(max_length=500) = ""
    writes: Annotated[list[WriteIn], Field(max_length=10_000)]


class WritesOut(Schema):
    stored: int


class CheckpointQueryIn(StrictIn):
    user_id: UserId | None = None
    thread_id: Identifier | None = None
    checkpoint_ns: CheckpointNs | None = None
    checkpoint_id: CheckpointId | None = None
    before: CheckpointId | None = Field(default=None, description="Only checkpoints older than this id.")
    filter: Metadata | None = Field(default=None, description="Metadata the checkpoints hold (JSON containment).")
    limit: Annotated[StrictInt, Field(ge=1, le=1000)] | None = None


class BlobOut(Schema):
    type: str
    data: str


class PendingWriteOut(Schema):
    task_id: str
    task_path: str
    channel: str
    value: BlobOut


class CheckpointOut(Schema):
    user_id: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: BlobOut
    metadata_blob: BlobOut
    created_at: datetime
    pending_writes: list[PendingWriteOut]

    @classmethod
    def of(cls, found: Found) -> CheckpointOut:
        c = found.checkpoint
        return cls(
            user_id=c.memory_user.external_id,
            thread_id=c.thread.external_id,
            checkpoint_ns=c.checkpoint_ns,
            checkpoint_id=c.checkpoint_id,
            parent_checkpoint_id=c.parent_checkpoint_id or None,
            checkpoint=_blob(c.type, c.data),
            metadata_blob=_blob(c.metadata_type, c.metadata_data),
            created_at=c.created_at,
            pending_writes=[
                PendingWriteOut(
                    task_id=w.task_id, task_path=w.task_path, channel=w.channel, value=_blob(w.type, w.data)
                )
                for w in found.writes
            ],
        )


def _blob(kind: str, data: Any) -> BlobOut:
    return BlobOut(type=kind, data=base64.b64encode(bytes(data)).decode())


class CheckpointPage(Schema):
    items: list[CheckpointOut]


class ThreadRef(Schema):
    user_id: UserId | None = None
    thread_id: Identifier


class DeletedOut(Schema):
    deleted: int


@router.post("/checkpoints", response=CheckpointPutOut)
def put_checkpoint(request, payload: CheckpointIn):
    """Store a checkpoint of a memory user's thread (the same id again replaces it), then apply retention."""
    draft = CheckpointDraft(
        user_id=payload.user_id,
        thread_id=payload.thread_id,
        checkpoint_ns=payload.checkpoint_ns,
        checkpoint_id=payload.checkpoint_id,
        parent_checkpoint_id=payload.parent_checkpoint_id,
        checkpoint=payload.checkpoint.blob(),
        metadata=payload.metadata,
        metadata_blob=payload.metadata_blob.blob(),
    )
    saved = checkpoint_put(principal=request.principal, draft=draft, keep_last=payload.keep_last)
    return {
        "thread_id": payload.thread_id,
        "checkpoint_ns": saved.checkpoint.checkpoint_ns,
        "checkpoint_id": saved.checkpoint.checkpoint_id,
        "pruned": saved.pruned,
    }


@router.post("/checkpoints/writes", response=WritesOut)
def put_checkpoint_writes(request, payload: WritesIn):
    """Store a task's pending writes against a checkpoint of the thread (which may still be on its way)."""
    stored = checkpoint_writes_put(
        principal=request.principal,
        user_id=payload.user_id,
        thread_id=payload.thread_id,
        checkpoint_ns=payload.checkpoint_ns,
        checkpoint_id=payload.checkpoint_id,
        task_id=payload.task_id,
        task_path=payload.task_path,
        writes=[WriteDraft(w.idx, w.channel, w.value.blob()) for w in payload.writes],
    )
    return {"stored": stored}


@router.post("/checkpoints/query", response=CheckpointPage)
def query_checkpoints(request, payload: CheckpointQueryIn):
    """Checkpoints newest first, with their pending writes: by user, thread, namespace, id, `before` an id,
    metadata `filter`; `limit` caps the page."""
    query = CheckpointQuery(**payload.dict())
    return {"items": [CheckpointOut.of(c) for c in checkpoints_found(principal=request.principal, query=query)]}


@router.delete("/checkpoints", response=DeletedOut)
def delete_checkpoints(request, ref: Query[ThreadRef]):
    """Delete every checkpoint of a thread (its messages stay): of the user's thread with that id, or without
    `user_id` of every thread with that id the key reaches."""
    return {
        "deleted": checkpoint_thread_delete(principal=request.principal, user_id=ref.user_id, thread_id=ref.thread_id)
    }
