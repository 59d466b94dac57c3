"""`MemoryAdminStore`: a LangGraph `BaseStore` over memory-admin (`pip install 'memory-admin-client[langgraph]'`).

It keeps LangGraph's store contract, as LangGraph's own `InMemoryStore` does: a value put under (namespace,
key) is what `get` gives back, whatever else holds the same text; namespaces of any depth; `ttl` (minutes)
with refresh on read; `index` (which fields a search embeds, or `False`); filters evaluated by the server;
`batch` sends one request per kind of operation (gets, searches, namespace listings, then puts: reads in a
batch see the store as it was before the batch's puts, as in `InMemoryStore`); the async methods are
native (`AsyncMemoryAdmin`).

Store items are keyed records, not facts: they skip the fact write path's dedup, confidence gate and cap
(which would make `put` then `get` lose values), and keep its safety: a secret anywhere in a value raises
`Blocked`, a value that reads as instructions to a model raises `InstructionLike`, and nothing of that
batch is stored. PII the tenant redacts is redacted in the stored value.

Every namespace belongs to one memory user (the tenant's isolation and the keys' user lists apply to it):
`users` maps a namespace to its user by patterns tried in order, `"{user_id}"` marking the user's label
and `"*"` any label. The default, `[("memories", "{user_id}"), ("{user_id}",)]`, gives LangGraph's and
LangMem's `("memories", user_id, ...)` to `user_id`, and any other namespace to its first label. A callable
`namespace -> user id` may be given instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from memory_admin_client._calls import Call
from memory_admin_client.client import AsyncMemoryAdmin, MemoryAdmin

USER = "{user_id}"
DEFAULT_USERS: tuple[tuple[str, ...], ...] = (("memories", USER), (USER,))
CHUNK = 100  # operations of one kind per request (the server's limit)


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class NamespaceUsers:
    """Which memory user a namespace belongs to: the first pattern matching its leading labels names it."""

    def __init__(self, patterns: Sequence[Sequence[str]]):
        self.patterns = [tuple(p) for p in patterns]
        for pattern in self.patterns:
            if list(pattern).count(USER) != 1:
                raise ValueError(f"a namespace pattern holds {USER!r} once: {pattern!r}")

    def __call__(self, namespace: tuple[str, ...]) -> str:
        for pattern in self.patterns:
            if len(pattern) <= len(namespace) and all(
                p in (USER, "*") or p == label for p, label in zip(pattern, namespace, strict=False)
            ):
                return namespace[pattern.index(USER)]
        raise InvalidNamespaceError(f"no memory user in namespace {namespace!r} (patterns: {self.patterns!r})")


class MemoryAdminStore(BaseStore):
    """A LangGraph store backed by memory-admin.

    `MemoryAdminStore(MemoryAdmin(url, key))`; add `async_client=AsyncMemoryAdmin(url, key)` to choose the
    async client (else one is made from the sync client's URL and key, per event loop). `index`: the
    value fields a search embeds (`{"fields": ["text"]}`; default the whole value, `False`: none). `ttl`:
    LangGraph's `TTLConfig` (`default_ttl` minutes, `refresh_on_read`).
    """

    supports_ttl = True

    def __init__(
        self,
        client: MemoryAdmin | None = None,
        *,
        async_client: AsyncMemoryAdmin | None = None,
        users: Sequence[Sequence[str]] | Callable[[tuple[str, ...]], str] = DEFAULT_USERS,
        index: dict[str, Any] | bool | None = None,
        ttl: TTLConfig | None = None,
    ):
        if client is None and async_client is None:
            raise ValueError("give a MemoryAdmin client, an AsyncMemoryAdmin client, or both")
        self.client = client
        self._async_given = async_client
        self._async_made: tuple[asyncio.AbstractEventLoop, AsyncMemoryAdmin] | None = None
        self.user_of = users if callable(users) else NamespaceUsers(users)
        fields = ["$"] if index is None or index is True else (index or {}).get("fields") or ["$"]
        self.fields: list[str] = [] if index is False else list(fields)
        self.ttl_config = ttl

    # --- BaseStore ----------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self.client is None:
            raise RuntimeError("this store was given only an async client: use the a* methods")
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        for call, place in self._plan(ops):
            place(results, self.client._run(call))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        client = self._async_client()
        for call, place in self._plan(ops):
            place(results, await client._run(call))
        return results

    # --- one request per kind of operation -------------------------------------------------------------

    def _plan(self, ops: list[Op]) -> list[tuple[Call, Callable[[list[Result], Any], None]]]:
        """The requests a batch needs, reads first (as InMemoryStore reads before it applies puts), each
        with how its answer fills the results."""
        kinds: dict[type, list[int]] = {GetOp: [], SearchOp: [], ListNamespacesOp: [], PutOp: []}
        for i, op in enumerate(ops):
            if type(op) not in kinds:
                raise TypeError(f"unknown store operation {type(op).__name__}")
            validate_op_namespace(op)
            kinds[type(op)].append(i)
        plan: list[tuple[Call, Callable[[list[Result], Any], None]]] = []
        for refresh in (True, False):
            plan += self._gets(ops, [i for i in kinds[GetOp] if ops[i].refresh_ttl is refresh], refresh)
            plan += self._searches(ops, [i for i in kinds[SearchOp] if ops[i].refresh_ttl is refresh], refresh)
        plan += self._listings(ops, kinds[ListNamespacesOp])
        plan += self._puts(ops, kinds[PutOp])
        return plan

    def _gets(self, ops: list[Any], idx: list[int], refresh: bool) -> list[tuple[Call, Any]]:
        plan = []
        for chunk in _chunks(idx):
            body = {
                "items": [
                    {"user_id": self.user_of(ops[i].namespace), "namespace": list(ops[i].namespace), "key": ops[i].key}
                    for i in chunk
                ],
                "refresh_ttl": refresh,
            }

            def place(results: list[Result], answer: Any, chunk: list[int] = chunk) -> None:
                for i, item in zip(chunk, answer["items"], strict=True):
                    results[i] = _item(Item, item) if item is not None else None

            plan.append((Call("store_get_items", {}, _same, body=body), place))
        return plan

    def _searches(self, ops: list[Any], idx: list[int], refresh: bool) -> list[tuple[Call, Any]]:
        plan = []
        for chunk in _chunks(idx):
            queries = [
                {
                    "namespace_prefix": list(ops[i].namespace_prefix),
                    "query": ops[i].query or None,
                    "filter": ops[i].filter or None,
                    "limit": ops[i].limit,
                    "offset": ops[i].offset,
                }
                for i in chunk
            ]

            def place(results: list[Result], answer: Any, chunk: list[int] = chunk) -> None:
                for i, found in zip(chunk, answer["results"], strict=True):
                    results[i] = [_item(SearchItem, item) for item in found]

            plan.append(
                (Call("store_search_items", {}, _same, body={"queries": queries, "refresh_ttl": refresh}), place)
            )
        return plan

    def _listings(self, ops: list[Any], idx: list[int]) -> list[tuple[Call, Any]]:
        plan = []
        for chunk in _chunks(idx):
            queries = []
            for i in chunk:
                query: dict[str, Any] = {"max_depth": ops[i].max_depth, "limit": ops[i].limit, "offset": ops[i].offset}
                for condition in ops[i].match_conditions or ():
                    if condition.match_type in query:
                        raise ValueError(f"one {condition.match_type} condition per listing")
                    query[condition.match_type] = list(condition.path)
                queries.append(query)

            def place(results: list[Result], answer: Any, chunk: list[int] = chunk) -> None:
                for i, found in zip(chunk, answer["results"], strict=True):
                    results[i] = [tuple(ns) for ns in found]

            plan.append((Call("store_list_namespaces", {}, _same, body={"queries": queries}), place))
        return plan

    def _puts(self, ops: list[Any], idx: list[int]) -> list[tuple[Call, Any]]:
        last = {(ops[i].namespace, ops[i].key): ops[i] for i in idx}  # the last put of a key wins
        items = [self._put_body(op) for op in last.values()]
        return [
            (Call("store_put_items", {}, _same, body={"items": items[n : n + CHUNK]}), _nothing)
            for n in range(0, len(items), CHUNK)
        ]

    def _put_body(self, op: PutOp) -> dict[str, Any]:
        if op.value is not None and not isinstance(op.value, dict):
            raise TypeError("a store value is a dict")
        return {
            "user_id": self.user_of(op.namespace),
            "namespace": list(op.namespace),
            "key": op.key,
            "value": op.value,
            "index": self._texts(op),
            "ttl_minutes": op.ttl,
        }

    def _texts(self, op: PutOp) -> list[dict[str, str]]:
        """The texts to embed, named by path, as InMemoryStore takes them from the value."""
        if op.value is None or op.index is False:
            return []
        paths = self.fields if op.index is None else list(op.index)
        texts = []
        for path in paths:
            found = get_text_at_path(op.value, tokenize_path(path) if path != "$" else path)
            names = [path] if len(found) == 1 else [f"{path}.{n}" for n in range(len(found))]
            texts += [{"path": name, "text": text} for name, text in zip(names, found, strict=True)]
        return texts

    # --- clients ----------------------------------------------------------------------------------

    def _async_client(self) -> AsyncMemoryAdmin:
        if self._async_given is not None:
            return self._async_given
        loop = asyncio.get_running_loop()
        if self._async_made is None or self._async_made[0] is not loop:
            http = self.client._http  # type: ignore[union-attr]
            key = http.headers.get("Authorization", "").removeprefix("Bearer ") or None
            made = AsyncMemoryAdmin(str(http.base_url), key, timeout=http.timeout.read or 30.0)
            self._async_made = (loop, made)
        return self._async_made[1]


def _same(data: Any) -> Any:
    return data


def _nothing(results: list[Result], answer: Any) -> None:
    return None


def _chunks(idx: list[int]) -> list[list[int]]:
    return [idx[n : n + CHUNK] for n in range(0, len(idx), CHUNK)]


def _item(cls: type[Item], data: dict[str, Any]) -> Any:
    fields = {
        "namespace": tuple(data["namespace"]),
        "key": data["key"],
        "value": data["value"],
        "created_at": _parse_time(data["created_at"]),
        "updated_at": _parse_time(data["updated_at"]),
    }
    return SearchItem(**fields, score=data.get("score")) if cls is SearchItem else Item(**fields)
