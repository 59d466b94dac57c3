"""The candidate statement (SPEC §6): which facts a search scores, and what it knows of each.

One statement gathers and describes every candidate: a user's own facts (all of them, exactly, up to
OWN_EXACT_LIMIT; above it the nearest, the keyword matches and the entity-anchored ones), the nearest
shared (org/global) facts through the partial HNSW index `fact_shared_embedding_hnsw`, and the best shared
full-text matches through the partial GIN index `fact_shared_search_gin`; every branch is built by the ORM
from `visible()`, the one access check. Each candidate comes back as a `Candidate`: ranking
reads its fields by name, never by position.

The statement is compiled once per principal and shape and bound per request (`db.compiled`'s sentinels);
it is sent as a prepared statement with binary rows (`db.cursors`).
"""

from __future__ import annotations

import functools
import itertools
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from weakref import WeakKeyDictionary

import numpy as np
from django.contrib.postgres.search import SearchQuery
from django.db import connection, transaction
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from pgvector import Vector

from memory_admin import embedding, scoring
from memory_admin.db.compiled import bind, compiled
from memory_admin.db.cursors import vector_cursor
from memory_admin.models import Entity, Fact, KnowledgeChunk, MemoryUser, Message, Relation
from memory_admin.retrieval.names import name_keys, or_tsquery
from memory_admin.selectors.access import Principal, visible
from memory_admin.services.entity_draw import drawn_names


class Candidate(NamedTuple):
    """One candidate fact as the statement describes it (the columns of `_ROW_SQL`, in order)."""

    id: uuid.UUID
    src: int  # the branch: i < number of users is user i's own facts, then the shared branches
    status: str
    importance: float
    eff_conf: float  # effective confidence, scoring's SQL form
    stale_score: float  # staleness, scoring's SQL form
    age_days: float  # days since the fact became true
    distance: float | None  # cosine distance to the query vector; None without a vector
    matched: int  # bit i: the fact holds the query's i-th lexeme
    doc_len: int  # distinct lexemes
    lexemes: list[str] | None
    ent: tuple[int, int, int] | None  # (named entities mentioned, of them as subject, neighbours mentioned)
    due: list[str] | None  # an undrawn fact's text and what `undrawn_entities` needs; None once drawn
    carried: tuple = ()  # the fact columns a caller asked to carry (`carry`), in that order


N_DESCRIBED = len(Candidate._fields) - 1  # the statement's columns before the carried ones
NO_ENTITY = (0, 0, 0)  # what `ent` means when it is None


# A user's own facts are ranked exactly (every one a candidate) while the user has at most
# OWN_EXACT_LIMIT of them in the statuses and period searched: every LoCoMo dev user (at most 680 turns)
# and every user of the scale benches (100 facts). Above it, where ranking each candidate in Python would
# cost per row (bench/knowledge_search_latency.py's user of 10,000 facts), a search considers the
# OWN_NEAREST facts nearest the query, for each of the query's lexemes the OWN_KEYWORD nearest facts that
# hold it, and the OWN_ENTITY nearest facts that mention an entity the query names or one a relation away
# (messages are capped alike: retrieval/messages.py).
OWN_EXACT_LIMIT = 1000
OWN_NEAREST = 300
OWN_KEYWORD = 20
OWN_ENTITY = 100
SHARED_KEYWORD_SCAN = 300
MAX_LEXEMES = 32
# The entities a query names: by alias at most MAX_QUERY_ENTITIES, those one relation away at most
# MAX_HOP_ENTITIES; when no alias matches, the MAX_EMBEDDED_ENTITIES nearest by embedding at a cosine
# similarity of at least ENTITY_EMBEDDING_MIN (bench/README.md: on the LoCoMo dev split, 92 % of the
# nearest entities above 0.5 and 90 % above 0.45 were the ones the question names by alias; as an addition
# to alias matches it lowered R@10, so it is a fallback for names the aliases miss).
MAX_QUERY_ENTITIES = 16
MAX_HOP_ENTITIES = 64
ENTITY_EMBEDDING_MIN = 0.45
MAX_EMBEDDED_ENTITIES = 2


def hnsw_ef_search(n: int) -> int:
    """The HNSW candidate list for n results: twice n (at least 40), which measured recall@10 of 1.0 on
    100,000 shared facts (bench/scale.py); more only costs time."""
    return min(1000, max(40, 2 * n))


