"""Tools on memories: add one or many, list, read one with its history, correct, forget."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from memory_admin.api.schemas import (
    MAX_BATCH_FACTS,
    AuditOut,
    Category,
    CorrectIn,
    FactBatchIn,
    FactIn,
    FactOut,
    ForgetIn,
    Kind,
    Source,
)
from memory_admin.errors import TooLarge
from memory_admin.mcp_server.door import FactId, Full, UserId, _door, _json, _refusal, _user_id
from memory_admin.models import Fact
from memory_admin.selectors.access import Principal, memory_user_for
from memory_admin.selectors.facts import chain_events, fact_chain, fact_get_for, fact_list
from memory_admin.services.access_counts import record_usage
from memory_admin.services.facts import (
    WriteResult,
    check_fact_size,
    fact_correct,
    fact_forget,
    fact_write,
    fact_write_many,
)


class MemoryItem(BaseModel):
    """One fact of add_memories (the fields of add_memory)."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="A short standalone statement about the user.")
    key: str | None = Field(None, description="A stable slot such as preference.editor.")
    category: Category | None = None
    kind: Kind | None = None
    confidence: float | None = Field(None, description="0..1; default: the source's prior.")
    source: Source | None = Field(None, description="Default agent_stated (a deliberate write: stored).")
    pinned: bool | None = None
    metadata: dict[str, Any] | None = Field(None, description="Small JSON object returned verbatim.")
    task_id: str | None = None
    observed_at: str | None = Field(None, description="When it became true, ISO 8601 with a zone.")
    ttl_days: float | None = None
    importance: float | None = None


def _when(value: datetime | None) -> str | None:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def _brief(fact: Fact, score: float | None = None) -> dict[str, Any]:
    """A memory as a model needs it: what it says, when it became true and was remembered, and the flags
    that change how far to trust it (only when set). Every field is one `full=true` (or get_memory) away."""
    out: dict[str, Any] = {"id": str(fact.pk), "content": fact.content}
    if score is not None:
        out["score"] = round(score, 3)
    if fact.key:
        out["key"] = fact.key
    if fact.status != Fact.Status.ACTIVE:
        out["status"] = fact.status
    if fact.contested:
        out["contested"] = True
    out["valid_from"], out["created_at"] = _when(fact.valid_from), _when(fact.created_at)
    return out


def _written(result: WriteResult) -> dict[str, Any]:
    body: dict[str, Any] = {"outcome": result.outcome.value, "stored": result.outcome.stored}
    if result.reason:
        body["reason"] = result.reason
    if result.fact is not None:
        body["fact"] = _brief(result.fact)
    if result.other is not None:
        body["other_fact_id"] = str(result.other.pk)
    if result.contradiction is not None:
        body["contradiction_id"] = str(result.contradiction.pk)
    if result.evicted:
        body["evicted_ids"] = [str(f.pk) for f in result.evicted]
    return body


_REFUSAL_DETAIL = {
    "quarantined": "Held for review and never served (it reads as instructions, or its source is external)",
    "rejected_low_confidence": "Not stored: its confidence is below the tenant's gate; give source agent_stated "
    "or user_stated (or a higher confidence) for what you mean to save",
    "overruled": "Not served: the notebook or a surer memory says otherwise",
    "capped": "Evicted at once: the user is at the cap of active memories and every other one is surer or pinned",
    "blocked": "Refused: it held a secret or blocked personal data; do not retry with the same text",
    "error": "Not stored: the write failed and left nothing behind; it may be retried",
}


def _refused_write(result: WriteResult) -> ToolError:
    """A write the write path did not serve: a tool error whose code is the outcome."""
    outcome = result.outcome.value
    detail = _REFUSAL_DETAIL[outcome] + (f" ({result.reason})." if result.reason else ".")
    return _refusal({"code": outcome, "detail": detail, **_written(result)})


