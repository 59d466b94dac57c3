"""Search (SPEC §6): the k best facts for a query among a user's own and the shared ones the principal
can see, read top to bottom: the query's vectors (`query`), the candidates (`candidates`), their ranking
(`ranking`), then the k best read as facts. `fact_ranking` is what the context block builds on."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models.expressions import RawSQL
from django.utils import timezone

from memory_admin import metrics
from memory_admin.db.compiled import bind, compiled
from memory_admin.db.hydrate import hydrate
from memory_admin.models import Fact, MemoryUser
from memory_admin.retrieval.candidates import Candidate, candidates
from memory_admin.retrieval.chunks import chunk_ranking
from memory_admin.retrieval.decompose import QueryShape, shape_of
from memory_admin.retrieval.expand import keyword_text
from memory_admin.retrieval.messages import (
    MessageShown,
    dedupe,
    is_message,
    message_candidates,
    message_shown,
)
from memory_admin.retrieval.query import search_vectors, vectors_for
from memory_admin.retrieval.ranking import NEIGHBOUR_WEIGHT, Scored, score, weights_of
from memory_admin.retrieval.timematch import time_scores, windows
from memory_admin.retrieval.timeq import query_time
from memory_admin.selectors.access import CURATE, Principal, visible
from memory_admin.services.access_counts import record_access, record_usage
from memory_admin.services.settings import tenant_settings

DEFAULT_STATUSES = (Fact.Status.ACTIVE, Fact.Status.STALE)
INCLUDABLE = ("superseded", "evicted", "quarantined")
# The kinds of hits a search may return (KINDS.md); a hit shows the object of its kind, the others None.
KINDS = ("fact", "message", "chunk")
HIT_OBJECTS = ("fact", "message")


@dataclass
class Hit:
    fact: Fact | None
    vector: float
    cosine: float
    keyword: float
    recency: float
    importance: float
    relevance: float
    neighbour: float
    entity: float
    length: float
    specificity: float
    time: float
    spread: float
    effective_confidence: float
    staleness: float
    stale: bool
    final: float
    message: MessageShown | None = None

    @property
    def kind(self) -> str:
        return "message" if self.message is not None else "fact"

    def fact_scores(self) -> tuple[float, float, bool]:
        """(effective confidence, staleness, stale) of the fact as its ranking used them (scoring's formulas,
        evaluated by Postgres for the candidate), for showing the fact (FactOut.of) without evaluating them
        again a moment later; staleness rounded as scoring rounds it."""
        return self.effective_confidence, round(self.staleness, 4), self.stale

    def components(self) -> dict[str, Any]:
        return {
            "vector": round(self.vector, 4),
            "cosine": round(self.cosine, 4),
            "keyword": round(self.keyword, 4),
            "recency": round(self.recency, 4),
            "importance": round(self.importance, 4),
            "relevance": round(self.relevance, 6),
            "neighbour": round(self.neighbour, 6),
            "entity": round(self.entity, 4),
            "length": round(self.length, 4),
            "specificity": round(self.specificity, 4),
            "time": round(self.time, 4),
            "spread": round(self.spread, 4),
            "effective_confidence": round(self.effective_confidence, 4),
            "staleness": round(self.staleness, 4),
            "stale": self.stale,
            "final": round(self.final, 6),
        }


@dataclass
class SearchResult:
    hits: list[Hit]
    candidates: int
    weights: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    # (lowest, highest) cosine of the fact candidates: the scale other kinds' vector component shares.
    cosines: tuple[float, float] | None = None
    present: frozenset[str] | None = None  # Ranking.present


def parse_include(include: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    if not include:
        return ()
    parts = include.split(",") if isinstance(include, str) else list(include)
    return tuple(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))


_IDS_SENTINEL = object()
_NOT_SHOWN = Fact.VECTORS  # FactOut shows none of them


@functools.lru_cache(maxsize=256)
def _fetch_statement(principal: Principal) -> tuple[str, tuple]:
    """The SQL reading the chosen facts (without their vectors) by id, through `visible()`; the ids
    are one array parameter (in place of `_IDS_SENTINEL`), so the statement is compiled once."""
    ids = RawSQL("SELECT unnest(%s::uuid[])", (_IDS_SENTINEL,))  # noqa: S611 - a bound parameter
    qs = visible(principal, Fact.objects.filter(pk__in=ids)).defer(*_NOT_SHOWN)
    return compiled(qs)


def _facts_by_id(
    principal: Principal, ids: list, *, with_notebook: bool, memory_users: list[MemoryUser]
) -> dict[Any, Fact]:
    """The visible facts among `ids` as model instances, by id, their memory user attached without a
    join when it is one of `memory_users`."""
    if with_notebook:
        qs = visible(principal, Fact.objects.filter(pk__in=ids)).defer(*_NOT_SHOWN)
        facts = list(qs.select_related("superseded_by_notebook"))
    elif not ids:
        return {}
    else:
        sql, params = _fetch_statement(principal)
        with connection.cursor() as cursor:
            cursor.execute(sql, bind(params, {_IDS_SENTINEL: ids}))
            names = [column.name for column in cursor.description]
            rows = cursor.fetchall()
        facts = hydrate(Fact, names, rows)
    users = {u.pk: u for u in memory_users}
    for fact in facts:
        if fact.memory_user_id in users:
            fact.memory_user = users[fact.memory_user_id]  # known already: no join, no extra query
    return {fact.pk: fact for fact in facts}


# Every column of a fact but its vectors (what FactOut shows), carried by each candidate row when a
# search renders facts: the k best become model instances without a second statement.
_SHOWN = tuple(f.attname for f in Fact._meta.concrete_fields if f.attname != "id" and f.name not in _NOT_SHOWN)


def _facts_carried(rows: list[Candidate], memory_user: MemoryUser) -> dict[Any, Fact]:
    """The facts of candidate rows that carry `_SHOWN`, by id, the memory user attached when it is theirs."""
    facts = hydrate(Fact, ["id", *_SHOWN], [(row.id, *row.carried) for row in rows])
    cache = Fact.memory_user.field.set_cached_value  # what assigning it ends with, without its checks
    for fact in facts:
        if fact.memory_user_id == memory_user.pk:
            cache(fact, memory_user)
    return {fact.pk: fact for fact in facts}


@dataclass
class Ranking:
    """Every candidate scored, best first: (final, candidate, score components); see `ranking.score`."""

    scored: list[Scored]
    candidates: int
    weights: dict[str, float]
    timings: dict[str, float]
    present: frozenset[str] | None = None  # the kinds the candidate statement found may have hits (PROBED)


def fact_ranking(
    *,
    principal: Principal,
    memory_user: MemoryUser,
    query: str,
    include: tuple[str, ...] = (),
    query_vector: list[float] | None = None,
    n_shared: int = 20,
    exclude_ids: set | None = None,
    carry: tuple[str, ...] = (),
    whole_vector: list[float] | None = None,
    as_of: datetime | None = None,
    between: tuple[datetime, datetime] | None = None,
    messages: bool = False,
    probe: bool | None = None,
) -> Ranking:
    """All of the user's own candidates and `n_shared` shared ones of each kind (nearest, full text),
    scored and ranked, without reading the facts themselves (fact_search reads its k best; the context
    block reads as many as its budget reaches). `carry` names fact columns appended to every candidate
    row (after the scored ones), so that a caller can use the candidates without reading them again.
    A caller that embedded the query itself gives both of `search_vectors`' vectors. `as_of` keeps the facts
    valid at that time (superseded ones included), `between` those observed within [from, until); the
    times the query names are matched against when facts were observed (`time_of`). `messages` ranks the
    user's indexed messages with the facts (retrieval/messages.py), under the same time filters (a message
    counts from when it was said). `probe` asks the candidate statement which other kinds the user
    could have hits of (`Ranking.present`; by default when `messages` is asked). Timings in ms, not rounded."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    if "quarantined" in include:
        principal.require(CURATE)
    statuses = (*DEFAULT_STATUSES, *[s for s in include if s in INCLUDABLE])
    if as_of is not None and "superseded" not in statuses:
        statuses += ("superseded",)  # what was true then may have been corrected since
    query = (query or "").strip()
    whole = whole_vector or query_vector
    if query and query_vector is None:
        query_vector, whole, embedded = vectors_for(query)
        timings.update(embedded)
    vec = query_vector if query else None
    n_shared = n_shared if query else 0
    shape, keywords = read_query(query)

    weights_json, rows, present = candidates(
        principal,
        [memory_user],
        query=keywords,
        vector=vec,
        statuses=statuses,
        n_shared=n_shared,
        carry=carry,
        entity_vector=whole,
        as_of=as_of,
        between=between,
        probe=(messages if probe is None else probe) and bool(query),
    )
    weights = _weights(weights_json, principal.tenant_id)
    timings["candidates_ms"] = (time.perf_counter() - started) * 1000 - timings.get("embed_ms", 0.0)

    if exclude_ids:
        rows = [r for r in rows if r.id not in exclude_ids]
    # Not sent when the candidate statement found that the user has no indexed message.
    if messages and query and (present is None or "message" in present):
        at = time.perf_counter()
        rows += _in_period(message_candidates(principal, memory_user, query=keywords, vector=vec), as_of, between)
        timings["messages_ms"] = (time.perf_counter() - at) * 1000
    matched = time_of(query, rows, as_of) if query else None
    scored = score(rows, weights, matched, negated=negated_lexemes(shape))
    return Ranking(scored=scored, candidates=len(rows), weights=weights, timings=timings, present=present)