# --- The candidate statement --------------------------------------------------------------------
#
# One statement gathers and describes every candidate: the user's own facts (exact up to OWN_EXACT_LIMIT),
# the nearest shared facts (HNSW) and the best shared full-text matches (GIN), each branch built by the ORM from
# `visible()` so the access check stays the one of selectors.access. The query vector is bound once
# (binary, through pgvector's psycopg dumper) and the query's lexemes are computed once; the per-row
# numbers (effective confidence and staleness in scoring's SQL form, age, cosine distance, which lexemes
# a fact contains as a bitmask, its length) are computed only for the deduplicated candidates.

_QV = "(SELECT v FROM search_qv)"
_DISTANCE = f"memory_admin_fact.embedding <=> {_QV}"
# The query's lexemes (english configuration: stemmed, stopwords dropped), at most MAX_LEXEMES: which of
# them a candidate contains (`matched`, bit i for the i-th) is what its lexemes say (`_matched`), the
# same as a one-lexeme tsquery per lexeme matched against its search_vector in a per-row subquery, which
# cost Postgres ~0.5 ms of planning and execution per search at 1.1M facts (bench/README.md, round 8).
_LEXEMES_CTE = "search_lx AS (SELECT (tsvector_to_array(to_tsvector('english', %s)))[1:" + str(MAX_LEXEMES) + "] AS q)"
# What each branch carries, so that the candidates are described without a second visit to the table.
_CARRIED = (
    "id",
    "status",
    "importance",
    "confidence",
    "pinned",
    "kind",
    "contested",
    "access_count",
    "last_accessed_at",
    "created_at",
    "valid_from",
    "search_vector",
    "entities_due",
)
_ROW_SQL = (
    "SELECT c.id, c.src, c.status, c.importance, {eff_conf} AS eff_conf,"
    " {stale} AS stale_score, GREATEST(0, date_part('epoch', now() - c.valid_from) / 86400.0)::float8 AS age_days,"
    " c.distance, 0::bigint AS matched,"  # set by _matched
    " COALESCE(length(c.search_vector), 0) AS doc_len,"
    # The fact's lexemes (text[]), for the specificity prior's IDF: one function call per row, where a
    # per-row subquery hashing each lexeme cost Postgres ~2 ms per search at 1.1M facts (bench/README.md).
    " tsvector_to_array(c.search_vector) AS lexemes,"
    " {entity_columns}"
    # Deduplicated first (a shared fact can be both near and a keyword match), then described.
    " FROM (SELECT DISTINCT ON (u.id) * FROM ({union}) AS u ORDER BY u.id, u.src) AS c"
)
_STATEMENT = (
    "WITH search_qv AS (SELECT %s::vector AS v), {lexemes}, search_weights AS"
    " (SELECT search_weights::text AS w FROM memory_admin_tenantsettings WHERE tenant_id = %s)"
    # The weights ride on every candidate row (an InitPlan, evaluated once); a search without candidates
    # reads them from the settings instead (`_weights`). A LEFT JOIN to one row, which gave them even then,
    # cost Postgres ~0.4 ms of planning and execution per search at 1.1M facts (bench/README.md, round 8).
    "{entities} SELECT (SELECT w FROM search_weights), (SELECT q FROM search_lx), r.*{present} FROM ({rows}) AS r"
)
_ef_defaults: WeakKeyDictionary = WeakKeyDictionary()


def _ef_default() -> int:
    """The session's hnsw.ef_search, read once per connection: SET LOCAL (a transaction) is needed only
    above it. Unknown (0) until pgvector's library is loaded in the session."""
    raw_connection = connection.connection
    if raw_connection not in _ef_defaults:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('hnsw.ef_search', true)")
            value = cursor.fetchone()[0]
        if not value:
            return 0
        _ef_defaults[raw_connection] = int(value)
    return _ef_defaults[raw_connection]


# Per-request values stand in the cached statement as these sentinels (no real user id is negative, no
# query text holds a NUL character); `_bind` puts the request's values in their place. Branch i's user
# is `_USER_SENTINEL - i`.
_USER_SENTINEL = -7_340_033
_TSQ_SENTINEL = "\x00search-tsquery\x00"
_KEYS_SENTINEL = "\x00search-entity-keys\x00"
_EVEC_SENTINEL = "\x00search-entity-vector\x00"


# The other kinds of hits whose presence a search can ask the candidate statement for (`probe`).
PROBED = ("message", "chunk")


class Gathered(NamedTuple):
    weights: str | None  # the tenant's search weights (JSON text); None without candidates
    rows: list[Candidate]
    present: frozenset[str] | None  # of PROBED, the kinds that may have candidates; None: not known


