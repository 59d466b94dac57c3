"""The LangGraph store's items (models/checkpoints.py `StoreItem`): put, get, search and list namespaces,
each a batch of one kind of operation, with the semantics of LangGraph's own `InMemoryStore`.

- A put stores the value under (namespace, key) as given, or deletes it (`value` None). Before anything is
  written the whole batch is screened: a secret (or PII the tenant blocks) anywhere in a value or a label
  raises `Blocked`; PII the tenant redacts is redacted in the stored value; a value that reads as
  instructions to a model raises `Invalid` (`instruction_like`). Nothing of a refused batch is stored.
- The texts a put asks to index (the client takes them from the value's paths, LangGraph's syntax) are
  embedded; a search with a query scores an item by its best text (cosine similarity), others by nothing.
- Filters are evaluated in SQL, with `InMemoryStore`'s meaning: equality of a value, a nested object
  matched key by key, a list matched whole, and `$eq $ne $gt $gte $lt $lte` (the last four on numbers).
- TTL: an item with `ttl_minutes` expires that long after its last write (or its last read, when the read
  asks to refresh). Expired items are never served; each put sweeps the tenant's expired items away.
"""

from __future__ import annotations

import functools
import json
import operator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, F, Max, Q, QuerySet, Value
from django.db.models.expressions import RawSQL
from django.utils import timezone
from pgvector.django import CosineDistance

from memory_admin import embedding
from memory_admin.errors import Invalid
from memory_admin.models import MemoryUser, StoreItem, StoreVector
from memory_admin.selectors.access import WRITE_MEMORY, Principal, memory_user_for, visible
from memory_admin.services.audit import audit, buffered_audits
from memory_admin.services.checkpoints import screen_graph_id
from memory_admin.services.guard import refuse_instructions
from memory_admin.services.pii import scan
from memory_admin.services.screening import screen_text
from memory_admin.services.settings import tenant_settings

ROUTE = "store"
# The filters and namespace conditions are SQL built here from these constants and the paths' shapes; every
# value a client sends (labels, keys, filter values, JSON paths) goes in as a parameter (hence the noqa S611).
COMPARISONS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
OPERATORS = frozenset({"$eq", "$ne", *COMPARISONS})


@dataclass(frozen=True)
class StorePut:
    user_id: str
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None
    texts: tuple[tuple[str, str], ...] = ()  # (path, text) to embed
    ttl_minutes: float | None = None


@dataclass(frozen=True)
class StoreRef:
    user_id: str
    namespace: tuple[str, ...]
    key: str


@dataclass(frozen=True)
class StoreSearch:
    namespace_prefix: tuple[str, ...]
    query: str | None = None
    filter: dict[str, Any] | None = None
    limit: int = 10
    offset: int = 0


@dataclass(frozen=True)
class NamespaceQuery:
    prefix: tuple[str, ...] | None = None
    suffix: tuple[str, ...] | None = None
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0


@dataclass(frozen=True)
class Found:
    item: StoreItem
    score: float | None = None


# --- put ------------------------------------------------------------------------------------------------


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_leaves(v))]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return []


def _redacted(value: Any, policy: dict[str, str]) -> Any:
    if isinstance(value, str):
        return scan(value, policy).content
    if isinstance(value, dict):
        return {k: _redacted(v, policy) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, policy) for v in value]
    return value


def _screened(principal: Principal, put: StorePut, memory_user: MemoryUser) -> StorePut:
    """The put as it may be stored: raises Blocked / Invalid, or returns it with PII redacted."""
    for label in (*put.namespace, put.key):
        screen_graph_id(principal, label, what="store namespace or key", route=ROUTE, memory_user_id=memory_user.pk)
    if put.value is None:
        return put
    strings = _leaves(put.value) + [text for _, text in put.texts]
    result = screen_text(principal, "\n".join(strings), route=ROUTE, memory_user_id=memory_user.pk, what="store value")
    refuse_instructions(principal, "\n".join(_leaves(put.value)), what="store value")
    if not result.redacted:
        return put
    policy = tenant_settings(principal.tenant_id).pii_policy
    texts = tuple((path, scan(text, policy).content) for path, text in put.texts)
    return StorePut(put.user_id, put.namespace, put.key, _redacted(put.value, policy), texts, put.ttl_minutes)


def _ref(user: MemoryUser, put: StorePut) -> Q:
    return Q(memory_user=user, namespace=list(put.namespace), key=put.key)


def _delete(principal: Principal, puts: list[StorePut], users: dict[str, MemoryUser]) -> int:
    if not puts:
        return 0
    q = functools.reduce(operator.or_, (_ref(users[p.user_id], p) for p in puts))
    doomed = list(StoreItem.objects.filter(q, tenant_id=principal.tenant_id).values_list("pk", "memory_user_id", "key"))
    StoreItem.objects.filter(pk__in=[pk for pk, _, _ in doomed]).delete()
    for _, memory_user_id, key in doomed:
        audit(
            principal,
            "store.delete",
            outcome="deleted",
            target_type="storeitem",
            target_id=key[:200],
            memory_user_id=memory_user_id,
        )
    return len(doomed)