def _batch_rows(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items of add_memories checked as the REST batch checks its body; the write path's drafts."""
    if len(facts) > MAX_BATCH_FACTS:
        raise TooLarge(
            f"A batch holds at most {MAX_BATCH_FACTS} facts; this one has {len(facts)}.",
            code="batch_too_large",
            limit=MAX_BATCH_FACTS,
        )
    batch = FactBatchIn(facts=facts)
    for item in batch.facts:
        check_fact_size(item.content, item.metadata)
    rows = []
    for item in batch.facts:
        data = item.dict(exclude_none=True)
        data["task_ref"] = data.pop("task_id", "")
        rows.append(data)
    return rows


def _fact_detail(principal: Principal, fact_id: UUID | str) -> dict[str, Any]:
    fact = fact_get_for(principal, fact_id)
    record_usage(principal.tenant_id, "fact")
    chain = fact_chain(fact)
    return {
        "fact": FactOut.of(fact),
        "history": [FactOut.of(f) for f in chain],
        "events": [AuditOut.from_orm(e).dict() for e in chain_events(principal, chain)],
    }


def add_memory(
    content: str,
    user_id: UserId = None,
    key: str | None = None,
    category: Category | None = None,
    kind: Kind | None = None,
    confidence: float | None = None,
    source: Source | None = None,
    pinned: bool | None = None,
    metadata: dict[str, Any] | None = None,
    task_id: str | None = None,
    observed_at: str | None = None,
    ttl_days: float | None = None,
    importance: float | None = None,
) -> dict[str, Any]:
    """Remember one fact about the user through the write path (source agent_stated by default: what
    you deliberately save is stored). Answers the outcome (created, updated, deduplicated, merged,
    superseded_existing, queued_for_review) and the memory. When it is not served the call is an
    error whose code is the outcome: quarantined, rejected_low_confidence, overruled, capped, blocked.
    Use a stable `key` such as preference.editor for a slot that can change."""
    with _door() as principal:
        args = {
            "content": content,
            "key": key,
            "category": category,
            "kind": kind,
            "confidence": confidence,
            "source": source,
            "pinned": pinned,
            "metadata": metadata,
            "task_id": task_id,
            "observed_at": observed_at,
            "ttl_days": ttl_days,
            "importance": importance,
        }
        data = FactIn(**{k: v for k, v in args.items() if v is not None}).dict(exclude_none=True)
        check_fact_size(data["content"], data.get("metadata"))
        user = memory_user_for(principal, _user_id(principal, user_id), create=True)
        task_ref = data.pop("task_id", "")
        result = fact_write(principal=principal, memory_user=user, task_ref=task_ref, **data)
    if result.outcome.refused:
        raise _refused_write(result)
    return _json(_written(result))


def add_memories(
    facts: Annotated[list[MemoryItem], Field(min_length=1, max_length=MAX_BATCH_FACTS)], user_id: UserId = None
) -> dict[str, Any]:
    """Remember up to 100 facts at once, each written as add_memory writes it; an outcome per fact, in
    order. If any fact is not served (blocked, quarantined, rejected_low_confidence, overruled,
    capped), the call is an error with code write_refused whose `results` still list every fact's
    outcome: the others were stored."""
    with _door() as principal:
        rows = _batch_rows([f.model_dump(exclude_none=True) for f in facts])
        user = memory_user_for(principal, _user_id(principal, user_id), create=True)
        results = fact_write_many(principal=principal, memory_user=user, facts=rows)
    body = {
        "user_id": user.external_id,
        "results": [
            {"index": i, **_written(r), **({"block_id": r.block_id} if r.block_id else {})}
            for i, r in enumerate(results)
        ],
    }
    refused = [(i, r.outcome.value) for i, r in enumerate(results) if r.outcome.refused]
    if refused:
        named = ", ".join(f"#{i} {outcome}" for i, outcome in refused)
        raise _refusal(
            {
                "code": "write_refused",
                "detail": f"{len(refused)} of {len(results)} facts were not served ({named}); the others were.",
                **body,
            }
        )
    return _json(body)


def get_memories(
    user_id: UserId = None,
    status: Literal["active", "superseded", "stale", "evicted", "quarantined", "any"] = "active",
    category: Category | None = None,
    kind: Kind | None = None,
    key: str | None = None,
    text: str | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 50,
    full: Full = False,
) -> dict[str, Any]:
    """List the user's memories with filters, newest first (id, content and dates; full=true: every
    field); pass `next_cursor` back for the next page."""
    with _door() as principal:
        user = memory_user_for(principal, _user_id(principal, user_id))
        rows, next_cursor = fact_list(
            principal,
            user,
            status=None if status == "any" else status,
            category=category,
            kind=kind,
            key=key,
            text=text,
            cursor=cursor,
            limit=limit,
        )
        items = [FactOut.of(f) for f in rows] if full else [_brief(f) for f in rows]
        return _json({"items": items, "next_cursor": next_cursor})


def get_memory(memory_id: FactId) -> dict[str, Any]:
    """One memory in full, with its correction history (every version, oldest first) and audit events."""
    with _door() as principal:
        return _json(_fact_detail(principal, memory_id))


def update_memory(memory_id: FactId, content: str, confidence: float | None = None, reason: str = "") -> dict[str, Any]:
    """Correct a memory: a new version supersedes it (the old one stays in the history). Only the
    newest version can be corrected: an older id answers already_superseded with `current_id`."""
    with _door() as principal:
        args = CorrectIn(
            **{
                k: v
                for k, v in {"content": content, "confidence": confidence, "reason": reason}.items()
                if v is not None
            }
        )
        new = fact_correct(principal=principal, fact_id=memory_id, **args.dict(exclude_none=True))
        return _json(_brief(fact_get_for(principal, new.pk)))


def delete_memory(memory_id: FactId, reason: str = "") -> dict[str, Any]:
    """Forget a memory (it is evicted and the change audited; it no longer reaches the context). An id
    that was corrected since is refused with already_superseded and `current_id`, the version that is
    served now: forget that one (after reading it) to forget what the user's memory says."""
    with _door() as principal:
        args = ForgetIn(reason=reason)
        fact = fact_forget(principal=principal, fact_id=memory_id, reason=args.reason)
        return _json(_brief(fact_get_for(principal, fact.pk)))