@dataclass(frozen=True)
class _Shape:
    """What decides the candidate statement's SQL (the cache key, beside the principal)."""

    statuses: tuple[str, ...]
    n_users: int  # one own branch per user
    has_vector: bool
    has_text: bool
    n_shared: int  # rows of each shared branch; 0: none
    entities: bool = False  # the query may name entities (one user only): the entity CTEs and columns are computed
    carry: tuple[str, ...] = ()  # more fact columns at the end of each row (the context block's lines)
    present: bool = False  # each row ends with `_present`: which other kinds may have candidates
    as_of: bool = False  # only the facts valid at a time (`_in_time`)
    between: bool = False  # only the facts observed within a period (`_in_time`)


def _more(shape: _Shape) -> tuple[str, ...]:
    """The carried columns the branches do not carry already."""
    return tuple(name for name in shape.carry if name not in _CARRIED)


_AS_OF_SENTINEL = "\x00search-as-of\x00"
_FROM_SENTINEL = "\x00search-from\x00"
_UNTIL_SENTINEL = "\x00search-until\x00"


def _in_time(facts: QuerySet, shape: _Shape) -> QuerySet:
    """The time filter of a search: `as_of`, the facts valid at that time (observed at or before it, not
    ended by their valid_to or by a successor observed at or before it); `between`, the facts observed
    within [from, until)."""
    if shape.as_of:
        at = RawSQL("%s::timestamptz", (_AS_OF_SENTINEL,))  # noqa: S611 - a bound parameter
        facts = facts.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=at), valid_from__lte=at).exclude(
            superseded_by__valid_from__lte=at
        )
    if shape.between:
        since = RawSQL("%s::timestamptz", (_FROM_SENTINEL,))  # noqa: S611 - a bound parameter
        until = RawSQL("%s::timestamptz", (_UNTIL_SENTINEL,))  # noqa: S611 - a bound parameter
        facts = facts.filter(valid_from__gte=since, valid_from__lt=until)
    return facts


def _own_facts(principal: Principal, shape: _Shape, sentinel: int, distance: RawSQL) -> QuerySet:
    """One user's own facts (the user a sentinel) in the statuses and period searched, with their distance."""
    own = _in_time(visible(principal, Fact.objects.for_user(sentinel).filter(status__in=shape.statuses)), shape)
    return own.annotate(distance=distance)


def _own_size(principal: Principal, shape: _Shape, i: int) -> tuple[str, tuple]:
    """The CTE `own_big_i`: whether user i has more than OWN_EXACT_LIMIT own facts to search (counted
    up to one more, through the index on the user's facts)."""
    sql, params = compiled(
        _own_facts(principal, shape, _USER_SENTINEL - i, RawSQL("NULL", ())).values("id"), tenant_id=principal.tenant_id
    )
    return (
        f", own_big_{i} AS MATERIALIZED (SELECT count(*) > {OWN_EXACT_LIMIT} AS big"
        f" FROM ({sql} LIMIT {OWN_EXACT_LIMIT + 1}) AS n)",
        params,
    )


def _own_branches(principal: Principal, shape: _Shape, i: int, distance: RawSQL) -> list[tuple[str, tuple]]:
    """User i's own facts: all of them (nearest first) while the user has at most OWN_EXACT_LIMIT; above
    it (`own_big_i`), the nearest, the keyword matches and the entity-anchored ones (OWN_EXACT_LIMIT's
    comment)."""
    own = _own_facts(principal, shape, _USER_SENTINEL - i, distance)
    values = (*_CARRIED, *_more(shape), "distance")
    big = f"(SELECT big FROM own_big_{i})"
    if not shape.has_vector:
        # No nearness to cut by: the first OWN_EXACT_LIMIT, and the keyword matches beyond them.
        sql, params = compiled(own.values(*values)[:OWN_EXACT_LIMIT], tenant_id=principal.tenant_id)
        branches = [(sql, params)]
    else:
        sql, params = compiled(own.order_by("distance").values(*values), tenant_id=principal.tenant_id)
        limit = f"CASE WHEN {big} THEN {OWN_NEAREST} ELSE {OWN_EXACT_LIMIT} END"
        branches = [(f"SELECT * FROM ({sql}) AS o LIMIT ({limit})", params)]
    # Below: read only for a user above the limit (`big` is evaluated once; false skips the branch).
    if shape.has_text:
        # Per query lexeme its OWN_KEYWORD matches nearest the query: a rare word's few matches all come
        # in, however many facts a common word of the same query matches (ts_rank has no IDF to prefer it).
        holds = RawSQL(  # noqa: S611 - constant SQL
            "memory_admin_fact.search_vector @@ plainto_tsquery('simple', l.lx)", (), output_field=BooleanField()
        )
        matching = own.filter(holds)
        if shape.has_vector:
            matching = matching.order_by("distance")
        sql, params = compiled(matching.values(*values)[:OWN_KEYWORD], tenant_id=principal.tenant_id)
        branches.append(
            (
                f"SELECT m.* FROM unnest((SELECT q FROM search_lx)) AS l(lx), LATERAL ({sql}) AS m WHERE {big}",
                params,
            )
        )
    if shape.entities:
        mentioning = RawSQL(  # noqa: S611 - constant SQL
            "SELECT fe.fact_id FROM memory_admin_factentity fe, search_ids ids"
            " WHERE fe.entity_id = ANY(ids.ent) OR fe.entity_id = ANY(ids.hop)",
            (),
        )
        anchored = own.filter(pk__in=mentioning)
        if shape.has_vector:
            anchored = anchored.order_by("distance")
        sql, params = compiled(anchored.values(*values)[:OWN_ENTITY], tenant_id=principal.tenant_id)
        branches.append((f"SELECT * FROM ({sql}) AS a WHERE {big}", params))
    return branches