def read_query(query: str) -> tuple[QueryShape, str]:
    """The question's shape (retrieval.decompose) and the text its keywords match (retrieval.expand)."""
    return shape_of(query), keyword_text(query) if query else query


def negated_lexemes(shape: QueryShape) -> frozenset[str]:
    """The lexemes of the topic a question negates, as the candidates' lexemes read (english
    configuration); one short statement, only for a question that negates something."""
    if not shape.negated:
        return frozenset()
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [shape.negated])
        return frozenset(cursor.fetchone()[0] or ())


def _in_period(
    rows: list[Candidate], as_of: datetime | None, between: tuple[datetime, datetime] | None
) -> list[Candidate]:
    """The message candidates said by `as_of` and within `between` [from, until) (a message is true from
    when it was said: its age)."""
    if as_of is None and between is None:
        return rows
    now = timezone.now()
    kept = []
    for row in rows:
        said = now - timedelta(days=row.age_days)
        if as_of is not None and said > as_of:
            continue
        if between is not None and not (between[0] <= said < between[1]):
            continue
        kept.append(row)
    return kept


def time_of(query: str, rows: list[Candidate], as_of: datetime | None = None) -> list[float] | None:
    """Each candidate's time component for the times `query` names (`timeq`, `timematch`), relative
    phrases counted from `as_of` or now; None when it names none."""
    now = timezone.now()
    when = query_time(query, as_of or now)
    if not when or not rows:
        return None
    events = {}
    if when.events:
        with connection.cursor() as cursor:
            for event in when.events:
                cursor.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [event.event])
                events[event.event] = cursor.fetchone()[0]
    ages = [float(row.age_days) for row in rows]
    return time_scores(ages, windows(when, now, ages, [row.lexemes for row in rows], events))


