"""`MemoryAdmin` (sync) and `AsyncMemoryAdmin` (async): the agent API over httpx."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import httpx

from memory_admin_client import _calls, models
from memory_admin_client._calls import Call
from memory_admin_client.errors import ConnectionFailed, Unavailable, error_for

DEFAULT_URL = "http://127.0.0.1:8000"
USER_AGENT = "memory-admin-client/0.1.0"


def _api_root(base_url: str | None) -> str:
    url = (base_url or os.environ.get("MEMORY_ADMIN_URL") or DEFAULT_URL).rstrip("/")
    return url if url.endswith("/api/v1") else url + "/api/v1"


def _headers(api_key: str | None) -> dict[str, str]:
    key = api_key or os.environ.get("MEMORY_ADMIN_API_KEY")
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _answer(call: Call, response: httpx.Response) -> Any:
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.status_code >= 400:
        raise error_for(response.status_code, body, response.headers)
    return call.parse(body)


class _Retry:
    """Exponential backoff with jitter, for idempotent calls only, on 503 and connection errors."""

    def __init__(self, max_retries: int, backoff: float):
        self.max_retries, self.backoff = max_retries, backoff

    def attempts(self, call: Call) -> int:
        return 1 + (self.max_retries if call.idempotent else 0)

    def delay(self, attempt: int) -> float:
        return self.backoff * (2**attempt) * (0.5 + random.random() / 2)

    @staticmethod
    def retryable(exc: Exception) -> bool:
        return isinstance(exc, httpx.TransportError) or (isinstance(exc, Unavailable) and exc.status == 503)


def _connection_failed(exc: httpx.TransportError) -> ConnectionFailed:
    return ConnectionFailed("connection_failed", f"{type(exc).__name__}: {exc}", 0)


class _ClientBase:
    def _setup(self) -> None:
        run = self._run  # type: ignore[attr-defined]
        self.facts = self._facts_class(run)  # type: ignore[attr-defined]
        self.users = self._users_class(run)  # type: ignore[attr-defined]
        self.messages = _calls.MessageCalls(run)
        self.threads = _calls.ThreadCalls(run)
        self.notebook = _calls.NotebookCalls(run)
        self.skills = _calls.SkillCalls(run)
        self.entities = _calls.EntityCalls(run)
        self.relations = _calls.RelationCalls(run)
        self.entity_reviews = _calls.EntityReviewCalls(run)
        self.episodes = self._episodes_class(run)  # type: ignore[attr-defined]
        self.batches = _calls.BatchCalls(run)
        self.settings = _calls.SettingsCalls(run)
        self.knowledge = _calls.KnowledgeCalls(run)

    def search(
        self,
        user_id: str,
        q: str,
        *,
        k: int | None = None,
        include: list[str] | None = None,
        kinds: list[str] | None = None,
        as_of: datetime | None = None,
        between: tuple[datetime, datetime] | None = None,
    ):
        """Ranked hits with their score components (`SearchResult.hits`): facts, past messages and document
        chunks with their citation (each hit's `kind`; `hit.chunk.citation`), or only the `kinds` given
        ("fact", "message", "chunk"). `as_of`: only what was true at that time (timezone-aware); `between`:
        only what was observed within (from, until)."""
        call = _calls.search_call(user_id, q, k=k, include=include, kinds=kinds, as_of=as_of, between=between)
        return self._run(call)  # type: ignore[attr-defined]

    def context(self, user_id: str, *, task: str | None = None, budget_tokens: int | None = None):
        """The token-capped context block for a task (`Context.text` goes into the prompt)."""
        return self._run(_calls.context_call(user_id, task=task, budget_tokens=budget_tokens))  # type: ignore

    def export(self, user_id: str):
        """Everything stored about the user, as the server's portable JSON export (admin keys)."""
        return self._run(_calls.export_call(user_id))  # type: ignore[attr-defined]

    def import_user(self, user_id: str, export: dict[str, Any]):
        """Replay an export (from `export`, this server or another) into the user through the write path;
        answers what was imported, already imported, refused. Importing the same export again writes nothing."""
        return self._run(_calls.import_call(user_id, export))  # type: ignore[attr-defined]

    def erase(self, user_id: str):
        """Scrub every piece of content about the user (admin keys); one audit event remains."""
        return self._run(_calls.erase_call(user_id))  # type: ignore[attr-defined]

    def health(self, probe: str = ""):
        """Readiness with details; `probe="ready"` (the load balancer's) or `"live"` (the process answers).
        A server that is not ready raises `Unavailable` (503, `reasons` in `.body`)."""
        return self._run(_calls.health_call(probe))  # type: ignore[attr-defined]


class FactCalls(_calls.FactCalls):
    def iter(self, user_id: str, *, page_size: int = 100, **filters: Any) -> Iterator[models.Fact]:
        """Every fact matching the filters, page after page (cursor pagination)."""
        cursor = None
        while True:
            page = self.list(user_id, cursor=cursor, limit=page_size, **filters)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor


class AsyncFactCalls(_calls.FactCalls):
    async def iter(self, user_id: str, *, page_size: int = 100, **filters: Any) -> AsyncIterator[models.Fact]:
        cursor = None
        while True:
            page = await self.list(user_id, cursor=cursor, limit=page_size, **filters)
            for fact in page.items:
                yield fact
            if not page.next_cursor:
                return
            cursor = page.next_cursor


class EpisodeCalls(_calls.EpisodeCalls):
    def iter(self, user_id: str, *, page_size: int = 100, **filters: Any) -> Iterator[models.Episode]:
        """Every episode matching the filters, page after page."""
        cursor = None
        while True:
            page = self.list(user_id, cursor=cursor, limit=page_size, **filters)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor


class AsyncEpisodeCalls(_calls.EpisodeCalls):
    async def iter(self, user_id: str, *, page_size: int = 100, **filters: Any) -> AsyncIterator[models.Episode]:
        cursor = None
        while True:
            page = await self.list(user_id, cursor=cursor, limit=page_size, **filters)
            for episode in page.items:
                yield episode
            if not page.next_cursor:
                return
            cursor = page.next_cursor


class UserCalls(_calls.UserCalls):
    def iter(self, *, prefix: str | None = None, page_size: int = 100) -> Iterator[models.MemoryUser]:
        cursor = None
        while True:
            page = self.list(prefix=prefix, cursor=cursor, limit=page_size)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor


class AsyncUserCalls(_calls.UserCalls):
    async def iter(self, *, prefix: str | None = None, page_size: int = 100) -> AsyncIterator[models.MemoryUser]:
        cursor = None
        while True:
            page = await self.list(prefix=prefix, cursor=cursor, limit=page_size)
            for user in page.items:
                yield user
            if not page.next_cursor:
                return
            cursor = page.next_cursor


class MemoryAdmin(_ClientBase):
    """The agent API, synchronously.

    `MemoryAdmin(base_url, api_key)`; both default to the environment (`MEMORY_ADMIN_URL`,
    `MEMORY_ADMIN_API_KEY`). Use it as a context manager, or call `close()`.
    """

    _facts_class = FactCalls
    _users_class = UserCalls
    _episodes_class = EpisodeCalls
    facts: FactCalls
    users: UserCalls
    episodes: EpisodeCalls

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ):
        self._http = httpx.Client(
            base_url=_api_root(base_url), headers=_headers(api_key), timeout=timeout, transport=transport
        )
        self._retry = _Retry(max_retries, backoff)
        self._setup()

    def _run(self, call: Call) -> Any:
        attempts = self._retry.attempts(call)
        for attempt in range(attempts):
            try:
                response = self._http.request(call.method, call.path, params=call.params(), **call.content())
                return _answer(call, response)
            except (httpx.TransportError, Unavailable) as exc:
                if not self._retry.retryable(exc) or attempt == attempts - 1:
                    if isinstance(exc, httpx.TransportError):
                        raise _connection_failed(exc) from exc
                    raise
                time.sleep(self._retry.delay(attempt))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMemoryAdmin(_ClientBase):
    """The agent API, with `await`: the same methods as `MemoryAdmin`; `facts.iter` is an async iterator."""

    _facts_class = AsyncFactCalls
    _users_class = AsyncUserCalls
    _episodes_class = AsyncEpisodeCalls
    facts: AsyncFactCalls
    users: AsyncUserCalls
    episodes: AsyncEpisodeCalls

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._http = httpx.AsyncClient(
            base_url=_api_root(base_url), headers=_headers(api_key), timeout=timeout, transport=transport
        )
        self._retry = _Retry(max_retries, backoff)
        self._setup()

    async def _run(self, call: Call) -> Any:
        attempts = self._retry.attempts(call)
        for attempt in range(attempts):
            try:
                response = await self._http.request(call.method, call.path, params=call.params(), **call.content())
                return _answer(call, response)
            except (httpx.TransportError, Unavailable) as exc:
                if not self._retry.retryable(exc) or attempt == attempts - 1:
                    if isinstance(exc, httpx.TransportError):
                        raise _connection_failed(exc) from exc
                    raise
                await asyncio.sleep(self._retry.delay(attempt))
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