def _branches(principal: Principal, shape: _Shape) -> list[tuple[int, tuple[str, tuple]]]:
    """The candidate branches as (src, (SQL, params)), each built by the ORM from `visible()`, with the
    users and the tsquery as sentinels: user i's own branches (src i), then the shared ones."""
    distance = RawSQL(_DISTANCE if shape.has_vector else "NULL::float8", ())  # noqa: S611 - constant
    branches = [(i, branch) for i in range(shape.n_users) for branch in _own_branches(principal, shape, i, distance)]
    n_shared = shape.n_shared
    if not n_shared:
        return branches
    src = shape.n_users
    shared = _in_time(visible(principal, Fact.objects.filter(memory_user__isnull=True)), shape)
    if shape.has_vector:
        # The condition matches the partial HNSW index (memory_user IS NULL AND status = 'active').
        nearest = (
            shared.active()
            .annotate(distance=distance)
            .order_by("distance")
            .values(*_CARRIED, *_more(shape), "distance")[:n_shared]
        )
        branches.append((src, compiled(nearest, tenant_id=principal.tenant_id)))
        src += 1
    if shape.has_text:
        sq = SearchQuery(_TSQ_SENTINEL, search_type="raw", config="english")
        # Rank only a bounded number of matches (a common word can match most of a large org scope),
        # and keep only the best n of them.
        matching = shared.filter(status__in=shape.statuses, search_vector=sq).annotate(distance=distance)
        sql, params = compiled(
            matching.values(*_CARRIED, *_more(shape), "distance")[:SHARED_KEYWORD_SCAN], tenant_id=principal.tenant_id
        )
        branches.append(
            (
                src,
                (
                    f"SELECT * FROM ({sql}) AS m ORDER BY ts_rank(m.search_vector, to_tsquery('english', %s))"
                    f" DESC LIMIT {int(n_shared)}",
                    (*params, _TSQ_SENTINEL),
                ),
            )
        )
    return branches


# Per candidate, in one index probe of its mentions, and only when the query names an entity at all:
# [which of the named entities it mentions (bit i: search_ent's i-th), which of them as its subject,
# how many entities one relation away from them it mentions].
_ENTITY_COLUMNS = (
    "(SELECT ARRAY[COALESCE(bit_or(1::bigint << (x.p - 1)), 0),"
    " COALESCE(bit_or(1::bigint << (x.p - 1)) FILTER (WHERE x.role = 'subject'), 0), count(*) FILTER (WHERE x.hop)]"
    " FROM (SELECT array_position(ids.ent, fe.entity_id) AS p, fe.role, fe.entity_id = ANY(ids.hop) AS hop"
    " FROM memory_admin_factentity fe, search_ids ids WHERE fe.fact_id = c.id) AS x"
    " WHERE EXISTS (SELECT 1 FROM search_ent)) AS ent"
)
# A fact whose entities are not drawn yet (services/entity_draw.py) has no mentions to probe: for it alone,
# [its text, whether it has mentions anyway (the extractor linked them), how many named entities], from
# which `undrawn_entities` counts what its drawing will link; the first such row also carries the named
# entities' ids and their neighbours' ids (up to 80 ids on each of 5,000 rows cost Postgres ~0.3 s to
# send). NULL for every drawn fact, so a search pays next to nothing for this once drawing caught up.
_DUE = "c.entities_due AND c.status = 'active'"
_DUE_COLUMN = (
    f", CASE WHEN {_DUE} THEN ARRAY[{{content}},"
    " (EXISTS (SELECT 1 FROM memory_admin_factentity d WHERE d.fact_id = c.id))::text,"
    " (SELECT cardinality(ids.ent) FROM search_ids ids)::text]"
    f" || CASE WHEN count(*) FILTER (WHERE {_DUE}) OVER (ROWS UNBOUNDED PRECEDING) = 1"
    " THEN (SELECT (ids.ent || ids.hop)::text[] FROM search_ids ids) END END AS due"
)
_DUE_CONTENT = "(SELECT f.content FROM memory_admin_fact f WHERE f.id = c.id)"
_NO_ENTITY_COLUMNS = "NULL::bigint[] AS ent, NULL::text[] AS due"


