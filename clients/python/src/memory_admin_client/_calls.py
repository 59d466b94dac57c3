"""What each method asks of the API, written once for the sync and the async client.

A resource method builds a `Call` (which operation, its path values, query and body, how to read the
answer); the client's `_run` sends it, synchronously or not. `OPERATIONS` names every API operation the
client uses by its OpenAPI `operation_id`, with its method and path: a test compares it with the live
schema so the two cannot drift apart.
"""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar
from urllib.parse import quote, urlencode

from memory_admin_client import models
from memory_admin_client.errors import batch_refused, write_refused
from memory_admin_client.models import parse

T = TypeVar("T")

OPERATIONS: dict[str, tuple[str, str]] = {
    "health": ("GET", "/health"),
    "health_ready": ("GET", "/health/ready"),
    "health_live": ("GET", "/health/live"),
    "get_settings": ("GET", "/settings"),
    "patch_settings": ("PATCH", "/settings"),
    "list_users": ("GET", "/users"),
    "list_facts": ("GET", "/users/{user_id}/facts"),
    "write_fact": ("POST", "/users/{user_id}/facts"),
    "write_facts": ("POST", "/users/{user_id}/facts/batch"),
    "get_fact": ("GET", "/facts/{fact_id}"),
    "fact_history": ("GET", "/facts/{fact_id}/history"),
    "correct_fact": ("POST", "/facts/{fact_id}/correct"),
    "forget_fact": ("DELETE", "/facts/{fact_id}"),
    "pin_fact": ("POST", "/facts/{fact_id}/pin"),
    "promote_fact": ("POST", "/facts/{fact_id}/promote"),
    "search": ("GET", "/users/{user_id}/search"),
    "search_post": ("POST", "/users/{user_id}/search"),
    "context": ("GET", "/users/{user_id}/context"),
    "context_post": ("POST", "/users/{user_id}/context"),
    "post_messages": ("POST", "/users/{user_id}/messages"),
    "close_thread": ("POST", "/users/{user_id}/threads/{thread_id}/close"),
    "list_episodes": ("GET", "/users/{user_id}/episodes"),
    "get_episode": ("GET", "/episodes/{episode_id}"),
    "list_batches": ("GET", "/batches"),
    "retry_batch": ("POST", "/batches/{batch_id}/retry"),
    "get_notebook": ("GET", "/users/{user_id}/notebook"),
    "put_notebook": ("PUT", "/users/{user_id}/notebook"),
    "list_skills": ("GET", "/skills"),
    "get_skill": ("GET", "/skills/{path}"),
    "put_skill": ("PUT", "/skills/{path}"),
    "export_user": ("GET", "/users/{user_id}/export"),
    "import_user": ("POST", "/users/{user_id}/import"),
    "erase_user": ("DELETE", "/users/{user_id}"),
    "list_entities": ("GET", "/entities"),
    "get_entity": ("GET", "/entities/{entity_id}"),
    "get_entity_graph": ("GET", "/entities/{entity_id}/graph"),
    "merge_entities": ("POST", "/entity-merges"),
    "undo_entity_merge": ("POST", "/entity-merges/{merge_id}/undo"),
    "split_entity": ("POST", "/entities/{entity_id}/split"),
    "rename_entity": ("POST", "/entities/{entity_id}/rename"),
    "close_relation": ("POST", "/relations/{relation_id}/close"),
    "reopen_relation": ("POST", "/relations/{relation_id}/reopen"),
    "list_entity_reviews": ("GET", "/entity-reviews"),
    "accept_entity_review": ("POST", "/entity-reviews/{review_id}/accept"),
    "reject_entity_review": ("POST", "/entity-reviews/{review_id}/reject"),
    "reopen_entity_review": ("POST", "/entity-reviews/{review_id}/reopen"),
    # Trained knowledge: sources (pages, sites, folders, uploaded files), their documents' chunks, the switch.
    "create_source": ("POST", "/knowledge/sources"),
    "upload_source": ("POST", "/knowledge/sources/upload"),
    "list_sources": ("GET", "/knowledge/sources"),
    "get_source": ("GET", "/knowledge/sources/{source_id}"),
    "list_chunks": ("GET", "/knowledge/documents/{document_id}/chunks"),
    "crawl_source": ("POST", "/knowledge/sources/{source_id}/crawl"),
    "pause_source": ("POST", "/knowledge/sources/{source_id}/pause"),
    "resume_source": ("POST", "/knowledge/sources/{source_id}/resume"),
    "delete_source": ("DELETE", "/knowledge/sources/{source_id}"),
    "get_knowledge_settings": ("GET", "/knowledge/settings"),
    "put_knowledge_settings": ("PUT", "/knowledge/settings"),
    # The LangGraph store and checkpointer (memory_admin_client.langgraph, memory_admin_client.checkpoint).
    "store_put_items": ("POST", "/store/put"),
    "store_get_items": ("POST", "/store/get"),
    "store_search_items": ("POST", "/store/search"),
    "store_list_namespaces": ("POST", "/store/namespaces"),
    "put_checkpoint": ("POST", "/checkpoints"),
    "put_checkpoint_writes": ("POST", "/checkpoints/writes"),
    "query_checkpoints": ("POST", "/checkpoints/query"),
    "delete_checkpoints": ("DELETE", "/checkpoints"),
}

