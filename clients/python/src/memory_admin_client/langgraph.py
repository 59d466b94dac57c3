"""`MemoryAdminStore`: a LangGraph `BaseStore` over memory-admin (`pip install 'memory-admin-client[langgraph]'`).

Namespaces are `(user_id,)` for a user's memory and `(user_id, task_id)` for one task of theirs; the store
key is the fact's key. Every `put` goes through the server's write path: a secret raises `Blocked`, and
a write the server keeps out of memory (quarantined, rejected for low confidence, overruled by the
notebook, evicted at once by the cap) raises `WriteRefused`. A `None` value forgets the fact. `search`
with a query uses the server's ranking (`SearchItem.score` is the final score); without one it lists.

The value of an item is `{"content": str, ...}`: `content` is the fact's text; other fields are kept in
the fact's metadata and given back as they were put (`category`, `kind`, `confidence`, `importance` and
`pinned` also set the fact's own fields). A value without `content` is stored as its JSON text.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from memory_admin_client.client import MemoryAdmin
from memory_admin_client.errors import NotFound, WriteRefused, write_refused  # noqa: F401 - WriteRefused: re-exported
from memory_admin_client.models import Fact

# Outcomes after which the value is not what a `get` returns: the put did not take.
REFUSED_OUTCOMES = frozenset({"quarantined", "rejected_low_confidence", "overruled", "capped"})
FACT_FIELDS = {"category": str, "kind": str, "confidence": (int, float), "importance": (int, float), "pinned": bool}
META = "langgraph"  # the metadata entry holding the rest of the value


class MemoryAdminStore(BaseStore):
    """A LangGraph store backed by memory-admin.

    `MemoryAdminStore(MemoryAdmin(url, key))`. `source` and `confidence` are what a put claims about its
    facts (a deliberate `put` is the agent asserting something, hence 0.8 by default: above the default
    gate of 0.7). The async methods run the same calls on a worker thread.
    """

    supports_ttl = False

    def __init__(self, client: MemoryAdmin, *, source: str = "agent_inferred", confidence: float | None = 0.8):
        self.client = client
        self.source = source
        self.confidence = confidence

    # --- BaseStore ----------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._apply(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _apply(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op.namespace, op.key)
        if isinstance(op, PutOp):
            return self._put(op.namespace, op.key, op.value)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"unknown store operation {type(op).__name__}")

    # --- operations ---------------------------------------------------------------------------------

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        fact = self._find(namespace, key)
        return _item(fact) if fact is not None else None

    def _put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any] | None) -> None:
        user_id, task_id = _split(namespace)
        if value is None:
            fact = self._find(namespace, key)
            if fact is not None:
                self.client.facts.forget(fact.id, reason="deleted through the LangGraph store")
            return
        content, fields = _to_fact(value)
        fields.setdefault("confidence", self.confidence)
        result = self.client.facts.add(user_id, content, key=key, task_id=task_id, source=self.source, **fields)
        if result.outcome in REFUSED_OUTCOMES:  # facts.add raises these itself (WriteRefused, by outcome)
            raise write_refused(result)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        items: list[SearchItem] = []
        wanted = op.offset + op.limit
        for user_id in self._users_under(op.namespace_prefix):
            task = op.namespace_prefix[1] if len(op.namespace_prefix) > 1 else None
            try:
                if op.query:
                    # Ask for extra hits: some fall outside the task or the filter.
                    hits = self.client.search(user_id, op.query, k=min(100, max(10, wanted * 3))).hits
                    found = [(h.fact, h.score.final) for h in hits]
                else:
                    found = [(f, None) for f in self.client.facts.iter(user_id)]
            except NotFound:
                continue
            for fact, score in found:
                if task is not None and fact.task_id != task:
                    continue
                item = _item(fact, score)
                if _matches(item.value, op.filter):
                    items.append(item)
        if op.query:
            items.sort(key=lambda i: i.score or 0.0, reverse=True)
        return items[op.offset : op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefix = next((c.path for c in op.match_conditions or () if c.match_type == "prefix"), ())
        user_prefix = prefix[0] if prefix and prefix[0] != "*" else None
        found: list[tuple[str, ...]] = []
        for user in self.client.users.iter(prefix=user_prefix):
            found.append((user.user_id,))
            found.extend((user.user_id, task) for task in user.task_ids)
        found = [ns for ns in found if all(_condition(ns, c) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            found = list(dict.fromkeys(ns[: op.max_depth] for ns in found))
        return found[op.offset : op.offset + op.limit]

    # --- helpers ------------------------------------------------------------------------------------

    def _find(self, namespace: tuple[str, ...], key: str) -> Fact | None:
        user_id, task_id = _split(namespace)
        try:
            for fact in self.client.facts.iter(user_id, key=key):
                if fact.task_id == (task_id or ""):
                    return fact
            if _is_uuid(key):  # a fact written without a key (by another door) is addressed by its id
                fact = self.client.facts.get(key)
                if fact.status == "active" and fact.user_id == user_id and fact.task_id == (task_id or ""):
                    return fact
        except NotFound:
            return None
        return None

    def _users_under(self, prefix: tuple[str, ...]) -> list[str]:
        if prefix:
            return [prefix[0]]
        return [u.user_id for u in self.client.users.iter()]


def _split(namespace: tuple[str, ...]) -> tuple[str, str | None]:
    if not 1 <= len(namespace) <= 2 or not all(isinstance(p, str) and p for p in namespace):
        raise InvalidNamespaceError(f"memory-admin namespaces are (user_id,) or (user_id, task_id), not {namespace!r}")
    return namespace[0], namespace[1] if len(namespace) == 2 else None


def _to_fact(value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if not isinstance(value, dict):
        raise TypeError("a store value is a dict")
    content = value.get("content")
    if isinstance(content, str):
        rest = {k: v for k, v in value.items() if k != "content"}
        meta: dict[str, Any] = {"value": rest}
    else:
        content, rest, meta = json.dumps(value, sort_keys=True, ensure_ascii=False), {}, {"json": True}
    fields = {k: rest[k] for k, kinds in FACT_FIELDS.items() if isinstance(rest.get(k), kinds)}
    return content, {**fields, "metadata": {META: meta}}


def _value(fact: Fact) -> dict[str, Any]:
    meta = fact.metadata.get(META) if isinstance(fact.metadata, dict) else None
    if isinstance(meta, dict) and meta.get("json"):
        try:
            return json.loads(fact.content)
        except ValueError:
            pass
    rest = meta.get("value", {}) if isinstance(meta, dict) else {}
    return {**rest, "content": fact.content}


def _item(fact: Fact, score: float | None = None) -> SearchItem:
    namespace = (fact.user_id or "",) + ((fact.task_id,) if fact.task_id else ())
    return SearchItem(
        namespace=namespace,
        key=fact.key or fact.id,
        value=_value(fact),
        created_at=fact.created_at,
        updated_at=fact.updated_at,
        score=score,
    )


_OPS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _matches(value: dict[str, Any], conditions: dict[str, Any] | None) -> bool:
    for name, wanted in (conditions or {}).items():
        actual = value.get(name)
        if isinstance(wanted, dict) and wanted and all(k in _OPS for k in wanted):
            if not all(_OPS[op](actual, arg) for op, arg in wanted.items()):
                return False
        elif actual != wanted:
            return False
    return True


def _condition(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