def _entity_ctes(principal: Principal) -> tuple[str, tuple]:
    """The entities the query names (`search_ent`: an alias among the query's keys, the user's own or the
    tenant's, through `visible()`) and those one open relation away from them (`search_hop`)."""
    owner = Q(memory_user_id=_USER_SENTINEL) | Q(memory_user__isnull=True)
    entities, e_params = compiled(
        visible(principal, Entity.objects.filter(owner, merged_into__isnull=True)).values("id", "alias_keys"),
        tenant_id=principal.tenant_id,
    )
    # The user's own entities are few (exact, through `entity_owner_seen`); the tenant's can be many
    # (the partial HNSW index `entity_org_embedding_hnsw`, like the shared facts' index).
    near_distance = RawSQL("memory_admin_entity.embedding <=> (SELECT v FROM search_ev)", ())  # noqa: S611
    near = [
        compiled(
            visible(principal, Entity.objects.filter(mine, merged_into__isnull=True, embedding__isnull=False))
            .annotate(distance=near_distance)
            .order_by("distance")
            .values("id", "distance")[:MAX_EMBEDDED_ENTITIES],
            tenant_id=principal.tenant_id,
        )
        for mine in (Q(memory_user_id=_USER_SENTINEL), Q(memory_user__isnull=True))
    ]
    n_params = (*near[0][1], *near[1][1])
    relations, r_params = compiled(
        visible(principal, Relation.objects.filter(owner, valid_to__isnull=True)).values("subject_id", "object_id"),
        tenant_id=principal.tenant_id,
    )
    sql = (
        # The whole query's embedding (the vector component's leaves the names out, see search_vectors).
        ", search_ev AS (SELECT %s::vector AS v),"
        f" search_alias AS MATERIALIZED (SELECT e.id FROM ({entities}) AS e"
        f" WHERE e.alias_keys && %s::varchar[] LIMIT {MAX_QUERY_ENTITIES}),"
        # Only when no alias matched: the entities whose name lies nearest the query's meaning.
        f" search_near AS MATERIALIZED (SELECT e.id FROM (({near[0][0]}) UNION ALL ({near[1][0]})) AS e"
        " WHERE NOT EXISTS (SELECT 1 FROM search_alias)"
        f" AND e.distance <= {1.0 - ENTITY_EMBEDDING_MIN!r} ORDER BY e.distance LIMIT {MAX_EMBEDDED_ENTITIES}),"
        " search_ent AS MATERIALIZED (SELECT s.id, row_number() OVER (ORDER BY s.id) AS i FROM"
        " (SELECT id FROM search_alias UNION ALL SELECT id FROM search_near) AS s),"
        " search_hop AS MATERIALIZED (SELECT DISTINCT CASE WHEN r.subject_id IN (SELECT id FROM search_ent)"
        f" THEN r.object_id ELSE r.subject_id END AS id FROM ({relations}) AS r"
        " WHERE (r.subject_id IN (SELECT id FROM search_ent)"
        f" OR r.object_id IN (SELECT id FROM search_ent)) LIMIT {MAX_HOP_ENTITIES}),"
        " search_ids AS MATERIALIZED (SELECT ARRAY(SELECT id FROM search_ent ORDER BY i) AS ent,"
        " ARRAY(SELECT id FROM search_hop) AS hop)"
    )
    return sql, (_EVEC_SENTINEL, *e_params, _KEYS_SENTINEL, *n_params, *r_params)