# Safe to send twice: reads, pinning (setting a flag to a value) and a settings patch (setting values).
# Writes are never retried: a write whose answer was lost may have happened, and a second one would be a
# second write.
IDEMPOTENT = frozenset(name for name, (method, _) in OPERATIONS.items() if method == "GET") | {
    "pin_fact",
    "patch_settings",
}
# Reads sent as POST (a batch in the body), and checkpoint writes (keyed by their ids: a second is the first).
IDEMPOTENT |= {"search_post", "context_post", "store_get_items", "store_search_items", "store_list_namespaces"}
IDEMPOTENT |= {"put_checkpoint"}
IDEMPOTENT |= {"put_checkpoint_writes", "query_checkpoints", "delete_checkpoints"}
# Setting a source's pause, or the knowledge switch, to a value.
IDEMPOTENT |= {"pause_source", "put_knowledge_settings"}


@dataclass(frozen=True)
class Call(Generic[T]):
    operation: str
    path_values: dict[str, str]
    parse: Callable[[Any], T]
    query: dict[str, Any] | None = None
    body: Any = None
    # A multipart upload instead of a JSON body: httpx's `files` ({"file": (name, bytes, type)}) and `data`.
    files: dict[str, tuple[str, bytes, str]] | None = None
    form: dict[str, str] | None = None

    @property
    def method(self) -> str:
        return OPERATIONS[self.operation][0]

    @property
    def path(self) -> str:
        template = OPERATIONS[self.operation][1]
        # A skill path keeps its slashes (`deploy/kubernetes.md`); every other value is one segment.
        return template.format(
            **{k: quote(str(v), safe="/" if k == "path" else "") for k, v in self.path_values.items()}
        )

    @property
    def idempotent(self) -> bool:
        return self.operation in IDEMPOTENT

    def content(self) -> dict[str, Any]:
        """The request's body as httpx's keyword arguments: JSON, multipart, or none."""
        if self.files is not None:
            return {"files": self.files, "data": self.form or {}}
        return {"json": self.body} if self.body is not None else {}

    def params(self) -> dict[str, Any] | None:
        if not self.query:
            return None
        return {k: _query_value(v) for k, v in self.query.items() if v is not None}


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return value


def _of(cls: type[T]) -> Callable[[Any], T]:
    return lambda data: parse(cls, data)


def _list_of(cls: type[T]) -> Callable[[Any], list[T]]:
    return lambda data: [parse(cls, item) for item in data]


def _served(data: Any) -> models.WriteResult:
    """A write's answer; raises `WriteRefused` (by outcome) when the statement is not served."""
    result = parse(models.WriteResult, data)
    if result.refused:
        raise write_refused(result)
    return result


def _batch_served(data: Any) -> models.BatchResult:
    """A batch's answer; raises `BatchRefused` (carrying every item's outcome) when any is not served."""
    result = parse(models.BatchResult, data)
    if any(item.refused for item in result.results):
        raise batch_refused(result)
    return result


