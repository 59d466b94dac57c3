"""Retrieval: ranked search over a user's memory and the token-capped context block (SPEC §6)."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from ninja import Router, Schema

from memory_admin.api import api
from memory_admin.api.schemas import FactOut, Text, UserId
from memory_admin.errors import Invalid
from memory_admin.selectors.access import memory_user_for
from memory_admin.selectors.search import INCLUDABLE, fact_search, parse_include
from memory_admin.services.context import MAX_BUDGET_TOKENS, MIN_BUDGET_TOKENS, context_block

router = Router(tags=["retrieval"])
MAX_K = 100
MAX_QUERY_CHARS = 2000


class ScoreOut(Schema):
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


def _server_timing(response: HttpResponse, timings: dict[str, float]) -> None:
    # Lets a client (and bench/scale.py) separate query-embedding time from the rest of the request.
    response["Server-Timing"] = ", ".join(f"{name};dur={value}" for name, value in timings.items())


@router.get("/users/{user_id}/search", response=SearchOut)
def search(request, response: HttpResponse, user_id: UserId, q: Text, k: int = 10, include: Text = ""):
    if not q.strip():
        raise Invalid("q: give some text to search for.", field="q")
    if len(q) > MAX_QUERY_CHARS:
        raise Invalid(f"q: at most {MAX_QUERY_CHARS} characters.", field="q")
    if not 1 <= k <= MAX_K:
        raise Invalid(f"k: between 1 and {MAX_K}.", field="k")
    wanted = parse_include(include)
    unknown = [s for s in wanted if s not in INCLUDABLE]
    if unknown:
        raise Invalid(f"include: unknown {', '.join(unknown)}; choose from {', '.join(INCLUDABLE)}.",
                      field="include")
    user = memory_user_for(request.principal, user_id)
    result = fact_search(principal=request.principal, memory_user=user, query=q, k=k, include=wanted)
    _server_timing(response, result.timings)
    weights: dict[str, Any] = result.weights
    return {
        "user_id": user.external_id, "query": q, "k": k, "include": list(wanted), "weights": weights,
        "candidates": result.candidates, "timings": result.timings,
        "hits": [{"fact": FactOut.of(h.fact), "score": h.components()} for h in result.hits],
    }


@router.get("/users/{user_id}/context", response=ContextOut)
def context(request, response: HttpResponse, user_id: UserId, task: Text = "", budget_tokens: int = 2000):
    if not MIN_BUDGET_TOKENS <= budget_tokens <= MAX_BUDGET_TOKENS:
        raise Invalid(f"budget_tokens: between {MIN_BUDGET_TOKENS} and {MAX_BUDGET_TOKENS}.",
                      field="budget_tokens")
    if len(task) > MAX_QUERY_CHARS:
        raise Invalid(f"task: at most {MAX_QUERY_CHARS} characters.", field="task")
    user = memory_user_for(request.principal, user_id)
    block = context_block(principal=request.principal, memory_user=user, task=task, budget_tokens=budget_tokens)
    _server_timing(response, block["timings"])
    return block


api.add_router("", router)