def _present(principal: Principal) -> tuple[str, tuple]:
    """The column `present`: [whether the user has an indexed message the principal can see, whether the
    tenant or the user has an active document chunk]. Each kind's own statement reads a subset of these
    rows (retrieval/messages.py, retrieval/chunks.py), so a kind found absent here, in the same snapshot,
    has no candidates: its statement need not be sent. Two index probes, evaluated once per statement."""
    messages, m_params = compiled(
        visible(principal, Message.objects.filter(memory_user_id=_USER_SENTINEL, embedding__isnull=False)).values("id"),
        tenant_id=principal.tenant_id,
    )
    # The tenant's shared chunks and the user's own, each an equality on the index `kchunk_owner_status`.
    shared, own = (
        compiled(
            visible(principal, KnowledgeChunk.objects.filter(owner, status=KnowledgeChunk.Status.ACTIVE)).values("id"),
            tenant_id=principal.tenant_id,
        )
        for owner in (Q(memory_user__isnull=True), Q(memory_user_id=_USER_SENTINEL))
    )
    return (
        f", ARRAY[EXISTS ({messages}), EXISTS ({shared[0]}) OR EXISTS ({own[0]})] AS present",
        (*m_params, *shared[1], *own[1]),
    )


@functools.lru_cache(maxsize=256)
def _statement(principal: Principal, shape: _Shape) -> tuple[str, tuple]:
    """The whole candidate statement and its parameters after the first three (vector, query text,
    tenant), compiled once per principal and shape. The access filter is `visible()`'s own SQL: keyed by
    the whole (frozen) principal, so any field the access check reads gets its own entry."""
    branches = _branches(principal, shape)
    columns = ", ".join(f"b.{name}" for name in (*_CARRIED, *_more(shape), "distance"))
    union = " UNION ALL ".join(f"(SELECT {columns}, {src} AS src FROM ({sql}) AS b)" for src, (sql, _) in branches)
    rows_sql = _ROW_SQL.format(
        eff_conf=scoring.effective_confidence_sql("c"),
        stale=scoring.staleness_sql("c"),
        union=union,
        entity_columns=(
            _ENTITY_COLUMNS + _DUE_COLUMN.format(content="c.content" if "content" in shape.carry else _DUE_CONTENT)
            if shape.entities
            else _NO_ENTITY_COLUMNS
        )
        + "".join(f", c.{name}" for name in shape.carry),
    )
    entities, e_params = _entity_ctes(principal) if shape.entities else ("", ())
    sizes = [_own_size(principal, shape, i) for i in range(shape.n_users)]
    present, p_params = _present(principal) if shape.present else ("", ())
    statement = _STATEMENT.format(
        lexemes=_LEXEMES_CTE, entities=entities + "".join(sql for sql, _ in sizes), present=present, rows=rows_sql
    )
    return statement, (
        *e_params,
        *(p for _, ps in sizes for p in ps),
        *p_params,
        *(p for _, (_, ps) in branches for p in ps),
    )


def _bind(
    params: tuple,
    user_ids: list[int],
    tsq: str,
    keys: list[str] | None = None,
    entity_vector: Vector | None = None,
    as_of: datetime | None = None,
    between: tuple[datetime, datetime] | None = None,
) -> list[Any]:
    """The cached parameters with the request's users, tsquery, name keys, the vector entities are
    recognised by and the time filter in place of the sentinels."""
    values: dict[Any, Any] = {_USER_SENTINEL - i: user_id for i, user_id in enumerate(user_ids)}
    values[_AS_OF_SENTINEL] = as_of.isoformat() if as_of else None
    values[_FROM_SENTINEL], values[_UNTIL_SENTINEL] = (t.isoformat() for t in between) if between else (None, None)
    values[_TSQ_SENTINEL] = tsq
    values[_KEYS_SENTINEL] = keys or []
    values[_EVEC_SENTINEL] = entity_vector
    return bind(params, values)


