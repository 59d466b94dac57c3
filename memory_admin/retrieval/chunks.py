"""Document chunks beside facts (issue 34, the read side of trained knowledge): which chunks a search or
a context block may show, and their score on the facts' scale.

Visibility, inside the SQL (built by the ORM from `visible()`, the one access check): the chunks of the
tenant's shared sources and of the memory user's own sources, never another user's; only active chunks
(superseded, retired and quarantined ones never appear) of active sources (a paused or deleted source's
chunks are hidden); none at all while the tenant's knowledge kill switch is off
(`KnowledgeSettings.ingestion_enabled`).

Candidates: the user's own chunks nearest the query (exact: few), the tenant's shared chunks nearest the
query (the partial HNSW index `kchunk_embedding_hnsw`), and the best full-text matches of both (the
partial GIN index `kchunk_search_gin`), CANDIDATES of each.

Scores, with the components of `ranking` where they apply (the others are 0 in `components()`):

- vector: cosine similarity rescaled min-max like a fact's, over the chunk candidates *and* the facts'
  candidates of the same search (`cosine_range`), so a chunk closer to the query than every fact gets
  1 and one farther than the facts gets less: the two kinds compare on one scale;
- keyword: BM25 of the query's lexemes (IDF over the chunk candidates, BM25_B for documents), relative
  to the best chunk;
- recency: exp(-days since the chunk's text was fetched / RECENCY_DAYS);
- importance: DOCUMENT_IMPORTANCE, a fact's default;
- neighbour: the facts' support with a document's order for their time: the best relevance among the
  other candidate chunks of its document, plus the mean of the best NEIGHBOUR_TOP of them, plus
  ADJACENT_SHARE x the best of the sections right before and after it (a section of a document several
  of whose sections match is lifted, as a fact of a conversation several of whose turns match is);
- entity: does not apply (0); staleness 0, never stale;
- length and specificity: the facts' priors, over the chunk candidates;
- effective confidence: DOCUMENT_CONFIDENCE, the trust of a source an operator chose.

    final = (relevance + NEIGHBOUR_WEIGHT·neighbour) × length × specificity × DOCUMENT_CONFIDENCE
"""

from __future__ import annotations

import functools
import math
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, NamedTuple

from django.contrib.postgres.search import SearchQuery
from django.db.models import Q
from django.db.models.expressions import RawSQL
from pgvector import Vector

from memory_admin.db.compiled import bind, compiled
from memory_admin.db.cursors import vector_cursor
from memory_admin.models import KnowledgeChunk, KnowledgeSource, MemoryUser
from memory_admin.retrieval.names import or_tsquery
from memory_admin.retrieval.ranking import (
    ADJACENT_SHARE,
    BM25_K1,
    LENGTH_PRIOR,
    NEIGHBOUR_TOP,
    NEIGHBOUR_WEIGHT,
    RECENCY_DAYS,
    _idf,
    _specificity,
)
from memory_admin.selectors.access import Principal, visible

# Chunks of each kind a search considers (own nearest, shared nearest, full text).
CANDIDATES = 20
NEAREST_SCAN = 2 * CANDIDATES  # within the session's default hnsw.ef_search (40): no SET needed
KEYWORD_SCAN = 300
MAX_LEXEMES = 32
# Chunks are documents' sections, tens to hundreds of words: the usual BM25 length normalisation.
BM25_B = 0.75
# A document an operator pointed the system at: trusted as what a tool verified (0.9), less than what the
# user stated (1.0); the notebook wins over it in the block anyway. (0.8 at first: bench/JOURNAL.md
# "Trained knowledge, retrieval".)
DOCUMENT_CONFIDENCE = 0.9
# A chunk's importance: a fact's default (nothing marks one section as more important than another).
DOCUMENT_IMPORTANCE = 0.5

