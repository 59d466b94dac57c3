"""Ranked retrieval of facts (SPEC §6): vector, keyword, recency and importance fused into one list.

    relevance = w_vector·vector + w_keyword·keyword + w_recency·recency + w_importance·importance
    final = (relevance + NEIGHBOUR_WEIGHT·neighbour) × effective confidence × (0.5 if stale)

Weights come from TenantSettings.search_weights; effective confidence and staleness are the ones of
`memory_admin.scoring` (the same numbers FactOut shows). Components, all in 0..1:

- vector: cosine similarity of query and fact embeddings (pgvector `<=>`, exact `cosine` reported too),
  rescaled min-max over the candidates.
- keyword: BM25 weight of the query's lexemes (Postgres `english` text search: stemmed, stopwords
  removed) that a fact contains, IDF over the candidate facts, relative to the best match. Any lexeme
  may match (an OR query): an AND query misses every fact that lacks one word of a long question, and
  Postgres' ts_rank has no IDF, so a common word and a rare name would count alike.
- recency: exp(−days since the fact became true / RECENCY_DAYS).
- importance: the fact's importance.
- neighbour: the best relevance among other candidates observed within NEIGHBOUR_MINUTES.

Candidates: a user's own facts are few, so all of them are scored exactly (filtered by user inside the
query, then distance). Shared (org/global) facts can be many: the nearest ones come from the partial
HNSW index `fact_shared_embedding_hnsw`, plus the best full-text matches through the partial GIN index
`fact_shared_search_gin`.
Every query starts from `visible()`, the one access check.
"""

from __future__ import annotations

import bisect
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection, transaction
from django.db.models import F, FloatField, IntegerField, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from pgvector.django import CosineDistance

from memory_admin import scoring
from memory_admin.embeddings import embed_one
from memory_admin.models import Fact, MemoryUser
from memory_admin.selectors.access import CURATE, Principal, visible
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
STALE_WEIGHT = 0.5
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
    effective_confidence: float
    staleness: float
    stale: bool
    final: float

    def components(self) -> dict[str, Any]:
        return {
            "vector": round(self.vector, 4),
            "cosine": round(self.cosine, 4),
            "keyword": round(self.keyword, 4),
            "recency": round(self.recency, 4),
            "importance": round(self.importance, 4),
            "relevance": round(self.relevance, 6),
            "neighbour": round(self.neighbour, 6),
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


def parse_include(include: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    if not include:
        return ()
    parts = include.split(",") if isinstance(include, str) else list(include)
    return tuple(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))


def query_lexemes(query: str) -> list[str]:
    """The query as Postgres' english configuration sees it: stemmed lexemes, stopwords removed."""
    if not query:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [query[:2000]])
        return list(cursor.fetchone()[0] or [])[:MAX_LEXEMES]