def candidates(
    principal: Principal,
    memory_users: list[MemoryUser],
    *,
    query: str,
    vector: list[float] | None,
    statuses: tuple[str, ...],
    n_shared: int,
    carry: tuple[str, ...] = (),
    entity_vector: list[float] | None = None,
    as_of: datetime | None = None,
    between: tuple[datetime, datetime] | None = None,
    probe: bool = False,
) -> Gathered:
    """The candidates in one statement, with the tenant's search weights (JSON text; None without
    candidates). Branch i (the row's `src`) holds the own facts of memory_users[i]; the shared branches
    come after them. Entities are recognised by `entity_vector` (the whole query's embedding; `vector`
    when not given). `as_of` and `between` filter them by time (`_in_time`). `probe` (one user): which of
    PROBED may have candidates for that user (`_present`), read in the same statement."""
    tsq = or_tsquery(query) if query else ""
    keys = name_keys(query) if query and len(memory_users) == 1 else []
    # Entities are looked for whenever one user's query has words or a vector (alias match, then embedding).
    entities = bool(keys) or (vector is not None and len(memory_users) == 1)
    probe = probe and len(memory_users) == 1
    shape = _Shape(
        statuses=statuses,
        n_users=len(memory_users),
        has_vector=vector is not None,
        has_text=bool(tsq),
        n_shared=n_shared,
        entities=entities,
        carry=carry,
        present=probe,
        as_of=as_of is not None,
        between=between is not None,
    )
    statement, cached = _statement(principal, shape)
    bound = _as_vector(vector)
    # A query without names has one vector for both: converted once.
    entity_bound = bound if not entity_vector or entity_vector is vector else _as_vector(entity_vector)
    params: list[Any] = [
        bound,
        query[:2000],
        principal.tenant_id,
        *_bind(cached, [u.pk for u in memory_users], tsq, keys, entity_bound, as_of, between),
    ]
    # ef_search bounds the candidate list of the graph walk: it must exceed n, with headroom for the rows
    # of other tenants the access filter removes after the index scan. SET LOCAL (so a transaction) only
    # when the session's value is lower.
    ef = hnsw_ef_search(n_shared)
    raise_ef = vector is not None and n_shared > 0 and ef > _ef_default()
    with transaction.atomic() if raise_ef else nullcontext():
        if raise_ef:
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
        with vector_cursor(binary_results=True, prepared=True) as cursor:
            cursor.execute(statement, params)
            result = cursor.fetchall()
    weights = result[0][0] if result else None
    rows = _matched(result, probe)
    if entities:
        rows = undrawn_entities(rows, keys, entity_vector or vector)
    # Without a row, nothing is known of the other kinds: their statements are sent as ever.
    kinds = frozenset(k for k, found in zip(PROBED, result[0][-1], strict=True) if found) if probe and result else None
    return Gathered(weights, rows, kinds)


def _matched(result: list[tuple], present: bool = False) -> list[Candidate]:
    """The candidates of the statement's result, `matched` set: bit i when the fact's lexemes hold the
    query's i-th lexeme (the query's lexemes are every result row's second column). A result row is
    (weights, the query's lexemes, the N_DESCRIBED described columns, the carried ones, and `present`
    when asked for)."""
    bits = {lexeme: 1 << i for i, lexeme in enumerate(result[0][1] or ())} if result else {}
    query_lexemes = bits.keys()  # lexemes are distinct within a tsvector: the common ones' bits sum to the mask
    end = 2 + N_DESCRIBED
    stop = -1 if present else None
    out = []
    for row in result:
        # (id .. distance), matched, (doc_len .. due), carried
        mask = sum(map(bits.__getitem__, query_lexemes & (row[12] or ()))) if bits else row[10]
        out.append(Candidate(*row[2:10], mask, *row[11:end], row[end:stop]))
    return out


def _as_vector(values: list[float] | None) -> Vector | None:
    return Vector(values) if values is not None else None


def _agrees(key: str, alias_keys: list[str] | set[str]) -> bool:
    """The name `key` is one of the entity's names, or (resolution's step 2) one name's words are a subset
    of the other's, starting with the same word ("caroline" / "caroline smith")."""
    if key in alias_keys:
        return True
    words = key.split()
    return any(
        alias[:1] == words[:1] and (set(alias) <= set(words) or set(words) <= set(alias))
        for alias in (a.split() for a in alias_keys)
    )


