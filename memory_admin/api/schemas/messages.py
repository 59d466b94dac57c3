"""Messages, threads, episodes and extraction batches."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import ConfigDict, Discriminator, Field, Tag

from memory_admin.api.schemas.common import Identifier, Limit, StrictIn, Text, Timestamp, text

# --- Messages, threads, episodes, extraction batches -----------------------------------------------

Role = Literal["user", "assistant", "system", "tool"]
# The roles of the common chat formats, stored as one of ours: OpenAI's `developer` is a system message,
# its legacy `function` a tool's answer; LangChain's message types `human` and `ai` are user and assistant.
_STORED_ROLE = {"developer": "system", "function": "tool", "human": "user", "ai": "assistant"}
Outcome = Literal["success", "failure", "unknown"]
MAX_CONTENT_PARTS = 100
_PartType = text(max_length=50)
_ForeignId = text(max_length=200)


class ContentPartIn(Schema):
    """A part of a message's content in the chat formats' list form: OpenAI's `{"type": "text", "text"}`
    (and `input_text`/`output_text`), Anthropic's text and `tool_result` blocks. Only text is kept; an
    image, audio, file or tool-use part carries none and is passed over."""

    model_config = ConfigDict(extra="allow")
    type: _PartType
    text: Text | None = None
    content: Text | list[ContentPartIn] | None = None  # a tool_result's own content

    def texts(self) -> list[str]:
        if self.text is not None:
            return [self.text]
        if self.type != "tool_result" or self.content is None:
            return []
        if isinstance(self.content, str):
            return [self.content]
        return [t for part in self.content for t in part.texts()]


def _content_form(value: Any) -> str:
    # By the value's shape, so a refusal speaks of the form that was sent (a part's missing `type`), not
    # of every form it is not. The tags are dropped from an error's field (api._NOT_A_FIELD).
    return "list" if isinstance(value, list) else "none" if value is None else "str"


_Content = Annotated[
    Annotated[Text, Tag("str")]
    | Annotated[list[ContentPartIn], Field(max_length=MAX_CONTENT_PARTS), Tag("list")]
    | Annotated[None, Tag("none")],
    Discriminator(_content_form),
]


class MessageItemIn(StrictIn):
    """A message as our API names it (`{role, content, created_at?}`), or as a chat framework hands it
    over: content as a list of parts, the `developer`/`function` (OpenAI) and `human`/`ai` (LangChain)
    roles, the fields of a tool call (accepted and not stored), so an agent can post its history as it
    has it."""

    role: Literal[Role, "developer", "function", "human", "ai"]
    content: _Content = None  # OpenAI may leave it out of a turn that only calls a tool
    created_at: Timestamp | None = None
    # OpenAI chat and Responses, Anthropic: carried by such messages, not stored here.
    name: _ForeignId | None = None
    tool_call_id: _ForeignId | None = None
    tool_calls: list[Any] | None = None
    function_call: Any = None
    refusal: Text | None = None
    annotations: list[Any] | None = None
    audio: Any = None
    id: _ForeignId | None = None
    type: Literal["message"] | None = None

    def stored_role(self) -> str:
        return _STORED_ROLE.get(self.role, self.role)

    def joined_text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "\n".join(t for part in self.content for t in part.texts())

    def carries_no_text_by_design(self) -> bool:
        """A turn of a chat format that holds no text (a tool call, an image): passed over, not refused.
        A plain message with empty content stays an error."""
        return bool(self.tool_calls or self.function_call or self.audio or isinstance(self.content, list))


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
