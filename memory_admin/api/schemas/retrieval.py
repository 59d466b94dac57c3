"""Retrieval: the parameters and answers of search and the context block."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from typing import Annotated, get_type_hints

from ninja import Schema
from pydantic import Field, create_model

from memory_admin.api.schemas.common import text
from memory_admin.api.schemas.facts import FactOut
from memory_admin.retrieval import Hit
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
    **{f.name: (get_type_hints(Hit)[f.name], ...) for f in dataclass_fields(Hit) if f.name != "fact"},
)


class HitOut(Schema):
    fact: FactOut
    score: ScoreOut


class SearchOut(Schema):
    user_id: str
    query: str
    k: int
    include: list[str]
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
