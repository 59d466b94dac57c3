"""Ranked retrieval of facts (SPEC §6): vector, keyword, recency and importance fused into one list.

    relevance = w_vector·vector + w_keyword·keyword + w_recency·recency + w_importance·importance
    final = (relevance + NEIGHBOUR_WEIGHT·neighbour) × (1 + ENTITY_WEIGHT·entity) × length × specificity
            × effective confidence × (0.5 if stale)

Weights come from TenantSettings.search_weights; effective confidence and staleness are the ones of
`memory_admin.scoring` (the same numbers FactOut shows). Components, all in 0..1:

- vector: cosine similarity of query and fact embeddings (pgvector `<=>`, exact `cosine` reported too),
  rescaled min-max over the candidates. A query that holds a name is embedded with and without its
  names and compared by the mix (`search_vectors`, TOPIC_SHARE).
- keyword: BM25 weight of the query's lexemes (Postgres `english` text search: stemmed, stopwords
  removed) that a fact contains, IDF over the candidate facts, relative to the best match. Any lexeme
  may match (an OR query): an AND query misses every fact that lacks one word of a long question, and
  Postgres' ts_rank has no IDF, so a common word and a rare name would count alike.
- recency: exp(−days since the fact became true / RECENCY_DAYS).
- importance: the fact's importance.
- neighbour: the best relevance among other candidates observed within NEIGHBOUR_MINUTES, plus the mean
  of the best NEIGHBOUR_TOP of them, plus ADJACENT_SHARE × the best within ADJACENT_MINUTES (0..3): a
  fact in a stretch of memory where several facts match (a conversation about the task) is lifted more
  than one next to a single match, and the turn right before or after a match more still.
- entity: the entities the query names (an alias of an entity the user reads, matched exactly on the
  query's word n-grams; when none matches, the nearest entities by embedding above ENTITY_EMBEDDING_MIN):
  a fact that mentions them scores the IDF-weighted sum of those it mentions (MENTION_SHARE of an entity
  it names but is not about, i.e. not as its subject), relative to the best such fact;
  a fact that mentions only an entity one open relation away from them scores HOP_SHARE. A fact whose
  entities are not drawn yet (`entities_due`) is counted from its text as its drawing will link it
  (`undrawn_entities`), so the ranking does not depend on how far drawing has caught up.
- length: (distinct lexemes / their mean over the candidates) ** LENGTH_PRIOR, a mild document-length
  prior: a longer statement says more, so it more often holds what a question asks about ("thanks!"
  rarely does); BM25's weak length normalisation alone does not favour it.
- specificity: (the mean IDF of the fact's SPECIFIC_TOP rarest lexemes / its mean over the candidates)
  ** SPECIFICITY_PRIOR, IDF over the candidates as for the keywords: a statement that names something
  particular (a place, a title, a hobby: words the user's other memories rarely use) is favoured over
  small talk made of the words every memory uses ("thanks, that's awesome"). It does not depend on the
  query: it ranks the specific statements of a topic above its chatter, so a question whose answer is
  spread over many statements ("which cities has Jon visited?") finds more of them.
- spread: the SPREAD_TOP best are re-ranked greedily, each pick's final scaled by
  1 − SPREAD_STEP × (the picks already made within NEIGHBOUR_MINUTES of it − SPREAD_FREE + 1) once there
  are SPREAD_FREE of them: the third and later statements of one conversation yield to near-equal ones
  from other conversations (the factor, 1 when nothing yielded, is reported; `final` includes it).

Candidates: a user's own facts are few, so all of them are scored exactly (filtered by user inside the
query, then distance). Shared (org/global) facts can be many: the nearest ones come from the partial
HNSW index `fact_shared_embedding_hnsw`, plus the best full-text matches through the partial GIN index
`fact_shared_search_gin`.
Every query starts from `visible()`, the one access check.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import math
import re
import threading
import time
import uuid
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np
from django.contrib.postgres.search import SearchQuery
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL
from pgvector import Vector

from memory_admin import metrics, scoring
from memory_admin.db_cursors import vector_cursor
from memory_admin.embedding import embed_query, embed_query_topic, search_ahead_submit
from memory_admin.models import Entity, Fact, MemoryUser, Relation
from memory_admin.selectors.access import CURATE, Principal, from_rows, visible
from memory_admin.services.settings import tenant_settings

DEFAULT_STATUSES = (Fact.Status.ACTIVE, Fact.Status.STALE)
INCLUDABLE = ("superseded", "evicted", "quarantined")
RECENCY_DAYS = 30.0
# BM25 constants (the usual ones); tf is 1 per lexeme, so k1 only shapes the length normalisation.
BM25_K1 = 1.2
# Facts are short single statements of similar length: weak length normalisation (0.75 is the usual
# value for documents; on short statements it over-rewards the shortest ones).
BM25_B = 0.3
# Memories recorded together (one conversation, one extraction batch) share context: a fact observed
# within NEIGHBOUR_MINUTES of a strongly matching fact gets NEIGHBOUR_WEIGHT × that fact's relevance.
# It lifts the turn that answers a question when a neighbouring turn carries the question's words.
NEIGHBOUR_MINUTES = 30.0
NEIGHBOUR_WEIGHT = 0.25
NEIGHBOUR_TOP = 3
# The turns right before and after a match (observed within ADJACENT_MINUTES) get more: in a conversation
# the answer is often the reply to the turn that carries the question's words.
ADJACENT_MINUTES = 1.25
ADJACENT_SHARE = 1.0
# Exponent of the length prior (bench/README.md: 0.05 lifted LoCoMo R@10 0.714 -> 0.739; larger values
# lift R@10 more but cost the context block, where a longer fact also costs more tokens).
LENGTH_PRIOR = 0.05
STALE_WEIGHT = 0.5
# Specificity prior (module docstring): the mean IDF of a fact's SPECIFIC_TOP rarest lexemes relative to
# the candidates' mean, ** SPECIFICITY_PRIOR, a fact without lexemes counted SPECIFICITY_FLOOR of the mean.
# bench/README.md "Multi-hop recall, round 6": LoCoMo dev multi-hop R@10 0.525 -> 0.552, pooled 0.790 ->
# 0.791 (the rarest 2 / 3 / 5 lexemes and exponents 0.3-0.8 measured).
SPECIFIC_TOP = 3
SPECIFICITY_PRIOR = 0.4
SPECIFICITY_FLOOR = 0.25
# Spread of the best over conversations (module docstring). bench/README.md "Multi-hop recall, round 6":
# with the specificity prior, LoCoMo dev multi-hop R@10 0.548 -> 0.557 (single-hop 0.867 -> 0.862); windows
# of 0.5-3 h and heads of 20 or 30 gave the same; a step of 0.03 cost single-hop more, 3 free picks lifted less.
SPREAD_TOP = 20
SPREAD_FREE = 2
SPREAD_STEP = 0.02
# Entity-anchored search: the final score is multiplied by (1 + ENTITY_WEIGHT × entity); a fact that names
# an entity of the query without being about it (not its subject) counts MENTION_SHARE of it, a fact one
# relation away HOP_SHARE. Bounds on how many entities a query names and how many neighbours count.
# (Tuned on the LoCoMo dev split, bench/README.md: a factor rather than a share of the relevance, so the
# lift does not spread to the neighbours through their support.)
ENTITY_WEIGHT = 0.6
HOP_SHARE = 0.4
MENTION_SHARE = 0.3
MAX_QUERY_ENTITIES = 16
MAX_HOP_ENTITIES = 64
MAX_NAME_WORDS = 4
# A query that names no entity by alias recognises them by meaning: the MAX_EMBEDDED_ENTITIES entities
# whose embedding ("name (type)") lies nearest the query's, at a cosine similarity of at least
# ENTITY_EMBEDDING_MIN (bench/README.md: on the LoCoMo dev split, 92 % of the nearest entities above 0.5
# and 90 % above 0.45 were the ones the question names by alias; as an addition to alias matches it
# lowered R@10, so it is a fallback for names the aliases miss: a misspelling, a paraphrase).
ENTITY_EMBEDDING_MIN = 0.45
MAX_EMBEDDED_ENTITIES = 2
# A query that holds a name ("What kind of art does Caroline make?") is compared, for the vector
# component, by the normalised mix of its embedding and that of its text without the names ("What kind of
# art does make?"), TOPIC_SHARE of the latter: the whole query's embedding is pulled towards the named
# person's every statement, whichever its topic, while the entity component and the keywords count the
# name already (bench/README.md: LoCoMo dev multi-hop R@10 0.486 -> 0.522, pooled 0.770 -> 0.789). On
# onnx the topic comes from the question's own run (`embed_query_topic`: its tokens outside the names, one
# run instead of two; bench/README.md "Search over HTTP, round 7": multi-hop 0.561 -> 0.550, pooled 0.794
# -> 0.788); the other engines embed the text without the names.
TOPIC_SHARE = 0.6
# A user's own facts above this many are cut to the nearest ones plus the keyword matches: keeps a
# pathological user (hundreds of thousands of rows of history) from turning a search into a scan.
OWN_EXACT_LIMIT = 5000
SHARED_KEYWORD_SCAN = 300
WORD = re.compile(r"[^\W_]+", re.UNICODE)

MAX_LEXEMES = 32


@dataclass
class Hit:
    fact: Fact
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
    spread: float
    effective_confidence: float
    staleness: float
    stale: bool
    final: float

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


def hnsw_ef_search(n: int) -> int:
    """The HNSW candidate list for n results: twice n (at least 40), which measured recall@10 of 1.0 on
    100,000 shared facts (bench/scale.py); more only costs time."""
    return min(1000, max(40, 2 * n))


def or_tsquery(text: str) -> str:
    """A raw tsquery matching any word of the text ('a | b | c'); the english configuration stems the
    words and drops stopwords. Only letters and digits get through, so the text cannot inject syntax."""
    words = list(dict.fromkeys(w.lower() for w in WORD.findall(text)))[:64]
    return " | ".join(words)


def name_keys(text: str) -> list[str]:
    """The query's word n-grams (1 to MAX_NAME_WORDS words) in an entity alias's folded form, the ones
    that could name an entity: a single common word ("the", "what") does not."""
    from memory_admin.services.entity_draw import COMMON

    words = [w.casefold() for w in WORD.findall(text[:2000])][:64]
    keys: dict[str, None] = {}
    for size in range(1, MAX_NAME_WORDS + 1):
        for start in range(len(words) - size + 1):
            gram = words[start : start + size]
            if gram[0] in COMMON and (size == 1 or gram[0] != "the"):
                continue
            if gram[-1] in COMMON and size > 1 and gram != ["the", "user"]:
                continue
            keys[" ".join(gram)] = None
    return list(keys)[:256]


def name_spans(text: str) -> list[tuple[int, int]]:
    """The character spans of the proper names the text holds (entity drawing's `names`, possessives with
    them), in order; a name inside a longer one's span is not counted again."""
    from memory_admin.services.entity_draw import names

    spans: list[tuple[int, int]] = []
    for name in sorted(names(text), key=len, reverse=True):
        for m in re.finditer(r"\b" + re.escape(name) + r"(?:['’]s|s['’])?\b", text):
            if not any(m.start() < b and m.end() > a for a, b in spans):
                spans.append(m.span())
    return sorted(spans)


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    ends = [0, *(i for span in spans for i in span), len(text)]
    return " ".join(" ".join(text[a:b] for a, b in zip(ends[::2], ends[1::2], strict=True)).split())