_USER = -7_340_039  # the memory user in the cached statement
_TSQ = "\x00chunk-tsquery\x00"
_VECTOR = "(SELECT v FROM chunk_qv)"
_COLUMNS = ("id", "content", "heading_path", "fetched_at", "document_version", "document_id", "source_id", "ordinal")


class ChunkRow(NamedTuple):
    """One candidate chunk as the statement describes it, with what a hit or a citation shows."""

    id: uuid.UUID
    content: str
    heading_path: list[str]
    fetched_at: datetime
    version: int
    document_id: uuid.UUID
    source_id: uuid.UUID
    distance: float | None
    lexemes: list[str]
    doc_len: int
    age_days: float
    locator: str
    title: str
    source_name: str
    source_kind: str
    ordinal: int


def section_of(heading_path: list[str]) -> str:
    """The headings above a chunk, " > " between them; a heading repeated right below itself (a document's
    title that is also its first heading) once."""
    shown = [h for i, h in enumerate(heading_path) if not i or h != heading_path[i - 1]]
    return " > ".join(shown)


@dataclass
class ChunkHit:
    """A chunk found by a search: what it says, where it came from, and its score components (the same
    names as a fact hit's, `retrieval.Hit`)."""

    kind: ClassVar[str] = "chunk"
    chunk: ChunkRow
    vector: float
    cosine: float
    keyword: float
    recency: float
    relevance: float
    neighbour: float
    length: float
    specificity: float
    final: float

    @property
    def url(self) -> str | None:
        return (
            self.chunk.locator
            if self.chunk.source_kind in (KnowledgeSource.Kind.URL, KnowledgeSource.Kind.SITE)
            else None
        )

    @property
    def file(self) -> str | None:
        return None if self.url else self.chunk.locator

    @property
    def section(self) -> str:
        return section_of(self.chunk.heading_path)

    def out(self) -> dict[str, Any]:
        """The `chunk` object of a search hit (api.schemas.ChunkHitOut)."""
        c = self.chunk
        return {
            "id": c.id,
            "text": c.content,
            "source_id": c.source_id,
            "source_name": c.source_name,
            "document_id": c.document_id,
            "title": c.title,
            "url": self.url,
            "file": self.file,
            "section": self.section,
            "fetched_at": c.fetched_at,
            "version": c.version,
        }

    def components(self) -> dict[str, Any]:
        return {
            "vector": round(self.vector, 4),
            "cosine": round(self.cosine, 4),
            "keyword": round(self.keyword, 4),
            "recency": round(self.recency, 4),
            "importance": DOCUMENT_IMPORTANCE,
            "relevance": round(self.relevance, 6),
            "neighbour": round(self.neighbour, 6),
            "entity": 0.0,
            "length": round(self.length, 4),
            "specificity": round(self.specificity, 4),
            "time": 0.0,  # a chunk is not matched against the times a query names
            "spread": 1.0,
            "effective_confidence": DOCUMENT_CONFIDENCE,
            "staleness": 0.0,
            "stale": False,
            "final": round(self.final, 6),
        }