def _write(principal: Principal, puts: list[StorePut], users: dict[str, MemoryUser], vectors: list) -> int:
    """Upsert the items in one statement (an existing item keeps its `created_at`), then replace their
    vectors: five statements whatever the batch's size."""
    if not puts:
        return 0
    q = functools.reduce(operator.or_, (_ref(users[p.user_id], p) for p in puts))
    rows_before = StoreItem.objects.filter(q, tenant_id=principal.tenant_id)
    existing = {(u, k, tuple(n)) for u, k, n in rows_before.values_list("memory_user_id", "key", "namespace")}
    now = timezone.now()
    rows = [
        StoreItem(
            tenant_id=principal.tenant_id,
            memory_user=users[p.user_id],
            namespace=list(p.namespace),
            key=p.key,
            value=p.value,
            created_at=now,
            updated_at=now,
            ttl_minutes=p.ttl_minutes,
            expires_at=now + timedelta(minutes=p.ttl_minutes) if p.ttl_minutes is not None else None,
        )
        for p in puts
    ]
    StoreItem.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["tenant", "memory_user", "namespace", "key"],
        update_fields=["value", "updated_at", "ttl_minutes", "expires_at"],
    )
    StoreVector.objects.filter(item__in=[r.pk for r in rows]).delete()
    vector = iter(vectors)
    StoreVector.objects.bulk_create(
        StoreVector(item=row, path=path[:200], embedding=next(vector))
        for row, p in zip(rows, puts, strict=True)
        for path, _ in p.texts
    )
    for row, p in zip(rows, puts, strict=True):
        known = (row.memory_user_id, p.key, p.namespace) in existing
        audit(
            principal,
            "store.put",
            outcome="updated" if known else "created",
            target=row,
            after={"namespace": list(p.namespace), "key": p.key[:200], "indexed": len(p.texts)},
        )
    return len(rows)


def store_put(*, principal: Principal, puts: list[StorePut]) -> dict[str, int]:
    """Write a batch of puts (the last put of a (user, namespace, key) wins), all or nothing."""
    principal.require(WRITE_MEMORY)
    last = {(p.user_id, p.namespace, p.key): p for p in puts}
    users = {uid: memory_user_for(principal, uid, create=True) for uid in dict.fromkeys(u for u, _, _ in last)}
    screened = [_screened(principal, p, users[p.user_id]) for p in last.values()]
    texts = [text for p in screened if p.value is not None for _, text in p.texts]
    vectors = embedding.embed(texts) if texts else []
    with transaction.atomic(), buffered_audits():
        StoreItem.objects.filter(tenant_id=principal.tenant_id, expires_at__lte=timezone.now()).delete()
        deleted = _delete(principal, [p for p in screened if p.value is None], users)
        written = _write(principal, [p for p in screened if p.value is not None], users, vectors)
    return {"written": written, "deleted": deleted}


# --- reads --------------------------------------------------------------------------------------------


def _live(principal: Principal) -> QuerySet[StoreItem]:
    now = timezone.now()
    return visible(principal, StoreItem.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)))


def _refresh(items: list[StoreItem]) -> None:
    """Push back the expiry of items read with `refresh_ttl` (those that have a TTL)."""
    ids = [i.pk for i in items if i.ttl_minutes is not None]
    if ids:
        StoreItem.objects.filter(pk__in=ids).update(expires_at=RawSQL("now() + ttl_minutes * interval '1 minute'", ()))


def store_get(*, principal: Principal, refs: list[StoreRef], refresh_ttl: bool) -> list[StoreItem | None]:
    """The item at each ref (None where there is none, or it expired), in order; one query."""
    q = Q(pk__in=[])
    for ref in refs:
        q |= Q(memory_user__external_id=ref.user_id, namespace=list(ref.namespace), key=ref.key)
    rows = _live(principal).filter(q).select_related("memory_user") if refs else []
    found = {(i.memory_user.external_id, tuple(i.namespace), i.key): i for i in rows}
    items = [found.get((r.user_id, r.namespace, r.key)) for r in refs]
    if refresh_ttl:
        _refresh([i for i in found.values()])
    return items


def _path_sql(path: list[str]) -> tuple[str, list[Any]]:
    return "(value #> %s::text[])", [path]


def _operator(path: list[str], op: str, arg: Any) -> tuple[str, list[Any]]:
    if op not in OPERATORS:
        raise Invalid(f"Unknown filter operator {op!r}; use one of {', '.join(sorted(OPERATORS))}.", field="filter")
    if op == "$eq":
        return _condition(path, arg)
    if op == "$ne":
        sql, params = _condition(path, arg)
        return f"NOT COALESCE({sql}, false)", params
    if isinstance(arg, bool) or not isinstance(arg, int | float):
        raise Invalid(f"{op} compares numbers; give a number.", field="filter")
    at, params = _path_sql(path)
    sql = f"(CASE WHEN jsonb_typeof({at}) = 'number' THEN ({at})::text::float8 END) {COMPARISONS[op]} %s"
    return sql, [*params, *params, float(arg)]