def undrawn_entities(
    rows: list[Candidate], keys: list[str], entity_vector: list[float] | None = None
) -> list[Candidate]:
    """The candidates with the entity column of each fact whose drawing has not run yet (its `due`
    column) counted from its text as its drawing would link it: a name it holds is a named entity's
    (one of its names, or agreeing by resolution's step 2), or, named by the query's words and no
    entity yet, a new one; a name one relation away (an open relation, or one the undrawn facts state)
    is a neighbour. So a search ranks alike right after a burst of writes and once drawing caught up
    (bench/drawing_lag.py). Rows unchanged when every candidate is drawn."""
    due = [i for i, row in enumerate(rows) if row.due is not None]
    if not due:
        return rows
    n_named = int(rows[due[0]].due[2])
    ids = next((rows[i].due[3:] for i in due if len(rows[i].due) > 3), [])  # on one row (_DUE_COLUMN)
    alias_keys = dict(Entity.objects.filter(pk__in=ids).values_list("id", "alias_keys")) if ids else {}
    named = [set(alias_keys.get(uuid.UUID(i), ())) for i in ids[:n_named]]
    hop_keys = set().union(*(alias_keys.get(uuid.UUID(i), ()) for i in ids[n_named:]))
    query_keys = set(keys)
    undrawn = {i: drawn_names(rows[i].due[0]) for i in due if rows[i].due[1] != "true"}
    new_names = {
        key
        for mentions, _ in undrawn.values()
        for key, _, _ in mentions
        if key in query_keys and not any(_agrees(key, ks) for ks in named)
    }
    if not new_names and not named and entity_vector is not None:
        new_names = _nearest_names(undrawn, entity_vector)
    # The named entities were recognised by embedding because no alias matched; once drawn, these names
    # would match by alias, and the embedding fallback would not be used.
    elif new_names and named and not any(ks & query_keys for ks in named):
        named, hop_keys = [], set()
        rows = [row._replace(ent=None) for row in rows]
    bits = {key: len(named) + b for b, key in enumerate(sorted(new_names))}
    hop_keys |= _stated_neighbours([relations for _, relations in undrawn.values()], set(bits).union(*named))
    out = list(rows)
    for i, (mentions, _) in undrawn.items():
        out[i] = out[i]._replace(ent=_mention_column(mentions, bits, named, hop_keys))
    return out


# Vectors of the names undrawn facts hold ("Dana Scully (person)", as the entity they make is embedded),
# by that text: a burst's names are embedded once per process, not at every search.
_NAME_VECTORS: dict[str, np.ndarray] = {}
_NAME_VECTORS_MAX = 20000
# Names embedded by one search at most: each costs the embedder milliseconds, on the request (a user's
# 5,000 undrawn candidates may hold 60,000 names: minutes). The names of a larger burst are embedded over
# the next searches, or drawn first; until then they are not found by meaning, as before their drawing.
NAME_EMBEDS_PER_SEARCH = 32


def _nearest_names(undrawn: dict[int, tuple], entity_vector: list[float]) -> set[str]:
    """When no name matches the query's words and no entity lies near its meaning: the names of undrawn
    facts whose entity, once drawn, the embedding fallback would find (the MAX_EMBEDDED_ENTITIES nearest
    the query at ENTITY_EMBEDDING_MIN or more), among the names embedded so far (NAME_EMBEDS_PER_SEARCH)."""
    texts = {key: text for mentions, _ in undrawn.values() for key, _, text in mentions}
    missing = [t for t in dict.fromkeys(texts.values()) if t not in _NAME_VECTORS][:NAME_EMBEDS_PER_SEARCH]
    if missing:
        if len(_NAME_VECTORS) > _NAME_VECTORS_MAX:
            _NAME_VECTORS.clear()
        for text, vector in zip(missing, embedding.embed(missing), strict=True):
            vector = np.asarray(vector, dtype=np.float32)
            _NAME_VECTORS[text] = vector / (np.linalg.norm(vector) or 1.0)
    query = np.asarray(entity_vector, dtype=np.float32)
    query /= np.linalg.norm(query) or 1.0
    near = sorted((-float(_NAME_VECTORS[text] @ query), key) for key, text in texts.items() if text in _NAME_VECTORS)
    return {key for distance, key in near[:MAX_EMBEDDED_ENTITIES] if -distance >= ENTITY_EMBEDDING_MIN}


def _stated_neighbours(relations: list[tuple[tuple[str, str], ...]], named_keys: set[str]) -> set[str]:
    """The names one relation away from a named one, among the relations undrawn facts state."""
    near: set[str] = set()
    for subject, object_ in itertools.chain.from_iterable(relations):
        if subject in named_keys and object_ not in named_keys:
            near.add(object_)
        elif object_ in named_keys and subject not in named_keys:
            near.add(subject)
    return near


def _mention_column(
    mentions: tuple[tuple[str, bool, str], ...], bits: dict[str, int], named: list[set[str]], hop_keys: set[str]
) -> tuple[int, int, int]:
    """An undrawn fact's entity column as the candidate statement gives a drawn one's: (the named
    entities it mentions, bit i for the i-th; those of them it is about; how many neighbours it mentions)."""
    mask = subject_mask = hops = 0
    for key, is_subject, _ in mentions:
        bit = bits.get(key)
        if bit is None:
            bit = next((b for b, ks in enumerate(named) if _agrees(key, ks)), None)
        if bit is not None:
            mask |= 1 << bit
            subject_mask |= is_subject << bit
        elif key in hop_keys:
            hops += 1
    return mask, subject_mask, hops