@functools.lru_cache(maxsize=256)
def _statement(principal: Principal, has_vector: bool, has_text: bool) -> tuple[str, tuple]:
    """The candidate statement, compiled once per principal and shape; the user and tsquery as sentinels.
    Each branch reads the chunk table alone (so the nearest ones come from the HNSW index's walk, which a
    join would turn into an exact scan of the tenant's chunks); the source's status and the kill switch
    are checked on the few rows they return: the nearest branches read NEAREST_SCAN rows for it."""
    chunks = visible(
        principal,
        KnowledgeChunk.objects.filter(status=KnowledgeChunk.Status.ACTIVE).filter(
            Q(memory_user__isnull=True) | Q(memory_user_id=_USER)
        ),
    )
    distance = RawSQL(  # noqa: S611 - constant SQL
        f"memory_admin_knowledgechunk.embedding <=> {_VECTOR}" if has_vector else "NULL::float8", ()
    )
    branches = []
    if has_vector:
        for owner in (Q(memory_user_id=_USER), Q(memory_user__isnull=True)):
            nearest = chunks.filter(owner).annotate(distance=distance).order_by("distance")
            branches.append(compiled(nearest.values(*_COLUMNS, "distance")[:NEAREST_SCAN]))
    if has_text:
        matching = chunks.filter(search_vector=SearchQuery(_TSQ, search_type="raw", config="english"))
        # The matches carry their tsvector, ranked without a second visit to the table (the union reads the
        # named columns of each branch only).
        scanned = matching.annotate(distance=distance).values(*_COLUMNS, "distance", "search_vector")
        sql, params = compiled(scanned[:KEYWORD_SCAN])
        branches.append(
            (
                f"SELECT m.* FROM ({sql}) AS m"
                f" ORDER BY ts_rank(m.search_vector, to_tsquery('english', %s)) DESC LIMIT {CANDIDATES}",
                (*params, _TSQ),
            )
        )
    columns = ", ".join(f"b.{name}" for name in (*_COLUMNS, "distance"))
    union = " UNION ALL ".join(f"(SELECT {columns} FROM ({sql}) AS b)" for sql, _ in branches)
    statement = (
        "WITH chunk_qv AS (SELECT %s::vector AS v),"
        f" chunk_lx AS (SELECT (tsvector_to_array(to_tsvector('english', %s)))[1:{MAX_LEXEMES}] AS q)"
        " SELECT (SELECT q FROM chunk_lx), c.id, c.content, c.heading_path, c.fetched_at, c.document_version,"
        " c.document_id, c.source_id, c.distance, tsvector_to_array(k.search_vector),"
        " COALESCE(length(k.search_vector), 0),"
        " GREATEST(0, date_part('epoch', now() - c.fetched_at) / 86400.0)::float8,"
        " d.locator, d.title, s.name, s.kind, c.ordinal"
        f" FROM (SELECT DISTINCT ON (u.id) * FROM ({union}) AS u ORDER BY u.id) AS c"
        " JOIN memory_admin_knowledgechunk k ON k.id = c.id"
        " JOIN memory_admin_knowledgedocument d ON d.id = c.document_id"
        f" JOIN memory_admin_knowledgesource s ON s.id = c.source_id AND s.status = '{KnowledgeSource.Status.ACTIVE}'"
        # The tenant's kill switch (no settings row: on).
        " WHERE NOT EXISTS (SELECT 1 FROM memory_admin_knowledgesettings ks"
        " WHERE ks.tenant_id = %s AND NOT ks.ingestion_enabled)"
    )
    return statement, (*(p for _, ps in branches for p in ps), principal.tenant_id)


def chunk_candidates(
    principal: Principal, memory_user: MemoryUser, *, query: str, vector: list[float] | None
) -> tuple[list[str], list[ChunkRow]]:
    """(the query's lexemes, the candidate chunks) the principal may read for `memory_user`, in one
    statement; none without a query."""
    query = (query or "").strip()
    tsq = or_tsquery(query) if query else ""
    if not query or (vector is None and not tsq):
        return [], []
    sql, params = _statement(principal, vector is not None, bool(tsq))
    bound = [
        Vector(vector) if vector is not None else None,
        query[:2000],
        *bind(params, {_USER: memory_user.pk, _TSQ: tsq}),
    ]
    with vector_cursor(binary_results=True, prepared=True) as cursor:
        cursor.execute(sql, bound)
        result = cursor.fetchall()
    lexemes = list(result[0][0] or ()) if result else []
    return lexemes, [ChunkRow(*row[1:]) for row in result]


def cosine_range(cosines: list[float]) -> tuple[float, float] | None:
    return (min(cosines), max(cosines)) if cosines else None