def _condition(path: list[str], wanted: Any) -> tuple[str, list[Any]]:
    """SQL for one filter entry on the value at `path`, InMemoryStore's meaning (see module docstring)."""
    at, params = _path_sql(path)
    if isinstance(wanted, dict) and any(str(k).startswith("$") for k in wanted):
        parts = [_operator(path, op, arg) for op, arg in wanted.items()]
        return " AND ".join(f"({sql})" for sql, _ in parts), [p for _, ps in parts for p in ps]
    if isinstance(wanted, dict):
        subs = [_condition([*path, str(k)], v) for k, v in wanted.items()]
        if not subs:
            return f"jsonb_typeof({at}) = 'object'", params
        return " AND ".join(f"({s})" for s, _ in subs), [p for _, ps in subs for p in ps]
    if wanted is None:
        return f"({at} IS NULL OR {at} = 'null'::jsonb)", [*params, *params]
    return f"{at} = %s::jsonb", [*params, json.dumps(wanted)]


def _filtered(queryset: QuerySet[StoreItem], search: StoreSearch) -> QuerySet[StoreItem]:
    n = len(search.namespace_prefix)
    if n:
        queryset = queryset.alias(
            prefix_ok=RawSQL(
                "namespace[1:%s] = %s::varchar[]", (n, list(search.namespace_prefix)), output_field=BooleanField()
            )
        ).filter(prefix_ok=True)
    for i, (name, wanted) in enumerate((search.filter or {}).items()):
        sql, params = _condition([str(name)], wanted)
        queryset = queryset.alias(**{f"f{i}": RawSQL(f"COALESCE({sql}, false)", params, output_field=BooleanField())})  # noqa: S611
        queryset = queryset.filter(**{f"f{i}": True})
    return queryset


def store_search(*, principal: Principal, searches: list[StoreSearch], refresh_ttl: bool) -> list[list[Found]]:
    """Each search's page of items under its namespace prefix that pass its filter: by score when it has a
    query (items without indexed texts after those with), else the most recently updated first."""
    vectors = iter(embedding.embed([s.query for s in searches if s.query]) if any(s.query for s in searches) else [])
    results: list[list[Found]] = []
    read: list[StoreItem] = []
    for search in searches:
        queryset = _filtered(_live(principal), search).select_related("memory_user")
        window = slice(search.offset, search.offset + search.limit)
        if search.query:
            vector = next(vectors)
            scored = queryset.annotate(score=Max(Value(1.0) - CosineDistance("vectors__embedding", vector)))
            rows = list(scored.order_by(F("score").desc(nulls_last=True), "-updated_at", "pk")[window])
            found = [Found(item, float(item.score) if item.score is not None else None) for item in rows]
        else:
            found = [Found(item) for item in queryset.order_by("-updated_at", "pk")[window]]
        results.append(found)
        read.extend(f.item for f in found)
    if refresh_ttl:
        _refresh(read)
    return results


def _match_sql(kind: str, path: tuple[str, ...]) -> tuple[str, list[Any]]:
    parts, params = ["cardinality(namespace) >= %s"], [len(path)]
    for i, label in enumerate(path):
        if label == "*":
            continue
        if kind == "prefix":
            parts.append("namespace[%s] = %s")
            params += [i + 1, label]
        else:
            parts.append("namespace[cardinality(namespace) - %s] = %s")
            params += [len(path) - 1 - i, label]
    return " AND ".join(parts), params


def store_namespaces(*, principal: Principal, queries: list[NamespaceQuery]) -> list[list[tuple[str, ...]]]:
    """For each query, the distinct namespaces (cut to `max_depth`) matching its prefix and suffix, sorted
    as LangGraph sorts tuples of labels; one statement per query."""
    results = []
    for query in queries:
        queryset = _live(principal)
        conditions = [(kind, path) for kind, path in (("prefix", query.prefix), ("suffix", query.suffix)) if path]
        for i, (kind, path) in enumerate(conditions):
            sql, params = _match_sql(kind, path)
            queryset = queryset.alias(**{f"m{i}": RawSQL(sql, params, output_field=BooleanField())})  # noqa: S611
            queryset = queryset.filter(**{f"m{i}": True})
        depth = query.max_depth if query.max_depth is not None else 2**15
        inner, inner_params = (
            queryset.annotate(ns=RawSQL("namespace[1:%s]", (depth,))).values("ns").query.sql_with_params()
        )
        sql = f"SELECT DISTINCT ns FROM ({inner}) AS found ORDER BY ns LIMIT %s OFFSET %s"  # noqa: S608
        with connection.cursor() as cursor:
            cursor.execute(sql, [*inner_params, query.limit, query.offset])
            results.append([tuple(row[0]) for row in cursor.fetchall()])
    return results