def _fact_body(content: str, **fields: Any) -> dict[str, Any]:
    body = {"content": content, **{k: v for k, v in fields.items() if v is not None}}
    if isinstance(body.get("observed_at"), datetime):
        body["observed_at"] = body["observed_at"].isoformat()
    return body


def _identity(data: Any) -> Any:
    return data


class _Resource:
    def __init__(self, run: Callable[[Call[Any]], Any]):
        self._run = run


class FactCalls(_Resource):
    """`client.facts`: the write path, listing, history, corrections."""

    def add(
        self,
        user_id: str,
        content: str,
        *,
        key: str | None = None,
        category: str | None = None,
        kind: str | None = None,
        confidence: float | None = None,
        source: str | None = None,
        observed_at: datetime | None = None,
        ttl_days: float | None = None,
        pinned: bool | None = None,
        importance: float | None = None,
        metadata: dict[str, Any] | None = None,
        task_id: str | None = None,
    ):
        """Write one fact through the write path; returns a `WriteResult` (created, updated, deduplicated,
        merged, superseded_existing, queued_for_review). What is not served raises: `Blocked` (a secret),
        `Quarantined`, `RejectedLowConfidence`, `Overruled`, `Capped` (all `WriteRefused`, with `.result`).
        `source` defaults to `agent_stated` (a deliberate write, stored at 0.8); pass `agent_inferred` for a
        guess, which meets the tenant's confidence gate."""
        body = _fact_body(
            content,
            key=key,
            category=category,
            kind=kind,
            confidence=confidence,
            source=source,
            observed_at=observed_at,
            ttl_days=ttl_days,
            pinned=pinned,
            importance=importance,
            metadata=metadata,
            task_id=task_id,
        )
        return self._run(Call("write_fact", {"user_id": user_id}, _served, body=body))

    def add_batch(self, user_id: str, facts: list[dict[str, Any]]):
        """Up to 100 facts (dicts with the fields of `add`) in one request; a `BatchResult` with an outcome
        per fact, in order. If any fact is not served (blocked, quarantined, rejected_low_confidence,
        overruled, capped, error), raises `BatchRefused`: `.refused` names those items, `.result` holds
        every outcome (the others were written)."""
        body = {"facts": [_fact_body(**f) for f in facts]}
        return self._run(Call("write_facts", {"user_id": user_id}, _batch_served, body=body))

    def list(
        self,
        user_id: str,
        *,
        status: str | None = None,
        category: str | None = None,
        kind: str | None = None,
        key: str | None = None,
        text: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ):
        """One page (`FactPage`); `iter` walks every page."""
        query = {
            "status": status,
            "category": category,
            "kind": kind,
            "key": key,
            "text": text,
            "cursor": cursor,
            "limit": limit,
        }
        return self._run(Call("list_facts", {"user_id": user_id}, _of(models.FactPage), query=query))

    def get(self, fact_id: str):
        return self._run(Call("get_fact", {"fact_id": fact_id}, _of(models.Fact)))

    def history(self, fact_id: str):
        return self._run(Call("fact_history", {"fact_id": fact_id}, _of(models.History)))

    def correct(
        self,
        fact_id: str,
        content: str,
        *,
        confidence: float | None = None,
        category: str | None = None,
        reason: str | None = None,
    ):
        """A new version that supersedes the fact; returns the new `Fact`."""
        body = {
            k: v
            for k, v in {"content": content, "confidence": confidence, "category": category, "reason": reason}.items()
            if v is not None
        }
        return self._run(Call("correct_fact", {"fact_id": fact_id}, _of(models.Fact), body=body))

    def forget(self, fact_id: str, *, reason: str | None = None):
        body = {"reason": reason} if reason else None
        return self._run(Call("forget_fact", {"fact_id": fact_id}, _of(models.Fact), body=body))

    def pin(self, fact_id: str, pinned: bool = True):
        return self._run(Call("pin_fact", {"fact_id": fact_id}, _of(models.Fact), body={"pinned": pinned}))

    def promote(self, fact_id: str, to: str):
        """Move a fact up the scope tree (`to`: "user" from a task, "org" for curators); the new `Fact`."""
        return self._run(Call("promote_fact", {"fact_id": fact_id}, _of(models.Fact), body={"to": to}))