def score_chunks(
    rows: list[ChunkRow],
    query_lexemes: list[str],
    weights: dict[str, float],
    *,
    facts_cosines: tuple[float, float] | None = None,
) -> list[ChunkHit]:
    """Every candidate chunk scored (module docstring), best first; `facts_cosines` the (lowest, highest)
    cosine of the same search's fact candidates, so that the vector component rescales over both kinds."""
    if not rows:
        return []
    n = len(rows)
    wanted = set(query_lexemes)
    matched = [wanted.intersection(r.lexemes or ()) for r in rows]
    df = Counter(lexeme for found in matched for lexeme in found)
    idf = {lexeme: _idf(n, count) for lexeme, count in df.items()}
    avg_len = sum(r.doc_len for r in rows) / n or 1.0
    bm25 = []
    for row, found in zip(rows, matched, strict=True):
        norm = 1 - BM25_B + BM25_B * (row.doc_len / avg_len)
        bm25.append(sum(idf[lx] for lx in found) * (BM25_K1 + 1) / (1 + BM25_K1 * norm))
    best_keyword = max(bm25) or 1.0
    cosines = [max(0.0, 1.0 - r.distance) if r.distance is not None else 0.0 for r in rows]
    lo, hi = min(cosines), max(cosines)
    if facts_cosines is not None:
        lo, hi = min(lo, facts_cosines[0]), max(hi, facts_cosines[1])
    specificity = _specificity(rows)
    w_vector, w_keyword, w_recency, w_importance = (
        weights.get(name, 0.0) for name in ("vector", "keyword", "recency", "importance")
    )
    parts = []
    for row, kw, cosine in zip(rows, bm25, cosines, strict=True):
        vector = (cosine - lo) / (hi - lo) if hi > lo else float(cosine > 0)
        keyword = kw / best_keyword
        recency = math.exp(-float(row.age_days) / RECENCY_DAYS)
        relevance = w_vector * vector + w_keyword * keyword + w_recency * recency + w_importance * DOCUMENT_IMPORTANCE
        parts.append((vector, cosine, keyword, recency, relevance))
    support = _document_support(rows, [p[4] for p in parts])
    hits = []
    for row, (vector, cosine, keyword, recency, relevance), spec, near in zip(
        rows, parts, specificity, support, strict=True
    ):
        length = (max(1, row.doc_len) / avg_len) ** LENGTH_PRIOR
        final = (relevance + NEIGHBOUR_WEIGHT * near) * length * spec * DOCUMENT_CONFIDENCE
        hits.append(ChunkHit(row, vector, cosine, keyword, recency, relevance, near, length, spec, final))
    hits.sort(key=lambda h: (-h.final, -h.vector, h.chunk.id))
    return hits


def _document_support(rows: list[ChunkRow], relevance: list[float]) -> list[float]:
    """A chunk's neighbour component, the facts' (ranking._support) with a document's order for their
    time: the best relevance among the other candidate chunks of its document, plus the mean of the best
    NEIGHBOUR_TOP of them, plus ADJACENT_SHARE x the best of the sections right before and after it."""
    by_document: dict = {}
    for i, row in enumerate(rows):
        by_document.setdefault(row.document_id, []).append(i)
    support = [0.0] * len(rows)
    for members in by_document.values():
        for i in members:
            others = sorted((relevance[j] for j in members if j != i), reverse=True)[:NEIGHBOUR_TOP]
            if not others:
                continue
            adjacent = max(
                (relevance[j] for j in members if j != i and abs(rows[j].ordinal - rows[i].ordinal) <= 1), default=0.0
            )
            support[i] = others[0] + sum(others) / NEIGHBOUR_TOP + ADJACENT_SHARE * adjacent
    return support


def chunk_ranking(
    principal: Principal,
    memory_user: MemoryUser,
    *,
    query: str,
    vector: list[float] | None,
    weights: dict[str, float],
    facts_cosines: tuple[float, float] | None = None,
) -> list[ChunkHit]:
    """The visible chunks for `query`, scored and ranked (module docstring)."""
    lexemes, rows = chunk_candidates(principal, memory_user, query=query, vector=vector)
    return score_chunks(rows, lexemes, weights, facts_cosines=facts_cosines)