def without_names(text: str) -> str:
    """The text with the proper names it holds (`name_spans`) left out."""
    return _cut(text, name_spans(text))


def search_vectors(query: str) -> tuple[list[float], list[float]]:
    """(the vector component's query embedding, the whole query's embedding). A query that holds a
    name is compared by TOPIC_SHARE of its meaning without the names (the entity component and the
    keywords count the names): the normalised mix of the whole query's embedding and its topic's
    (`embed_query_topic`: on onnx the same run's tokens outside the names, else the text without them)."""
    head = query[:2000]
    spans = name_spans(head)
    topic = _cut(head, spans)
    if not spans or not WORD.search(topic):
        whole = embed_query(query)
        return whole, whole
    whole, rest = embed_query_topic(query, spans, topic)
    mixed = (1.0 - TOPIC_SHARE) * np.asarray(whole) + TOPIC_SHARE * np.asarray(rest)  # numpy: ~0.2 ms less
    return (mixed / (math.sqrt(mixed @ mixed) or 1.0)).tolist(), whole


# How long a request waits for an idle helper thread to start its query's embedding (VectorsAhead): a
# bound, not the usual wait (tens of microseconds); past it the request goes on and the helper starts
# whenever it gets the GIL.
HANDOFF_WAIT_S = 0.002