class UserCalls(_Resource):
    def list(self, *, prefix: str | None = None, cursor: str | None = None, limit: int | None = None):
        """One page (`UserPage`) of the memory users this key reaches, by id."""
        return self._run(
            Call("list_users", {}, _of(models.UserPage), query={"prefix": prefix, "cursor": cursor, "limit": limit})
        )


class MessageCalls(_Resource):
    def add(self, user_id: str, thread_id: str, messages: list[Any]):
        """Append messages (`{"role", "content", "created_at"?}`) to a thread; extraction runs later. A chat
        history goes as the framework holds it: OpenAI's or Anthropic's message dicts, or the OpenAI SDK's
        message objects (`ChatCompletionMessage`); the server keeps the text and passes over tool calls. (An
        Anthropic SDK response `Message` carries `model`, `usage`...: pass `{"role", "content"}` from it.)"""
        body = {"thread_id": thread_id, "messages": [_message(m) for m in messages]}
        return self._run(Call("post_messages", {"user_id": user_id}, _of(models.MessagesAccepted), body=body))


def _message(m: Any) -> dict[str, Any]:
    if hasattr(m, "model_dump"):  # the OpenAI SDK's pydantic message
        m = m.model_dump(exclude_none=True, mode="json")
    if isinstance(m.get("created_at"), datetime):
        return {**m, "created_at": m["created_at"].isoformat()}
    return m


class ThreadCalls(_Resource):
    def close(self, user_id: str, thread_id: str, *, outcome: str | None = None):
        """Extract the thread now and build its episode (`outcome`: success, failure, unknown)."""
        body = {"outcome": outcome} if outcome else None
        return self._run(
            Call("close_thread", {"user_id": user_id, "thread_id": thread_id}, _of(models.ThreadClosed), body=body)
        )


class EpisodeCalls(_Resource):
    """`client.episodes`: what happened in each closed (or idle) thread."""

    def list(
        self,
        user_id: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        thread_id: str | None = None,
        outcome: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ):
        """One page (`EpisodePage`), newest first: ended at or after `since`, started before `until`."""
        query = {
            "since": since,
            "until": until,
            "thread_id": thread_id,
            "outcome": outcome,
            "cursor": cursor,
            "limit": limit,
        }
        return self._run(Call("list_episodes", {"user_id": user_id}, _of(models.EpisodePage), query=query))

    def get(self, episode_id: str):
        """An `EpisodeDetail`: the episode, the facts drawn from it and its messages."""
        return self._run(Call("get_episode", {"episode_id": episode_id}, _of(models.EpisodeDetail)))


class BatchCalls(_Resource):
    """`client.batches`: extraction batches (their status, errors, tokens and cost); retry a failed one."""

    def list(self, *, status: str | None = None, limit: int | None = None):
        query = {"status": status, "limit": limit}
        return self._run(Call("list_batches", {}, _list_of(models.Batch), query=query))

    def retry(self, batch_id: int):
        """Queue a failed batch again (`Conflict` with code not_failed otherwise); the `Batch`."""
        return self._run(Call("retry_batch", {"batch_id": str(batch_id)}, _of(models.Batch)))


class SettingsCalls(_Resource):
    """`client.settings`: the tenant's settings (admin keys)."""

    def get(self):
        return self._run(Call("get_settings", {}, _of(models.Settings)))

    def update(self, **changes: Any):
        """Change some settings (`confidence_threshold=0.6`, `pii_policy={...}`, ...); the new `Settings`."""
        return self._run(Call("patch_settings", {}, _of(models.Settings), body=changes))


class NotebookCalls(_Resource):
    def get(self, user_id: str):
        return self._run(Call("get_notebook", {"user_id": user_id}, _of(models.Notebook)))

    def put(self, user_id: str, content: str, *, version: int, note: str | None = None):
        """Save over `version` (0 for a new notebook); raises `VersionConflict` if someone saved since."""
        body = {"content": content, "version": version, **({"note": note} if note else {})}
        return self._run(Call("put_notebook", {"user_id": user_id}, _of(models.Notebook), body=body))


