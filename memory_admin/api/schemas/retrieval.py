"""Retrieval: the parameters and answers of search and the context block."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Annotated, Literal, get_type_hints
from uuid import UUID

from ninja import Schema
from pydantic import AfterValidator, Field, StrictStr, create_model

from memory_admin.api.schemas.common import text
from memory_admin.api.schemas.facts import FactOut
from memory_admin.retrieval import HIT_OBJECTS, KINDS, Hit
from memory_admin.retrieval.context import MAX_BUDGET_TOKENS, MIN_BUDGET_TOKENS

# --- Retrieval: search and the context block --------------------------------------------------------

MAX_K = 100
MAX_QUERY_CHARS = 2000
# How many hits a search returns, and a context block's budget in tokens (cl100k_base).
K = Annotated[int, Field(ge=1, le=MAX_K)]
BudgetTokens = Annotated[int, Field(ge=MIN_BUDGET_TOKENS, le=MAX_BUDGET_TOKENS)]
# A search's query and a context block's task: readable text, at most MAX_QUERY_CHARS characters.
QueryText = text(max_length=MAX_QUERY_CHARS)


# A hit's score components, as the search ranking defines them (retrieval.Hit, one home).
ScoreOut = create_model(
    "ScoreOut",
    __base__=Schema,
    **{f.name: (get_type_hints(Hit)[f.name], ...) for f in dataclass_fields(Hit) if f.name not in HIT_OBJECTS},
)


def _kinds(value: str) -> tuple[str, ...]:
    parts = [part.strip().lower() for part in value.split(",")]
    unknown = [part or "(empty)" for part in parts if part not in KINDS]
    if unknown:
        raise ValueError(f"unknown kind {', '.join(unknown)}; give a comma-separated list of {', '.join(KINDS)}")
    return tuple(dict.fromkeys(parts))


# The kinds of hits a search returns (KINDS.md): a comma-separated list of fact, message, chunk.
Kinds = Annotated[
    StrictStr, Field(max_length=100, json_schema_extra={"pattern": r"^[a-z, ]*$"}), AfterValidator(_kinds)
]
# The same as a JSON list (a search's body form): ["fact", "message"].
KindList = Annotated[
    list[Annotated[StrictStr, Field(max_length=20)]],
    Field(min_length=1, max_length=10),
    AfterValidator(lambda names: _kinds(",".join(names))),
]


class MessageHitOut(Schema):
    """A message hit: its text as stored, i.e. screened (secrets and blocked PII redacted) when posted."""

    id: int
    thread_id: str
    role: str
    created_at: datetime
    text: str


class ChunkHitOut(Schema):
    """A document chunk (trained knowledge, issue 34) with what citing it needs."""

    id: UUID
    text: str
    source_id: UUID
    source_name: str
    document_id: UUID
    title: str
    url: str | None  # a page's URL (url and site sources)
    file: str | None  # else the file's name or its path in the folder
    section: str  # the headings above the chunk, " > " between them
    fetched_at: datetime
    version: int  # the document's version it was cut from


class HitOut(Schema):
    kind: Literal["fact", "message", "chunk"]
    fact: FactOut | None
    message: MessageHitOut | None
    chunk: ChunkHitOut | None = None
    score: ScoreOut


class SearchOut(Schema):
    user_id: str
    query: str
    k: int
    include: list[str]
    kinds: list[str]
    weights: dict[str, float]
    candidates: int
    hits: list[HitOut]
    timings: dict[str, float]


class DroppedOut(Schema):
    id: str
    reason: str
    of: str | None = None  # reason "duplicate": the fact whose line holds this one


class SectionOut(Schema):
    name: str
    tokens: int
    included: list[str]
    related: list[str] = []  # of the included: facts observed next to a strong match
    truncated: list[str]
    dropped: list[DroppedOut]
    contradicts_notebook: list[str] = []  # documents: included chunks that disagree with the notebook


class ContextOut(Schema):
    user_id: str
    task: str
    budget_tokens: int
    tokens: int
    text: str
    notebook_truncated: bool
    warnings: list[str]
    sections: list[SectionOut]
    timings: dict[str, float]