class VectorsAhead:
    """`search_vectors(text)` started on a helper thread (`search_ahead_executor`) while the request's
    API key is checked: the key statement waits for Postgres and onnxruntime lets go of the GIL, so the
    embedding and the key check overlap instead of following each other. The API starts one only for a
    key that authenticated in this process before (services.keys.key_seen), so a request without a
    valid key never costs an embedding. `take` hands the vectors to a search of the same text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._started = threading.Event()
        self.future, idle = search_ahead_submit(self._run)
        if idle:
            # Hand the GIL to the helper now. Its Python before the model (spotting names, tokenizing)
            # holds the GIL; left to itself it would start only when this thread next waits, for the key
            # statement, ~0.2-0.3 ms later, and the vectors would come that much later. This thread
            # gets the GIL back as soon as the model runs (onnxruntime lets go of it).
            self._started.wait(HANDOFF_WAIT_S)

    def _run(self) -> tuple[tuple[list[float], list[float]], float]:
        self._started.set()
        started = time.perf_counter()
        vectors = search_vectors(self.text)
        return vectors, (time.perf_counter() - started) * 1000

    def take(self, text: str) -> tuple[tuple[list[float], list[float]], float] | None:
        """(`search_vectors(text)`, the helper's ms) once the helper is done; None for another text, or
        when the helper has not started it yet (cancelled: the caller embeds it itself, at once)."""
        if text != self.text or self.future.cancel():
            return None
        return self.future.result()


def vectors_for(query: str, ahead: VectorsAhead | None) -> tuple[list[float], list[float], dict[str, float]]:
    """`search_vectors(query)`, taken from `ahead` when it embedded this text, and timings in ms: `embed_ms`,
    what this thread spent getting them (the run, or the wait for the helper's); `embed_ahead_ms`, the
    helper's run, when they came from it."""
    started = time.perf_counter()
    taken = ahead.take(query) if ahead is not None else None
    timings: dict[str, float] = {}
    if taken is None:
        vector, whole = search_vectors(query)
    else:
        (vector, whole), timings["embed_ahead_ms"] = taken
    timings["embed_ms"] = (time.perf_counter() - started) * 1000
    return vector, whole, timings


def parse_include(include: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    if not include:
        return ()
    parts = include.split(",") if isinstance(include, str) else list(include)
    return tuple(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))


# --- The candidate statement --------------------------------------------------------------------
#
# One statement gathers and describes every candidate: the user's own facts (exact), the nearest shared
# facts (HNSW) and the best shared full-text matches (GIN), each branch built by the ORM from
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
    "{entities} SELECT (SELECT w FROM search_weights), (SELECT q FROM search_lx), r.* FROM ({rows}) AS r"
)
_ef_defaults: WeakKeyDictionary = WeakKeyDictionary()


def _compiled(qs: QuerySet) -> tuple[str, tuple]:
    sql, params = qs.query.sql_with_params()
    return sql, tuple(params)


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


@dataclass(frozen=True)
class _Shape:
    """What decides the candidate statement's SQL (the cache key, beside the principal)."""

    statuses: tuple[str, ...]
    n_users: int  # one own branch per user
    has_vector: bool
    has_text: bool
    n_shared: int  # rows of each shared branch; 0: none
    own_by_keyword: bool  # a pathological user's second pass: its keyword matches beyond the nearest
    entities: bool = False  # the query may name entities (one user only): the entity CTEs and columns are computed
    carry: tuple[str, ...] = ()  # more fact columns at the end of each row (the context block's lines)


def _more(shape: _Shape) -> tuple[str, ...]:
    """The carried columns the branches do not carry already."""
    return tuple(name for name in shape.carry if name not in _CARRIED)


def _own_branch(principal: Principal, shape: _Shape, sentinel: int, distance: RawSQL) -> tuple[str, tuple]:
    """One user's own facts (the user a sentinel), nearest first when there is a vector."""
    own = visible(principal, Fact.objects.for_user(sentinel).filter(status__in=shape.statuses))
    if shape.own_by_keyword:
        # A pathological user (more than OWN_EXACT_LIMIT facts): the keyword matches beyond the nearest.
        own = own.filter(search_vector=SearchQuery(_TSQ_SENTINEL, search_type="raw", config="english"))
    own = own.annotate(distance=distance)
    if shape.has_vector and not shape.own_by_keyword:
        own = own.order_by("distance")
    return _compiled(own.values(*_CARRIED, *_more(shape), "distance")[:OWN_EXACT_LIMIT])


def _branches(principal: Principal, shape: _Shape) -> list[tuple[str, tuple]]:
    """The candidate branches as (SQL, params), each built by the ORM from `visible()`, with the users
    and the tsquery as sentinels: one branch per user, then the shared ones."""
    distance = RawSQL(_DISTANCE if shape.has_vector else "NULL::float8", ())  # noqa: S611 - constant
    branches = [_own_branch(principal, shape, _USER_SENTINEL - i, distance) for i in range(shape.n_users)]
    n_shared = shape.n_shared
    if not n_shared or shape.own_by_keyword:
        return branches
    shared = visible(principal, Fact.objects.filter(memory_user__isnull=True))
    if shape.has_vector:
        # The condition matches the partial HNSW index (memory_user IS NULL AND status = 'active').
        nearest = (
            shared.active()
            .annotate(distance=distance)
            .order_by("distance")
            .values(*_CARRIED, *_more(shape), "distance")[:n_shared]
        )
        branches.append(_compiled(nearest))
    if shape.has_text:
        sq = SearchQuery(_TSQ_SENTINEL, search_type="raw", config="english")
        # Rank only a bounded number of matches (a common word can match most of a large org scope),
        # and keep only the best n of them.
        matching = shared.filter(status__in=shape.statuses, search_vector=sq).annotate(distance=distance)
        sql, params = _compiled(matching.values(*_CARRIED, *_more(shape), "distance")[:SHARED_KEYWORD_SCAN])
        branches.append(
            (
                f"SELECT * FROM ({sql}) AS m ORDER BY ts_rank(m.search_vector, to_tsquery('english', %s))"
                f" DESC LIMIT {int(n_shared)}",
                (*params, _TSQ_SENTINEL),
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
    entities, e_params = _compiled(
        visible(principal, Entity.objects.filter(owner, merged_into__isnull=True)).values("id", "alias_keys")
    )
    # The user's own entities are few (exact, through `entity_owner_seen`); the tenant's can be many
    # (the partial HNSW index `entity_org_embedding_hnsw`, like the shared facts' index).
    near_distance = RawSQL("memory_admin_entity.embedding <=> (SELECT v FROM search_ev)", ())  # noqa: S611
    near = [
        _compiled(
            visible(principal, Entity.objects.filter(mine, merged_into__isnull=True, embedding__isnull=False))
            .annotate(distance=near_distance)
            .order_by("distance")
            .values("id", "distance")[:MAX_EMBEDDED_ENTITIES]
        )
        for mine in (Q(memory_user_id=_USER_SENTINEL), Q(memory_user__isnull=True))
    ]
    n_params = (*near[0][1], *near[1][1])
    relations, r_params = _compiled(
        visible(principal, Relation.objects.filter(owner, valid_to__isnull=True)).values("subject_id", "object_id")
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


@functools.lru_cache(maxsize=256)
def _statement(principal: Principal, shape: _Shape) -> tuple[str, tuple]:
    """The whole candidate statement and its parameters after the first three (vector, query text,
    tenant), compiled once per principal and shape. The access filter is `visible()`'s own SQL: keyed by
    the whole (frozen) principal, so any field the access check reads gets its own entry."""
    branches = _branches(principal, shape)
    columns = ", ".join(f"b.{name}" for name in (*_CARRIED, *_more(shape), "distance"))
    union = " UNION ALL ".join(
        f"(SELECT {columns}, {i} AS src FROM ({sql}) AS b)" for i, (sql, _) in enumerate(branches)
    )
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
    statement = _STATEMENT.format(lexemes=_LEXEMES_CTE, entities=entities, rows=rows_sql)
    return statement, (*e_params, *(p for _, ps in branches for p in ps))


def _bind(
    params: tuple, user_ids: list[int], tsq: str, keys: list[str] | None = None, entity_vector: Vector | None = None
) -> list[Any]:
    """The cached parameters with the request's users, tsquery, name keys and the vector entities are
    recognised by in place of the sentinels."""
    values: dict[Any, Any] = {_USER_SENTINEL - i: user_id for i, user_id in enumerate(user_ids)}
    values[_TSQ_SENTINEL] = tsq
    values[_KEYS_SENTINEL] = keys or []
    values[_EVEC_SENTINEL] = entity_vector
    return [values.get(p, p) if isinstance(p, int | str) else p for p in params]


def _candidates(
    principal: Principal,
    memory_users: list[MemoryUser],
    *,
    query: str,
    vector: list[float] | None,
    statuses: tuple[str, ...],
    n_shared: int,
    own_by_keyword: bool = False,
    carry: tuple[str, ...] = (),
    entity_vector: list[float] | None = None,
) -> tuple[str | None, list[tuple]]:
    """(tenant search weights as JSON text, None without candidates; candidate rows) in one statement.
    Branch i (the row's `src`) holds the own facts of memory_users[i]; the shared branches come after
    them. Entities are recognised by `entity_vector` (the whole query's embedding; `vector` when not
    given)."""
    tsq = or_tsquery(query) if query else ""
    keys = name_keys(query) if query and len(memory_users) == 1 and not own_by_keyword else []
    # Entities are looked for whenever one user's query has words or a vector (alias match, then embedding).
    entities = bool(keys) or (vector is not None and len(memory_users) == 1 and not own_by_keyword)
    shape = _Shape(
        statuses, len(memory_users), vector is not None, bool(tsq), n_shared, own_by_keyword, entities, carry
    )
    statement, cached = _statement(principal, shape)
    bound = _as_vector(vector)
    # A query without names has one vector for both: converted once.
    entity_bound = bound if not entity_vector or entity_vector is vector else _as_vector(entity_vector)
    params: list[Any] = [
        bound,
        query[:2000],
        principal.tenant_id,
        *_bind(cached, [u.pk for u in memory_users], tsq, keys, entity_bound),
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
    rows = _matched(result)
    return weights, undrawn_entities(rows, keys, entity_vector or vector) if entities else rows


def _matched(result: list[tuple]) -> list[tuple]:
    """The candidate rows of the statement's result, `matched` set: bit i when the fact's lexemes hold the
    query's i-th lexeme (the query's lexemes are every result row's second column)."""
    bits = {lexeme: 1 << i for i, lexeme in enumerate(result[0][1] or ())} if result else {}
    if not bits:
        return [row[2:] for row in result]
    query_lexemes = bits.keys()  # lexemes are distinct within a tsvector: the common ones' bits sum to the mask
    return [
        (
            *row[2 : 2 + MATCHED],
            sum(map(bits.__getitem__, query_lexemes & (row[2 + LEXEMES] or ()))),
            *row[3 + MATCHED :],
        )
        for row in result
    ]


def _as_vector(values: list[float] | None) -> Vector | None:
    return Vector(values) if values is not None else None


_IDS_SENTINEL = object()
_NOT_SHOWN = Fact.VECTORS  # FactOut shows none of them


@functools.lru_cache(maxsize=256)
def _fetch_statement(principal: Principal) -> tuple[str, tuple]:
    """The SQL reading the chosen facts (without their vectors) by id, through `visible()`; the ids
    are one array parameter (in place of `_IDS_SENTINEL`), so the statement is compiled once."""
    ids = RawSQL("SELECT unnest(%s::uuid[])", (_IDS_SENTINEL,))  # noqa: S611 - a bound parameter
    qs = visible(principal, Fact.objects.filter(pk__in=ids)).defer(*_NOT_SHOWN)
    return _compiled(qs)


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
            cursor.execute(sql, [ids if p is _IDS_SENTINEL else p for p in params])
            names = [column.name for column in cursor.description]
            rows = cursor.fetchall()
        facts = from_rows(Fact, names, rows)
    users = {u.pk: u for u in memory_users}
    for fact in facts:
        if fact.memory_user_id in users:
            fact.memory_user = users[fact.memory_user_id]  # known already: no join, no extra query
    return {fact.pk: fact for fact in facts}


# Every column of a fact but its vectors (what FactOut shows), carried by each candidate row when a
# search renders facts: the k best become model instances without a second statement.
_SHOWN = tuple(f.attname for f in Fact._meta.concrete_fields if f.attname != "id" and f.name not in _NOT_SHOWN)


def _facts_carried(rows: list[tuple], memory_user: MemoryUser) -> dict[Any, Fact]:
    """The facts of candidate rows that carry `_SHOWN`, by id, the memory user attached when it is theirs."""
    width = len(_SHOWN)
    facts = from_rows(Fact, ["id", *_SHOWN], [(row[0], *row[-width:]) for row in rows])
    cache = Fact.memory_user.field.set_cached_value  # what assigning it ends with, without its checks
    for fact in facts:
        if fact.memory_user_id == memory_user.pk:
            cache(fact, memory_user)
    return {fact.pk: fact for fact in facts}


@dataclass
class Ranking:
    """Every candidate scored, best first: (final, candidate row, score components); see `_score`."""

    scored: list[tuple[float, tuple, dict]]
    candidates: int
    weights: dict[str, float]
    timings: dict[str, float]


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
    ahead: VectorsAhead | None = None,
) -> Ranking:
    """All of the user's own candidates and `n_shared` shared ones of each kind (nearest, full text),
    scored and ranked, without reading the facts themselves (fact_search reads its k best; the context
    block reads as many as its budget reaches). `carry` names fact columns appended to every candidate
    row (after the scored ones), so that a caller can use the candidates without reading them again.
    A caller that embedded the query itself gives both of `search_vectors`' vectors; `ahead`, vectors
    being embedded for it meanwhile. Timings in ms, not rounded."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    if "quarantined" in include:
        principal.require(CURATE)
    statuses = (*DEFAULT_STATUSES, *[s for s in include if s in INCLUDABLE])
    query = (query or "").strip()
    whole = whole_vector or query_vector
    if query and query_vector is None:
        query_vector, whole, embedded = vectors_for(query, ahead)
        timings.update(embedded)
    vec = query_vector if query else None
    n_shared = n_shared if query else 0

    weights_json, rows = _candidates(
        principal,
        [memory_user],
        query=query,
        vector=vec,
        statuses=statuses,
        n_shared=n_shared,
        carry=carry,
        entity_vector=whole,
    )
    if query and sum(1 for r in rows if r[1] == 0) == OWN_EXACT_LIMIT:
        seen = {r[0] for r in rows}
        _, more = _candidates(
            principal,
            [memory_user],
            query=query,
            vector=vec,
            statuses=statuses,
            n_shared=0,
            own_by_keyword=True,
            carry=carry,
        )
        rows += [r for r in more if r[0] not in seen]
    weights = _weights(weights_json, principal.tenant_id)
    timings["candidates_ms"] = (time.perf_counter() - started) * 1000 - timings.get("embed_ms", 0.0)

    if exclude_ids:
        rows = [r for r in rows if r[0] not in exclude_ids]
    return Ranking(scored=_score(rows, weights), candidates=len(rows), weights=weights, timings=timings)


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
    ahead: VectorsAhead | None = None,
) -> SearchResult:
    """The k best facts for `query` among the user's own and the shared (org/global) facts the
    principal can see. `include` adds superseded/evicted/quarantined facts (quarantined: curators only).
    Reads of the returned facts are counted (services.access_counts) unless `record` is false.
    `n_shared` bounds the shared candidates of each kind (nearest, full text); by default 2k (at least 20).
    `ahead`: the query's vectors, being embedded while the request's key was checked."""
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
        ahead=ahead,
    )
    timings = ranking.timings
    top = ranking.scored[:k]
    if with_notebook:
        facts = _facts_by_id(principal, [row[0] for _, row, _ in top], with_notebook=True, memory_users=[memory_user])
    else:
        facts = _facts_carried([row for _, row, _ in top], memory_user)
    hits = [Hit(fact=facts[row[0]], **parts) for _, row, parts in top if row[0] in facts]
    if record:
        from memory_admin.services.access_counts import record_usage
        from memory_admin.services.facts import record_access

        record_access([h.fact.pk for h in hits])
        record_usage(principal.tenant_id, "search")
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    timings["server_ms_excluding_embed"] = timings["total_ms"] - timings.get("embed_ms", 0.0)
    rounded = {name: round(value, 3) for name, value in timings.items()}
    return SearchResult(hits=hits, candidates=ranking.candidates, weights=ranking.weights, timings=rounded)


def _weights(weights_json: str | None, tenant_id: int) -> dict[str, float]:
    stored = json.loads(weights_json) if weights_json else tenant_settings(tenant_id).search_weights
    return {**{"vector": 0.4, "keyword": 0.3, "recency": 0.2, "importance": 0.1}, **stored}


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
    weights_json, rows = _candidates(
        principal, memory_users, query=query, vector=vec, statuses=statuses, n_shared=0, entity_vector=whole
    )
    weights = _weights(weights_json, principal.tenant_id)
    by_branch: dict[int, list[tuple]] = {}
    for row in rows:
        by_branch.setdefault(row[SRC], []).append(row)
    tops: dict[int, list[tuple[float, tuple, dict]]] = {}
    out: dict[int, list[Hit]] = {}
    for i, memory_user in enumerate(memory_users):
        own = by_branch.get(i, [])
        if query and len(own) == OWN_EXACT_LIMIT:  # a pathological user: fact_search's extra keyword pass
            out[memory_user.pk] = fact_search(
                principal=principal,
                memory_user=memory_user,
                query=query,
                k=k,
                include=include,
                query_vector=vec,
                shared=False,
                record=False,
            ).hits
        else:
            tops[memory_user.pk] = _score(own, weights)[:k]
    facts = _facts_by_id(
        principal,
        [row[ID] for top in tops.values() for _, row, _ in top],
        with_notebook="superseded" in statuses,
        memory_users=memory_users,
    )
    for user_id, top in tops.items():
        out[user_id] = [Hit(fact=facts[row[ID]], **parts) for _, row, parts in top if row[ID] in facts]
    return out


# Columns of a candidate row (see _ROW_SQL).
ID, SRC, STATUS, IMPORTANCE, EFF_CONF, STALE_SCORE, AGE_DAYS, DISTANCE, MATCHED, DOC_LEN, LEXEMES, ENT, DUE = range(13)
_NO_ENTITY = (0, 0, 0)


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


def undrawn_entities(rows: list[tuple], keys: list[str], entity_vector: list[float] | None = None) -> list[tuple]:
    """The candidate rows with the entity column of each fact whose drawing has not run yet (its `due`
    column) counted from its text as its drawing would link it: a name it holds is a named entity's
    (one of its names, or agreeing by resolution's step 2), or, named by the query's words and no
    entity yet, a new one; a name one relation away (an open relation, or one the undrawn facts state)
    is a neighbour. So a search ranks alike right after a burst of writes and once drawing caught up
    (bench/drawing_lag.py). Rows unchanged when every candidate is drawn."""
    due = [i for i, row in enumerate(rows) if row[DUE] is not None]
    if not due:
        return rows
    from memory_admin.services.entity_draw import drawn_names

    n_named = int(rows[due[0]][DUE][2])
    ids = next((rows[i][DUE][3:] for i in due if len(rows[i][DUE]) > 3), [])  # on one row (_DUE_COLUMN)
    alias_keys = dict(Entity.objects.filter(pk__in=ids).values_list("id", "alias_keys")) if ids else {}
    named = [set(alias_keys.get(uuid.UUID(i), ())) for i in ids[:n_named]]
    hop_keys = set().union(*(alias_keys.get(uuid.UUID(i), ()) for i in ids[n_named:]))
    query_keys = set(keys)
    undrawn = {i: drawn_names(rows[i][DUE][0]) for i in due if rows[i][DUE][1] != "true"}
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
        rows = [(*row[:ENT], None, *row[ENT + 1 :]) for row in rows]
    bits = {key: len(named) + b for b, key in enumerate(sorted(new_names))}
    hop_keys |= _stated_neighbours([relations for _, relations in undrawn.values()], set(bits).union(*named))
    out = list(rows)
    for i, (mentions, _) in undrawn.items():
        out[i] = (*out[i][:ENT], _mention_column(mentions, bits, named, hop_keys), *out[i][ENT + 1 :])
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
    from memory_admin.embedding import embed

    texts = {key: text for mentions, _ in undrawn.values() for key, _, text in mentions}
    missing = [t for t in dict.fromkeys(texts.values()) if t not in _NAME_VECTORS][:NAME_EMBEDS_PER_SEARCH]
    if missing:
        if len(_NAME_VECTORS) > _NAME_VECTORS_MAX:
            _NAME_VECTORS.clear()
        for text, vector in zip(missing, embed(missing), strict=True):
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


def _idf(n: int, df: int) -> float:
    """BM25's IDF of a lexeme found in `df` of `n` candidates (the keywords, the entities, specificity)."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def _score(rows: list[tuple], weights: dict[str, float]) -> list[tuple[float, tuple, dict]]:
    """Fuse the components of every candidate; best first. `matched` is a bitmask over the query's
    lexemes (bit i: the fact contains lexeme i)."""
    if not rows:
        return []
    n = len(rows)
    masks = Counter(r[MATCHED] for r in rows)  # few distinct masks: the document frequencies from them
    df = [sum(count for mask, count in masks.items() if mask >> i & 1) for i in range(max(masks).bit_length())]
    idf = [_idf(n, c) for c in df]
    avg_len = sum(r[DOC_LEN] for r in rows) / n or 1.0
    bm25 = []
    idf_sums: dict[int, float] = {}  # many candidates match the same lexemes: sum their IDF once
    for row in rows:
        mask = row[MATCHED]
        if not mask:
            bm25.append(0.0)
            continue
        total = idf_sums.get(mask)
        if total is None:
            total = idf_sums[mask] = sum(w for i, w in enumerate(idf) if mask >> i & 1)
        norm = 1 - BM25_B + BM25_B * (row[DOC_LEN] / avg_len)
        per_term = (BM25_K1 + 1) / (1 + BM25_K1 * norm)
        bm25.append(total * per_term)
    best_keyword = max(bm25) or 1.0
    # Cosine similarity is rescaled over the candidates (min-max), as the keyword score is relative to
    # the best match: raw cosines of one embedding model crowd into a narrow band, which would make the
    # vector weight mean less than its nominal share.
    cosines = [max(0.0, 1.0 - r[DISTANCE]) if r[DISTANCE] is not None else 0.0 for r in rows]
    lo, hi = min(cosines), max(cosines)

    entity = _entity_scores(rows)
    specific = _specificity(rows)
    out = []
    w_vector, w_keyword, w_recency, w_importance = (
        weights.get(name, 0.0) for name in ("vector", "keyword", "recency", "importance")
    )
    stale_status, stale_threshold = Fact.Status.STALE, scoring.STALE_THRESHOLD
    for row, kw, cosine, ent, spec in zip(rows, bm25, cosines, entity, specific, strict=True):
        stale_score = float(row[STALE_SCORE])
        vector = (cosine - lo) / (hi - lo) if hi > lo else float(cosine > 0)
        keyword = kw / best_keyword
        recency = math.exp(-float(row[AGE_DAYS]) / RECENCY_DAYS)
        importance = float(row[IMPORTANCE])
        parts = {
            "vector": vector,
            "cosine": cosine,
            "keyword": keyword,
            "recency": recency,
            "importance": importance,
            "entity": ent,
            "specificity": spec,
            "spread": 1.0,  # _spread sets the factor of each of the best it re-ranks
            "effective_confidence": float(row[EFF_CONF]),
            "staleness": stale_score,
            # scoring.is_stale, on the SQL score.
            "stale": row[STATUS] == stale_status or stale_score > stale_threshold,
            # The weighted sum in the order (and from the 0) of a sum() over the four.
            "relevance": 0 + w_vector * vector + w_keyword * keyword + w_recency * recency + w_importance * importance,
        }
        out.append((row, parts))

    _support(out, n)
    scored = [(parts["final"], row, parts) for row, parts in out]
    # Ties by id: a UUID orders as its canonical text does (fixed-width lowercase hex), without the text.
    scored.sort(key=_rank_key)
    return _spread(scored)


def _rank_key(item: tuple[float, tuple, dict]) -> tuple:
    return (-item[0], -item[2]["vector"], item[1][ID])


def _spread(scored: list[tuple[float, tuple, dict]]) -> list[tuple[float, tuple, dict]]:
    """The SPREAD_TOP best re-ranked greedily (module docstring), then everything in final order again."""
    head, tail = scored[:SPREAD_TOP], scored[SPREAD_TOP:]
    minutes = [float(row[AGE_DAYS]) * 1440.0 for _, row, _ in head]
    near = [[j for j, m in enumerate(minutes) if abs(m - here) <= NEIGHBOUR_MINUTES] for here in minutes]
    picked_near = [0] * len(head)  # picks so far within NEIGHBOUR_MINUTES of each
    left = list(range(len(head)))
    while left:
        best, best_final, best_factor = 0, -1.0, 1.0
        for pos, i in enumerate(left):
            same = picked_near[i]
            factor = 1.0 - SPREAD_STEP * (same - SPREAD_FREE + 1) if same >= SPREAD_FREE else 1.0
            if head[i][0] * factor > best_final:
                best, best_final, best_factor = pos, head[i][0] * factor, factor
        i = left.pop(best)
        for j in near[i]:
            picked_near[j] += 1
        parts = head[i][2]
        parts["spread"] = best_factor
        parts["final"] = best_final
    # Only the head's finals changed (none rose): the tail is in final order already, and follows the
    # re-sorted head unless a pick that yielded fell below the tail's best.
    head = sorted(((parts["final"], row, parts) for _, row, parts in head), key=_rank_key)
    if tail and _rank_key(head[-1]) > _rank_key(tail[0]):
        return sorted(head + tail, key=_rank_key)
    return head + tail


def _entity_scores(rows: list[tuple]) -> list[float]:
    """The entity component of each candidate (module docstring): IDF over the candidates of each named
    entity a fact mentions (MENTION_SHARE of it unless as the fact's subject), relative to the best;
    HOP_SHARE for a fact that mentions only a neighbour of them."""
    ents = [r[ENT] or _NO_ENTITY for r in rows]
    width = max(mask for mask, _, _ in ents).bit_length()
    if not width and not any(hop for _, _, hop in ents):
        return [0.0] * len(rows)
    n = len(rows)
    df = [sum(1 for mask, _, _ in ents if mask >> i & 1) for i in range(width)]
    idf = [_idf(n, c) for c in df]
    direct = [
        sum(w * (1.0 if subject >> i & 1 else MENTION_SHARE) for i, w in enumerate(idf) if mask >> i & 1)
        for mask, subject, _ in ents
    ]
    best = max(direct, default=0.0) or 1.0
    return [d / best if d else (HOP_SHARE if e[2] else 0.0) for e, d in zip(ents, direct, strict=True)]


def _specificity(rows: list[tuple]) -> list[float]:
    """The specificity prior of each candidate (module docstring): the mean IDF over the candidates of
    its SPECIFIC_TOP rarest lexemes, relative to the candidates' mean, ** SPECIFICITY_PRIOR."""
    n = len(rows)
    lexemes = [row[LEXEMES] or () for row in rows]
    df = Counter(itertools.chain.from_iterable(lexemes))
    # The rarest lexemes are those of the lowest document frequency; IDF as the keywords' (_score), for
    # the frequencies that occur.
    idf = {c: _idf(n, c) for c in set(df.values())}
    rarest = (sorted(map(df.__getitem__, own))[:SPECIFIC_TOP] for own in lexemes)
    means = [sum(map(idf.__getitem__, counts)) / SPECIFIC_TOP for counts in rarest]
    average = sum(means) / n
    if not average:
        return [1.0] * n
    return [max(SPECIFICITY_FLOOR, mean / average) ** SPECIFICITY_PRIOR for mean in means]


def _neighbour_support(relevance: list[float], minutes: list[float], pos: int, lo_pos: int, hi_pos: int) -> float:
    """The support of the candidate at `pos` (by time) from the others within NEIGHBOUR_MINUTES of it,
    `lo_pos`..`hi_pos` (at least one); 0.0 without any, as `_support` takes it then."""
    best = sorted(relevance[lo_pos:pos] + relevance[pos + 1 : hi_pos], reverse=True)[:NEIGHBOUR_TOP]
    support = best[0] + sum(best) / NEIGHBOUR_TOP if best else 0.0
    lo_pos = bisect.bisect_left(minutes, minutes[pos] - ADJACENT_MINUTES, lo_pos, pos)
    hi_pos = bisect.bisect_right(minutes, minutes[pos] + ADJACENT_MINUTES, pos, hi_pos)
    return support + ADJACENT_SHARE * max(relevance[lo_pos:pos] + relevance[pos + 1 : hi_pos], default=0.0)


def _support(out: list[tuple[tuple, dict]], n: int) -> None:
    """Neighbour support and the length prior, then `final`. Support: the best relevance among the
    other candidates observed within NEIGHBOUR_MINUTES plus the mean of the best NEIGHBOUR_TOP of them,
    plus ADJACENT_SHARE × the best of those observed within ADJACENT_MINUTES."""
    avg_len = sum(row[DOC_LEN] for row, _ in out) / n or 1.0
    by_time = sorted(range(len(out)), key=lambda i: out[i][0][AGE_DAYS])
    minutes = [float(out[i][0][AGE_DAYS]) * 1440.0 for i in by_time]
    relevance = [out[i][1]["relevance"] for i in by_time]
    for pos, i in enumerate(by_time):
        lo_pos = bisect.bisect_left(minutes, minutes[pos] - NEIGHBOUR_MINUTES, 0, pos)
        hi_pos = bisect.bisect_right(minutes, minutes[pos] + NEIGHBOUR_MINUTES, pos)
        support = _neighbour_support(relevance, minutes, pos, lo_pos, hi_pos) if hi_pos - lo_pos > 1 else 0.0
        row, parts = out[i]
        parts["neighbour"] = support
        parts["length"] = (max(1, row[DOC_LEN]) / avg_len) ** LENGTH_PRIOR
        supported = parts["relevance"] + NEIGHBOUR_WEIGHT * support
        parts["final"] = (
            supported
            * (1.0 + ENTITY_WEIGHT * parts["entity"])
            * parts["length"]
            * parts["specificity"]
            * parts["effective_confidence"]
            * (STALE_WEIGHT if parts["stale"] else 1.0)
        )