class SkillCalls(_Resource):
    def list(self, *, prefix: str | None = None, user_id: str | None = None):
        return self._run(
            Call("list_skills", {}, _list_of(models.SkillSummary), query={"prefix": prefix, "user_id": user_id})
        )

    def get(self, path: str, *, user_id: str | None = None):
        return self._run(Call("get_skill", {"path": path.strip("/")}, _of(models.Skill), query={"user_id": user_id}))

    def put(self, path: str, content: str, *, version: int | None = None, user_id: str | None = None):
        body = {k: v for k, v in {"content": content, "version": version, "user_id": user_id}.items() if v is not None}
        return self._run(Call("put_skill", {"path": path.strip("/")}, _of(models.Skill), body=body))


def _note(note: str | None) -> dict[str, str] | None:
    return {"note": note} if note else None


class EntityCalls(_Resource):
    """`client.entities`: the knowledge graph; merge, undo, split and rename need an admin key (a key
    limited to some users curates only their entities: a shared one raises `ReadOnlyScope`)."""

    def search(self, q: str = "", *, user_id: str | None = None, limit: int | None = None):
        """Entities whose name or alias matches `q` (an `EntityPage`); with `user_id`, those its facts name."""
        query = {"q": q or None, "user_id": user_id, "limit": limit}
        return self._run(Call("list_entities", {}, _of(models.EntityPage), query=query))

    def get(self, entity_id: str):
        """An `EntityDetail`; a merged entity answers too, with `merged_into` naming the live one."""
        return self._run(Call("get_entity", {"entity_id": entity_id}, _of(models.EntityDetail)))

    def graph(self, entity_id: str, *, depth: int | None = None, as_of: datetime | None = None):
        """The `EntityGraph` up to `depth` (1-3) relations away, as it held at `as_of` (default now)."""
        query = {"depth": depth, "as_of": as_of}
        return self._run(Call("get_entity_graph", {"entity_id": entity_id}, _of(models.EntityGraph), query=query))

    def merge(self, survivor_id: str, loser_id: str, *, note: str | None = None):
        """Merge `loser_id` into `survivor_id` (its facts, relations and names move); an `EntityMerge`."""
        body = {"survivor_id": survivor_id, "loser_id": loser_id, **({"note": note} if note else {})}
        return self._run(Call("merge_entities", {}, _of(models.EntityMerge), body=body))

    def undo_merge(self, merge_id: str, *, note: str | None = None):
        return self._run(Call("undo_entity_merge", {"merge_id": merge_id}, _of(models.EntityMerge), body=_note(note)))

    def split(self, entity_id: str, alias: str, *, note: str | None = None):
        """Split one alias off into its own entity (an `EntitySplit`)."""
        body = {"alias": alias, **({"note": note} if note else {})}
        return self._run(Call("split_entity", {"entity_id": entity_id}, _of(models.EntitySplit), body=body))

    def rename(self, entity_id: str, name: str, *, note: str | None = None):
        """A new canonical name; the old one stays an alias. Returns the `Entity`."""
        body = {"name": name, **({"note": note} if note else {})}
        return self._run(Call("rename_entity", {"entity_id": entity_id}, _of(models.Entity), body=body))


class RelationCalls(_Resource):
    """`client.relations`: close a relation now, or reopen one a curator closed (admin keys)."""

    def close(self, relation_id: int, *, note: str | None = None):
        return self._run(
            Call("close_relation", {"relation_id": str(relation_id)}, _of(models.Relation), body=_note(note))
        )

    def reopen(self, relation_id: int, *, note: str | None = None):
        """Raises `RelationCorrected` for a relation a correction closed (correct the fact instead)."""
        return self._run(
            Call("reopen_relation", {"relation_id": str(relation_id)}, _of(models.Relation), body=_note(note))
        )