@metrics.observe_search
def fact_search(
    *,
    principal: Principal,
    memory_user: MemoryUser,
    query: str,
    k: int = 10,
    include: tuple[str, ...] = (),
    query_vector: list[float] | None = None,
    shared: bool = True,
    record: bool = True,
    exclude_ids: set | None = None,
    n_shared: int | None = None,
    as_of: datetime | None = None,
    between: tuple[datetime, datetime] | None = None,
    kinds: tuple[str, ...] = ("fact",),
    whole_vector: list[float] | None = None,
) -> SearchResult:
    """The k best facts for `query` among the user's own and the shared (org/global) facts the
    principal can see. `include` adds superseded/evicted/quarantined facts (quarantined: curators only).
    Reads of the returned facts are counted (services.access_counts) unless `record` is false.
    `n_shared` bounds the shared candidates of each kind (nearest, full text); by default 2k (at least 20).
    `as_of` and `between` filter by time (`fact_ranking`). `kinds` (KINDS) are the kinds of hits
    returned: with "message", the user's messages are ranked with the facts (the facts are ranked even
    when not shown, so a message scores as it would beside them); with "chunk", the candidate statement also
    says whether a chunk is there to find (`SearchResult.present`), which `memory_search` reads."""
    started = time.perf_counter()
    with_notebook = "superseded" in include
    ranking = fact_ranking(
        principal=principal,
        memory_user=memory_user,
        query=query,
        include=include,
        query_vector=query_vector,
        n_shared=(max(2 * k, 20) if n_shared is None else n_shared) if shared else 0,
        exclude_ids=exclude_ids,
        carry=() if with_notebook else _SHOWN,
        as_of=as_of,
        between=between,
        messages="message" in kinds,
        probe="message" in kinds or "chunk" in kinds,
        whole_vector=whole_vector,
    )
    timings = ranking.timings
    top = _top(ranking.scored, k, kinds, carried=not with_notebook)
    fact_rows = [row for _, row, _ in top if not is_message(row)]
    if with_notebook:
        facts = _facts_by_id(principal, [row.id for row in fact_rows], with_notebook=True, memory_users=[memory_user])
    else:
        facts = _facts_carried(fact_rows, memory_user)
    hits = [
        Hit(fact=None, **parts, message=message_shown(row)) if is_message(row) else Hit(fact=facts[row.id], **parts)
        for _, row, parts in top
        if row.id in facts or is_message(row)
    ]
    if record:
        record_access([h.fact.pk for h in hits if h.fact is not None], principal, "search")
        record_usage(principal.tenant_id, "search")
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    timings["server_ms_excluding_embed"] = timings["total_ms"] - timings.get("embed_ms", 0.0)
    rounded = {name: round(value, 3) for name, value in timings.items()}
    cosines = [parts["cosine"] for _, _, parts in ranking.scored]
    return SearchResult(
        hits=hits,
        candidates=ranking.candidates,
        weights=ranking.weights,
        timings=rounded,
        cosines=(min(cosines), max(cosines)) if cosines else None,
        present=ranking.present,
    )


