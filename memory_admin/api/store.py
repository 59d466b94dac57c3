"""The LangGraph store's items (services/store.py): one route per kind of operation, each taking a batch,
so that a client's `batch` of N operations costs one request per kind."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from ninja import Router, Schema
from pydantic import Field, StrictBool, StrictInt

from memory_admin.api.schemas import MAX_QUERY_CHARS, Metadata, StrictIn, UserId, number, text
from memory_admin.errors import TooLarge
from memory_admin.services.store import (
    NamespaceQuery,
    StorePut,
    StoreRef,
    StoreSearch,
    store_get,
    store_namespaces,
    store_put,
    store_search,
)

router = Router(tags=["langgraph"])

MAX_OPS = 100  # operations of one kind per request (the client sends larger batches in chunks)
MAX_DEPTH = 20
VALUE_MAX_BYTES = 64 * 1024

# A namespace label as LangGraph allows it: non-empty, no period.
Label = text(min_length=1, max_length=200, pattern=r"^[^.]+$")
Namespace = Annotated[list[Label], Field(min_length=1, max_length=MAX_DEPTH)]
Prefix = Annotated[list[Label], Field(max_length=MAX_DEPTH)]
StoreKey = text(min_length=1, max_length=500)
Page = Annotated[StrictInt, Field(ge=1, le=1000)]
Offset = Annotated[StrictInt, Field(ge=0, le=100_000)]


class IndexedText(StrictIn):
    path: text(min_length=1, max_length=200)
    text: text(max_length=VALUE_MAX_BYTES)


class StorePutItemIn(StrictIn):
    user_id: UserId
    namespace: Namespace
    key: StoreKey
    value: Metadata | None = Field(description="The item's value (a JSON object); null deletes the item.")
    index: Annotated[list[IndexedText], Field(max_length=50)] = Field(
        default=[], description="Texts to embed for search, with the path they came from (none: not searchable)."
    )
    ttl_minutes: number(gt=0, le=60 * 24 * 3660) | None = None


class StorePutIn(StrictIn):
    items: Annotated[list[StorePutItemIn], Field(min_length=1, max_length=MAX_OPS)]


class StorePutOut(Schema):
    written: int
    deleted: int


class StoreRefIn(StrictIn):
    user_id: UserId
    namespace: Namespace
    key: StoreKey


class StoreGetIn(StrictIn):
    items: Annotated[list[StoreRefIn], Field(min_length=1, max_length=MAX_OPS)]
    refresh_ttl: StrictBool = True


class StoreItemOut(Schema):
    user_id: str
    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    score: float | None = None

    @classmethod
    def of(cls, item: Any, score: float | None = None) -> StoreItemOut:
        return cls(
            user_id=item.memory_user.external_id,
            namespace=list(item.namespace),
            key=item.key,
            value=item.value,
            created_at=item.created_at,
            updated_at=item.updated_at,
            expires_at=item.expires_at,
            score=score,
        )


class StoreGetOut(Schema):
    items: list[StoreItemOut | None]


class StoreSearchQueryIn(StrictIn):
    namespace_prefix: Prefix = []
    query: text(min_length=1, max_length=MAX_QUERY_CHARS) | None = None
    filter: Metadata | None = None
    limit: Page = 10
    offset: Offset = 0


class StoreSearchIn(StrictIn):
    queries: Annotated[list[StoreSearchQueryIn], Field(min_length=1, max_length=MAX_OPS)]
    refresh_ttl: StrictBool = True


class StoreSearchOut(Schema):
    results: list[list[StoreItemOut]]


# In a match condition `*` stands for any label.
MatchPath = Annotated[list[Label], Field(min_length=1, max_length=MAX_DEPTH)]


class NamespaceQueryIn(StrictIn):
    prefix: MatchPath | None = None
    suffix: MatchPath | None = None
    max_depth: Annotated[StrictInt, Field(ge=1, le=MAX_DEPTH)] | None = None
    limit: Page = 100
    offset: Offset = 0


class StoreNamespacesIn(StrictIn):
    queries: Annotated[list[NamespaceQueryIn], Field(min_length=1, max_length=MAX_OPS)]


class StoreNamespacesOut(Schema):
    results: list[list[list[str]]]


def _check_size(item: StorePutItemIn) -> None:
    size = len(json.dumps(item.value, ensure_ascii=False).encode()) if item.value is not None else 0
    if size > VALUE_MAX_BYTES:
        raise TooLarge(
            f"A store value may hold at most {VALUE_MAX_BYTES} bytes of JSON; {item.key!r} holds {size}.",
            field="value",
            limit=VALUE_MAX_BYTES,
        )


@router.post("/store/put", response=StorePutOut)
def store_put_items(request, payload: StorePutIn):
    """Put (or, with a null value, delete) up to 100 items; all or nothing. A secret refuses the batch
    (`blocked`), so does a value that reads as instructions to a model (`instruction_like`)."""
    for item in payload.items:
        _check_size(item)
    puts = [
        StorePut(
            user_id=i.user_id,
            namespace=tuple(i.namespace),
            key=i.key,
            value=i.value,
            texts=tuple((t.path, t.text) for t in i.index),
            ttl_minutes=float(i.ttl_minutes) if i.ttl_minutes is not None else None,
        )
        for i in payload.items
    ]
    return store_put(principal=request.principal, puts=puts)


@router.post("/store/get", response=StoreGetOut)
def store_get_items(request, payload: StoreGetIn):
    """The items at up to 100 (user, namespace, key) refs, in order (null: none, or expired)."""
    refs = [StoreRef(r.user_id, tuple(r.namespace), r.key) for r in payload.items]
    items = store_get(principal=request.principal, refs=refs, refresh_ttl=payload.refresh_ttl)
    return {"items": [StoreItemOut.of(i) if i is not None else None for i in items]}


@router.post("/store/search", response=StoreSearchOut)
def store_search_items(request, payload: StoreSearchIn):
    """Up to 100 searches, each under a namespace prefix, filtered in SQL, ranked by meaning with a query."""
    searches = [StoreSearch(tuple(q.namespace_prefix), q.query, q.filter, q.limit, q.offset) for q in payload.queries]
    results = store_search(principal=request.principal, searches=searches, refresh_ttl=payload.refresh_ttl)
    return {"results": [[StoreItemOut.of(f.item, f.score) for f in found] for found in results]}


@router.post("/store/namespaces", response=StoreNamespacesOut)
def store_list_namespaces(request, payload: StoreNamespacesIn):
    """The namespaces holding items, for up to 100 queries (prefix/suffix with `*` wildcards, max_depth)."""
    queries = [
        NamespaceQuery(
            tuple(q.prefix) if q.prefix else None,
            tuple(q.suffix) if q.suffix else None,
            q.max_depth,
            q.limit,
            q.offset,
        )
        for q in payload.queries
    ]
    found = store_namespaces(principal=request.principal, queries=queries)
    return {"results": [[list(ns) for ns in namespaces] for namespaces in found]}
