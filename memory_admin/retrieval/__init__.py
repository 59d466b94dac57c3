"""Retrieval (SPEC §6): ranked search over a user's memory, and the context block built on it.

Read top to bottom, down only:

- `names`: the query's words, the n-grams that could name an entity, the spans of its proper names;
- `query`: the query's vectors (the vector component's, and the whole query's);
- `candidates`: the candidate statement and its typed row, `Candidate`;
- `ranking`: the pure functions that score candidates, with their constants and the default weights;
- `chunks`: document chunks beside facts (issue 34): their candidates and their score on the facts' scale;
- `messages`: a user's indexed messages as candidates beside its facts, and the hits' deduplication;
- `search`: `fact_search` (the k best facts, and messages when asked), `fact_ranking` (every candidate
  ranked) and `memory_search` (the k best hits of every kind asked for, ranked together);
- `context`: the context block (gather, fill, render), built on `fact_ranking` and `Candidate` only.

Callers outside the package import from here.
"""

from memory_admin.retrieval.candidates import Candidate
from memory_admin.retrieval.chunks import ChunkHit
from memory_admin.retrieval.names import WORD, name_keys, or_tsquery, without_names
from memory_admin.retrieval.query import search_vectors, vectors_for
from memory_admin.retrieval.ranking import DEFAULT_WEIGHTS, NEIGHBOUR_MINUTES
from memory_admin.retrieval.search import (
    DEFAULT_STATUSES,
    HIT_OBJECTS,
    INCLUDABLE,
    KINDS,
    Hit,
    Ranking,
    SearchResult,
    fact_ranking,
    fact_search,
    fact_search_users,
    memory_search,
    parse_include,
)

__all__ = [
    "DEFAULT_STATUSES",
    "DEFAULT_WEIGHTS",
    "HIT_OBJECTS",
    "INCLUDABLE",
    "KINDS",
    "NEIGHBOUR_MINUTES",
    "WORD",
    "Candidate",
    "ChunkHit",
    "Hit",
    "Ranking",
    "SearchResult",
    "fact_ranking",
    "fact_search",
    "fact_search_users",
    "memory_search",
    "name_keys",
    "or_tsquery",
    "parse_include",
    "search_vectors",
    "vectors_for",
    "without_names",
]