# --- Hits of every kind (KINDS.md): facts, messages and chunks of documents, ranked together on `final` --


def memory_search(
    *,
    principal: Principal,
    memory_user: MemoryUser,
    query: str,
    k: int = 10,
    include: tuple[str, ...] = (),
    kinds: tuple[str, ...] = KINDS,
    as_of: datetime | None = None,
    between: tuple[datetime, datetime] | None = None,
) -> SearchResult:
    """The k best hits of the kinds asked for, ranked together on `final`: `fact_search`'s facts and the
    user's messages (ranked in one ranking, deduplicated), and the document chunks the principal may read
    for the user (`retrieval.chunks`, whose vector component shares the facts' scale). The time filters
    hold for every kind (a chunk counts from when its page was fetched). Reads of the facts returned are
    counted, as fact_search counts them."""
    started = time.perf_counter()
    vector, whole, timings = vectors_for(query) if query.strip() else (None, None, {})
    hits: list = []
    ranked = tuple(kind for kind in kinds if kind in ("fact", "message"))
    if not ranked:
        result = SearchResult(hits=[], candidates=0, weights=_weights(None, principal.tenant_id))
    else:
        result = fact_search(
            principal=principal,
            memory_user=memory_user,
            query=query,
            k=k,
            include=include,
            query_vector=vector,
            whole_vector=whole,
            record=False,
            kinds=tuple(kind for kind in kinds if kind in KINDS),  # a chunk: only probed for there
            as_of=as_of,
            between=between,
        )
        hits += result.hits
    # Not sent when the candidate statement found no active chunk of the tenant's or the user's.
    if "chunk" in kinds and (result.present is None or "chunk" in result.present):
        chunk_started = time.perf_counter()
        chunks = chunk_ranking(
            principal, memory_user, query=query, vector=whole, weights=result.weights, facts_cosines=result.cosines
        )
        chunks = [chunk for chunk in chunks if _fetched_within(chunk.chunk.fetched_at, as_of, between)]
        hits += chunks[:k]
        result.candidates += len(chunks)
        if chunks and result.cosines:
            lo = min(result.cosines[0], *(c.cosine for c in chunks))
            hi = max(result.cosines[1], *(c.cosine for c in chunks))
            for hit in result.hits:
                _rescale_vector(hit, lo, hi, result.weights)
        timings["chunks_ms"] = (time.perf_counter() - chunk_started) * 1000
    hits.sort(key=lambda h: -h.final)
    result.hits = hits[:k]

    record_access([h.fact.pk for h in result.hits if h.kind == "fact"], principal, "search")
    record_usage(principal.tenant_id, "search")
    timings = {**result.timings, **timings}
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    timings["server_ms_excluding_embed"] = timings["total_ms"] - timings.get("embed_ms", 0.0)
    result.timings = {name: round(value, 3) for name, value in timings.items()}
    return result


