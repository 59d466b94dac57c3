"""Messages, threads, episodes and extraction batches."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field

from memory_admin.api.schemas.common import Identifier, Limit, StrictIn, Text, Timestamp, text

# --- Messages, threads, episodes, extraction batches -----------------------------------------------

Role = Literal["user", "assistant", "system", "tool"]
Outcome = Literal["success", "failure", "unknown"]


class MessageItemIn(StrictIn):
    role: Role
    content: Text
    created_at: Timestamp | None = None


class MessagesIn(StrictIn):
    thread_id: Identifier
    messages: Annotated[list[MessageItemIn], Field(min_length=1)]


class MessagesOut(Schema):
    thread_id: str
    accepted: int
    message_ids: list[int]
    pending: int
    skipped: list[dict]
    redacted: list[dict]
    extraction: str
    extract_due_at: datetime | None


class CloseIn(StrictIn):
    outcome: Outcome | None = None


class CloseOut(Schema):
    thread_id: str
    closed_at: datetime
    extraction: str
    episode: str


class EpisodeFactOut(Schema):
    id: UUID
    content: str
    category: str
    status: str


class EpisodeOut(Schema):
    id: UUID
    user_id: str
    thread_id: str | None
    started_at: datetime
    ended_at: datetime
    summary: str
    outcome: str
    summarizer: str
    message_count: int
    fact_count: int
    created_at: datetime


class EpisodeMessageOut(Schema):
    id: int
    role: str
    content: str
    created_at: datetime
    status: str


class EpisodeDetailOut(EpisodeOut):
    facts: list[EpisodeFactOut]
    messages: list[EpisodeMessageOut]


class EpisodePage(Schema):
    items: list[EpisodeOut]
    next_cursor: str | None


# An offset this API returned (digits); bounded so that it stays a valid SQL OFFSET.
EpisodeCursor = text(max_length=9, pattern=r"^[0-9]+$")


class EpisodeFilters(Schema):
    since: Timestamp | None = None  # episodes that ended at or after
    until: Timestamp | None = None  # episodes that started before
    thread_id: Identifier | None = None
    outcome: Outcome | None = None
    cursor: EpisodeCursor | None = None
    limit: Limit = 50


class BatchOut(Schema):
    id: int
    user_id: str
    thread_id: str
    status: str
    attempts: int
    error: str
    extractor: str
    model: str
    message_count: int
    fact_count: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    created_at: datetime
    finished_at: datetime | None


BatchId = Annotated[int, Field(ge=1, le=2**63 - 1)]
BatchStatus = Literal["pending", "running", "done", "failed"]