class EntityReviewCalls(_Resource):
    """`client.entity_reviews`: the merges resolution was unsure of; deciding needs an admin key."""

    def list(self, *, limit: int | None = None):
        return self._run(Call("list_entity_reviews", {}, _of(models.EntityReviewPage), query={"limit": limit}))

    def accept(self, review_id: str, *, note: str | None = None):
        return self._run(
            Call("accept_entity_review", {"review_id": review_id}, _of(models.EntityReview), body=_note(note))
        )

    def reject(self, review_id: str, *, note: str | None = None):
        return self._run(
            Call("reject_entity_review", {"review_id": review_id}, _of(models.EntityReview), body=_note(note))
        )

    def reopen(self, review_id: str):
        """Undo a decision (an accepted item's merge is undone)."""
        return self._run(Call("reopen_entity_review", {"review_id": review_id}, _of(models.EntityReview)))


class KnowledgeCalls(_Resource):
    """`client.knowledge`: trained knowledge, the sources the agent's memory learns from. Adding one answers
    at once; the crawl runs on the server's worker and `get` shows its progress (`state`, `pages_done` of
    `pages_total`, each document's chunks and errors). `user_id` makes a source one memory user's own;
    without it the tenant shares it."""

    def add(
        self,
        kind: str,
        location: str,
        *,
        name: str | None = None,
        user_id: str | None = None,
        refresh_minutes: int | None = None,
        max_depth: int | None = None,
        max_pages: int | None = None,
        max_bytes: int | None = None,
    ):
        """A page (`kind="url"`), a same-host crawl (`"site"`, bounded by `max_depth`, `max_pages`,
        `max_bytes`) or a folder on the server (`"folder"`, admin keys, under the operator's roots); the new
        `KnowledgeSourceDetail`. Refusals: `InvalidUrl`, `AddressNotAllowed`, `FolderNotAllowed`,
        `FolderNotFound`, `LimitTooHigh`, `IngestionDisabled`."""
        fields = {
            "kind": kind,
            "location": location,
            "name": name,
            "user_id": user_id,
            "refresh_minutes": refresh_minutes,
            "max_depth": max_depth,
            "max_pages": max_pages,
            "max_bytes": max_bytes,
        }
        body = {k: v for k, v in fields.items() if v is not None}
        return self._run(Call("create_source", {}, _of(models.KnowledgeSourceDetail), body=body))

    def upload(
        self,
        file: str | os.PathLike[str] | bytes | BinaryIO,
        *,
        filename: str | None = None,
        content_type: str | None = None,
        name: str | None = None,
        user_id: str | None = None,
    ):
        """Upload a file (a path, an open binary file, or bytes with `filename`): Markdown, plain text, HTML
        or PDF, told by its name's ending or `content_type`. The new `KnowledgeSourceDetail`; refusals:
        `UnsupportedFileType`, `TooLarge` (413, `limit` in bytes), `IngestionDisabled`."""
        data, filename = _file_content(file, filename)
        kind = content_type or mimetypes.guess_type(filename)[0] or "application/octet-stream"
        form = {k: v for k, v in {"name": name, "user_id": user_id}.items() if v is not None}
        files = {"file": (filename, data, kind)}
        return self._run(Call("upload_source", {}, _of(models.KnowledgeSourceDetail), files=files, form=form))

    def list(self, *, user_id: str | None = None, include_deleted: bool | None = None):
        """The sources this key sees, newest first (a `KnowledgeSourcePage`); `user_id` narrows to one user's."""
        query = {"user_id": user_id, "include_deleted": include_deleted}
        return self._run(Call("list_sources", {}, _of(models.KnowledgeSourcePage), query=query))

    def get(self, source_id: str):
        """A `KnowledgeSourceDetail`: the crawl's progress and every document (`document_list`)."""
        return self._run(Call("get_source", {"source_id": str(source_id)}, _of(models.KnowledgeSourceDetail)))

    def chunks(self, document_id: str, *, status: str | None = None):
        """A document's chunks (a `KnowledgeChunkPage`), current version first; `status`: active,
        superseded, retired or quarantined."""
        return self._run(
            Call(
                "list_chunks",
                {"document_id": str(document_id)},
                _of(models.KnowledgeChunkPage),
                query={"status": status},
            )
        )

    def crawl(self, source_id: str):
        """Crawl now; raises `CrawlInProgress` while one runs, `SourcePaused` when paused."""
        return self._run(Call("crawl_source", {"source_id": str(source_id)}, _of(models.KnowledgeSourceDetail)))

    def pause(self, source_id: str):
        return self._run(Call("pause_source", {"source_id": str(source_id)}, _of(models.KnowledgeSourceDetail)))

    def resume(self, source_id: str):
        """Resume a paused source, and crawl it now."""
        return self._run(Call("resume_source", {"source_id": str(source_id)}, _of(models.KnowledgeSourceDetail)))

    def delete(self, source_id: str):
        """Delete a source: its chunks are retired (kept as history, never served); `chunks_retired` counts them."""
        return self._run(Call("delete_source", {"source_id": str(source_id)}, _of(models.KnowledgeSourceDeleted)))

    def settings(self):
        """`KnowledgeSettings`: whether ingestion is switched on for the tenant."""
        return self._run(Call("get_knowledge_settings", {}, _of(models.KnowledgeSettings)))

    def update_settings(self, *, ingestion_enabled: bool):
        """The tenant's kill switch (admin keys): off stops running crawls at their next step."""
        body = {"ingestion_enabled": ingestion_enabled}
        return self._run(Call("put_knowledge_settings", {}, _of(models.KnowledgeSettings), body=body))


