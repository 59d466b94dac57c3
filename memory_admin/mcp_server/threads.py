"""Tools on conversation threads: log messages, close a thread."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memory_admin.api.schemas import MessagesIn
from memory_admin.mcp_server.door import UserId, _door, _json, _user_id
from memory_admin.selectors.access import memory_user_for
from memory_admin.services.extraction import MessageIn, message_post, thread_close


class MessageItem(BaseModel):
    """One message of add_messages."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system", "tool"]
    content: str
    created_at: str | None = Field(None, description="ISO 8601 with a zone; default now.")


def add_messages(thread_id: str, messages: list[MessageItem], user_id: UserId = None) -> dict[str, Any]:
    """Log conversation messages ({role, content}) to a thread; facts are extracted from them later,
    once the thread has been quiet for a while, or at once when it is closed."""
    with _door() as principal:
        payload = MessagesIn(thread_id=thread_id, messages=[m.model_dump(exclude_none=True) for m in messages])
        user = memory_user_for(principal, _user_id(principal, user_id), create=True)
        result = message_post(
            principal=principal,
            memory_user=user,
            thread_id=payload.thread_id,
            messages=[MessageIn(m.role, m.content, m.created_at) for m in payload.messages],
        )
        return _json(
            {
                "thread_id": result.thread.external_id,
                "accepted": len(result.messages),
                "message_ids": [m.pk for m in result.messages],
                "pending": result.pending,
                "extraction": result.extraction,
                "extract_due_at": result.thread.extract_due_at,
            }
        )


def close_thread(
    thread_id: str, user_id: UserId = None, outcome: Literal["success", "failure", "unknown"] | None = None
) -> dict[str, Any]:
    """Close a thread: extract its facts now and record it as an episode with this outcome."""
    with _door() as principal:
        user = memory_user_for(principal, _user_id(principal, user_id))
        thread = thread_close(principal=principal, memory_user=user, thread_id=thread_id, outcome=outcome)
        return _json(
            {
                "thread_id": thread.external_id,
                "closed_at": thread.closed_at,
                "extraction": "now" if thread.extract_due_at else "nothing_pending",
            }
        )