def _tsquery_literal(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _annotate(qs: QuerySet[Fact], lexemes: list[str], vector: list[float] | None) -> QuerySet[Fact]:
    """Per row, all computed by Postgres so that only numbers travel: cosine distance, which query
    lexemes the fact contains, its length in lexemes, its age, and effective confidence and staleness
    in the SQL form of `scoring` (the same formulas FactOut uses in Python)."""
    if lexemes:
        # One tsvector lookup per lexeme (a binary search); the lexemes are bound parameters.
        matched = RawSQL(  # noqa: S611
            "ARRAY[" + ", ".join(["memory_admin_fact.search_vector @@ %s::tsquery"] * len(lexemes)) + "]",
            [_tsquery_literal(lex) for lex in lexemes],
        )
    else:
        matched = RawSQL("ARRAY[]::boolean[]", ())
    qs = scoring.annotate_scores(qs).annotate(
        matched=matched,
        doc_len=Coalesce(RawSQL("length(memory_admin_fact.search_vector)", (), output_field=IntegerField()), 0),
        age_days=RawSQL("GREATEST(0, EXTRACT(EPOCH FROM (now() - memory_admin_fact.valid_from)) / 86400.0)", (),
                        output_field=FloatField()),
    )
    if vector is not None:
        qs = qs.annotate(distance=CosineDistance("embedding", vector))
    else:
        qs = qs.annotate(distance=RawSQL("1.0", (), output_field=FloatField()))
    return qs


_COLUMNS = ("id", "status", "importance", "eff_conf", "stale_score", "age_days", "distance", "matched", "doc_len")


def _rows(qs: QuerySet[Fact]) -> list[dict]:
    return [dict(zip(_COLUMNS, values, strict=True)) for values in qs.values_list(*_COLUMNS)]


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
) -> SearchResult:
    """The k best facts for `query` among the user's own and the shared (org/global) facts the
    principal can see. `include` adds superseded/evicted/quarantined facts (quarantined: curators only).
    Access counts of the returned facts are bumped in one UPDATE unless `record` is false."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    if "quarantined" in include:
        principal.require(CURATE)
    statuses = (*DEFAULT_STATUSES, *[s for s in include if s in INCLUDABLE])
    query = (query or "").strip()
    if query and query_vector is None:
        t0 = time.perf_counter()
        query_vector = embed_one(query)
        timings["embed_ms"] = (time.perf_counter() - t0) * 1000
    weights = {**{"vector": 0.4, "keyword": 0.3, "recency": 0.2, "importance": 0.1},
               **tenant_settings(principal.tenant_id).search_weights}
    vec = query_vector if query else None
    lexemes = query_lexemes(query)

    # 1. The user's own facts: exact, filtered by user inside the query.
    own = visible(principal, Fact.objects.filter(memory_user=memory_user, status__in=statuses))
    own = _annotate(own, lexemes, vec)
    if vec is not None:
        own = own.order_by("distance")
    rows = _rows(own[:OWN_EXACT_LIMIT])
    if len(rows) == OWN_EXACT_LIMIT and query:
        seen = {r["id"] for r in rows}
        keyword_own = visible(principal, Fact.objects.filter(
            memory_user=memory_user, status__in=statuses,
            search_vector=SearchQuery(or_tsquery(query), search_type="raw", config="english")))
        rows += [r for r in _rows(_annotate(keyword_own, lexemes, vec)[:OWN_EXACT_LIMIT]) if r["id"] not in seen]

    # 2. Shared scopes (memory_user NULL): approximate nearest neighbours plus full-text matches.
    if shared and query:
        n = max(2 * k, 20)
        seen = {r["id"] for r in rows}
        shared_qs = visible(principal, Fact.objects.filter(memory_user__isnull=True))
        # The condition matches the partial HNSW index (memory_user IS NULL AND status = 'active').
        nearest = _annotate(shared_qs.filter(status=Fact.Status.ACTIVE), lexemes, vec).order_by("distance")[:n]
        with transaction.atomic():
            with connection.cursor() as cursor:
                # ef_search bounds the candidate list of the graph walk: it must exceed n, with headroom
                # for the rows of other tenants the access filter removes after the index scan.
                cursor.execute("SET LOCAL hnsw.ef_search = %s", [hnsw_ef_search(n)])
            rows += [r for r in _rows(nearest) if r["id"] not in seen]
        seen = {r["id"] for r in rows}
        tsq = or_tsquery(query)
        if tsq:
            sq = SearchQuery(tsq, search_type="raw", config="english")
            matching = shared_qs.filter(status__in=statuses, search_vector=sq)
            # Rank only a bounded number of matches (a common word can match most of a large org scope),
            # and score only the best n of them.
            bounded = Fact.objects.filter(pk__in=matching.values("pk")[:SHARED_KEYWORD_SCAN])
            ranked = bounded.annotate(rank=SearchRank(F("search_vector"), sq)).order_by("-rank")
            top_ids = ranked.values_list("pk", flat=True)[:n]
            best = _annotate(Fact.objects.filter(pk__in=list(top_ids)), lexemes, vec)
            rows += [r for r in _rows(best) if r["id"] not in seen]
    timings["candidates_ms"] = (time.perf_counter() - started) * 1000 - timings.get("embed_ms", 0.0)

    if exclude_ids:
        rows = [r for r in rows if r["id"] not in exclude_ids]
    scored = _score(rows, weights)
    top = scored[:k]
    facts = {
        f.pk: f
        for f in visible(principal, Fact.objects.filter(pk__in=[s[1]["id"] for s in top]))
        .select_related("memory_user", "superseded_by_notebook")
        .defer("embedding", "search_vector")
    }
    hits = [Hit(fact=facts[row["id"]], **parts) for _, row, parts in top if row["id"] in facts]
    if record and hits:
        from memory_admin.services.facts import record_access

        record_access([h.fact.pk for h in hits])
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    timings["server_ms_excluding_embed"] = timings["total_ms"] - timings.get("embed_ms", 0.0)
    rounded = {name: round(value, 3) for name, value in timings.items()}
    return SearchResult(hits=hits, candidates=len(rows), weights=weights, timings=rounded)


def _score(rows: list[dict], weights: dict[str, float]) -> list[tuple[float, dict, dict]]:
    """Fuse the components of every candidate; best first."""
    if not rows:
        return []
    n = len(rows)
    width = len(rows[0]["matched"] or ())
    df = [sum(1 for r in rows if r["matched"][i]) for i in range(width)]
    idf = [math.log(1 + (n - c + 0.5) / (c + 0.5)) for c in df]
    avg_len = sum(r["doc_len"] for r in rows) / n or 1.0
    bm25 = []
    for row in rows:
        norm = 1 - BM25_B + BM25_B * (row["doc_len"] / avg_len)
        per_term = (BM25_K1 + 1) / (1 + BM25_K1 * norm)
        bm25.append(sum(w for w, hit in zip(idf, row["matched"] or (), strict=False) if hit) * per_term)
    best_keyword = max(bm25) or 1.0
    # Cosine similarity is rescaled over the candidates (min-max), as the keyword score is relative to
    # the best match: raw cosines of one embedding model crowd into a narrow band, which would make the
    # vector weight mean less than its nominal share.
    cosines = [max(0.0, 1.0 - float(r["distance"])) if r["distance"] is not None else 0.0 for r in rows]
    lo, hi = min(cosines), max(cosines)

    out = []
    for row, kw, cosine in zip(rows, bm25, cosines, strict=True):
        stale_score = float(row["stale_score"])
        parts = {
            "vector": (cosine - lo) / (hi - lo) if hi > lo else float(cosine > 0),
            "cosine": cosine,
            "keyword": kw / best_keyword,
            "recency": math.exp(-float(row["age_days"]) / RECENCY_DAYS),
            "importance": float(row["importance"]),
            "effective_confidence": float(row["eff_conf"]),
            "staleness": stale_score,
            # scoring.is_stale, on the SQL score.
            "stale": row["status"] == Fact.Status.STALE or stale_score > scoring.STALE_THRESHOLD,
        }
        parts["relevance"] = sum(weights.get(name, 0.0) * parts[name]
                                 for name in ("vector", "keyword", "recency", "importance"))
        out.append((row, parts))

    # Neighbour support: the best relevance among other candidates observed close in time.
    by_time = sorted(range(len(out)), key=lambda i: out[i][0]["age_days"])
    minutes = [out[i][0]["age_days"] * 1440.0 for i in by_time]
    for pos, i in enumerate(by_time):
        lo_pos = bisect.bisect_left(minutes, minutes[pos] - NEIGHBOUR_MINUTES)
        hi_pos = bisect.bisect_right(minutes, minutes[pos] + NEIGHBOUR_MINUTES)
        support = max((out[by_time[j]][1]["relevance"] for j in range(lo_pos, hi_pos) if j != pos), default=0.0)
        parts = out[i][1]
        parts["neighbour"] = support
        relevance = parts["relevance"] + NEIGHBOUR_WEIGHT * support
        parts["final"] = relevance * parts["effective_confidence"] * (STALE_WEIGHT if parts["stale"] else 1.0)
    scored = [(parts["final"], row, parts) for row, parts in out]
    scored.sort(key=lambda item: (-item[0], -item[2]["vector"], str(item[1]["id"])))
    return scored