def _file_content(file: str | os.PathLike[str] | bytes | BinaryIO, filename: str | None) -> tuple[bytes, str]:
    """The bytes to send and the name to send them under. Read whole here, so that the sync and the async
    client send the same thing (the server takes files up to its upload limit only)."""
    if isinstance(file, bytes | bytearray):
        if not filename:
            raise ValueError("filename: the server tells a file's type by its name; pass filename= with bytes")
        return bytes(file), filename
    if isinstance(file, str | os.PathLike):
        path = Path(file)
        return path.read_bytes(), filename or path.name
    data = file.read()
    return data, filename or Path(str(getattr(file, "name", "") or "upload")).name


def search_call(
    user_id: str,
    q: str,
    *,
    k: int | None = None,
    include: list[str] | None = None,
    kinds: list[str] | None = None,
    as_of: datetime | None = None,
    between: tuple[datetime, datetime] | None = None,
) -> Call:
    # `between` travels as ISO 8601's interval, FROM/UNTIL.
    period = f"{between[0].isoformat()}/{between[1].isoformat()}" if between else None
    joined = ",".join(kinds) if kinds is not None else None
    query = {"q": q, "k": k, "include": include or None, "kinds": joined, "as_of": as_of, "between": period}
    if _fits_a_url(query):
        return Call("search", {"user_id": user_id}, _of(models.SearchResult), query=query)
    body = _present({**query, "kinds": list(kinds) if kinds is not None else None, "as_of": _query_value(as_of)})
    return Call("search_post", {"user_id": user_id}, _of(models.SearchResult), body=body)


def context_call(user_id: str, *, task: str | None = None, budget_tokens: int | None = None) -> Call:
    query = {"task": task, "budget_tokens": budget_tokens}
    if _fits_a_url(query):
        return Call("context", {"user_id": user_id}, _of(models.Context), query=query)
    return Call("context_post", {"user_id": user_id}, _of(models.Context), body=_present(query))


# The most query string a search or context block sends in its URL; a longer one (a 2,000-character q in
# a non-Latin script is ~12-18 kB escaped, over what web servers and proxies read of a request line)
# goes as the same parameters in a JSON body, to the POST form of the same path.
URL_QUERY_MAX = 2048


def _fits_a_url(query: dict[str, Any]) -> bool:
    return len(urlencode({name: _query_value(value) for name, value in _present(query).items()})) <= URL_QUERY_MAX


def _present(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def export_call(user_id: str) -> Call:
    return Call("export_user", {"user_id": user_id}, _identity)


def import_call(user_id: str, export: dict[str, Any]) -> Call:
    return Call("import_user", {"user_id": user_id}, _identity, body=export)


def erase_call(user_id: str) -> Call:
    return Call("erase_user", {"user_id": user_id}, _of(models.Erased))


def health_call(probe: str = "") -> Call:
    if probe == "ready":
        return Call("health_ready", {}, _identity)
    if probe == "live":
        return Call("health_live", {}, _identity)
    if probe:
        raise ValueError(f"probe: 'ready', 'live' or '' (the detailed check), not {probe!r}")
    return Call("health", {}, _identity)