def _fetched_within(fetched_at: datetime, as_of: datetime | None, between: tuple[datetime, datetime] | None) -> bool:
    """A chunk under the time filters: fetched by `as_of`, and within `between` [from, until)."""
    if as_of is not None and fetched_at > as_of:
        return False
    return between is None or between[0] <= fetched_at < between[1]


def _rescale_vector(hit: Hit, lo: float, hi: float, weights: dict[str, float]) -> None:
    """A fact hit's vector component rescaled over every candidate of a search of several kinds (its
    cosine between the lowest and the highest of facts and chunks alike, as `chunks.score_chunks` rescales
    a chunk's), its relevance and final following: `final` is (relevance + neighbour support) times
    factors that do not depend on the vector component (ranking.score)."""
    vector = (hit.cosine - lo) / (hi - lo) if hi > lo else hit.vector
    supported = hit.relevance + NEIGHBOUR_WEIGHT * hit.neighbour
    factors = hit.final / supported if supported else 0.0
    hit.relevance += weights.get("vector", 0.0) * (vector - hit.vector)
    hit.vector = vector
    hit.final = (hit.relevance + NEIGHBOUR_WEIGHT * hit.neighbour) * factors


def _top(scored: list[Scored], k: int, kinds: tuple[str, ...], *, carried: bool) -> list[Scored]:
    """The k best of the kinds asked for; facts and messages together deduplicated (messages.dedupe),
    from the message ids the fact candidates carry (`carried`: they carry `_SHOWN`)."""
    if "message" not in kinds:
        return scored[:k] if "fact" in kinds else []
    if "fact" not in kinds:
        return [item for item in scored if is_message(item[1])][:k]
    by_id = {row.id: item for item in scored for row in (item[1],)}
    message_of = _SHOWN.index("message_id") if carried else None
    return [by_id[row.id] for row in dedupe([row for _, row, _ in scored], k, message_of)]


def _weights(weights_json: str | None, tenant_id: int) -> dict[str, float]:
    """The tenant's weights as the candidate statement returned them; without candidates, from its settings."""
    if weights_json:
        return weights_of(weights_json)
    return weights_of(None, tenant_settings(tenant_id).search_weights)


def fact_search_users(
    *,
    principal: Principal,
    memory_users: list[MemoryUser],
    query: str,
    k: int = 10,
    include: tuple[str, ...] = (),
    query_vector: list[float] | None = None,
) -> dict[int, list[Hit]]:
    """`fact_search(shared=False, record=False)` for several users at once (the dashboard's tenant-wide
    search): each user's k best own facts, by user id, ranked exactly as fact_search ranks them (IDF,
    cosine rescaling and neighbours within that user's candidates), from one candidate statement (a
    UNION branch per user) and one read of the facts instead of two queries per user."""
    if "quarantined" in include:
        principal.require(CURATE)
    statuses = (*DEFAULT_STATUSES, *[s for s in include if s in INCLUDABLE])
    query = (query or "").strip()
    if not memory_users:
        return {}
    vec = whole = query_vector
    if query and query_vector is None:
        vec, whole = search_vectors(query)
    vec = vec if query else None
    shape, keywords = read_query(query)
    weights_json, rows, _ = candidates(
        principal, memory_users, query=keywords, vector=vec, statuses=statuses, n_shared=0, entity_vector=whole
    )
    negated = negated_lexemes(shape)
    weights = _weights(weights_json, principal.tenant_id)
    by_branch: dict[int, list[Candidate]] = {}
    for row in rows:
        by_branch.setdefault(row.src, []).append(row)
    tops = {user.pk: score(by_branch.get(i, []), weights, negated=negated)[:k] for i, user in enumerate(memory_users)}
    out: dict[int, list[Hit]] = {}
    facts = _facts_by_id(
        principal,
        [row.id for top in tops.values() for _, row, _ in top],
        with_notebook="superseded" in statuses,
        memory_users=memory_users,
    )
    for user_id, top in tops.items():
        out[user_id] = [Hit(fact=facts[row.id], **parts) for _, row, parts in top if row.id in facts]
    return out


# Columns of a candidate row (see _ROW_SQL).
