"""Retrieval: ranked search over a user's memory and the token-capped context block (SPEC §6)."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from ninja import Router

from memory_admin.api.schemas import BudgetTokens, ContextOut, FactOut, K, Kinds, QueryText, SearchOut, Text, UserId
from memory_admin.api.time_filter import AsOf, Between
from memory_admin.errors import Invalid
from memory_admin.retrieval import INCLUDABLE, KINDS, memory_search, parse_include
from memory_admin.retrieval.context import context_block
from memory_admin.selectors.access import memory_user_for

router = Router(tags=["retrieval"])


def _server_timing(response: HttpResponse, timings: dict[str, float]) -> None:
    # Lets a client (and bench/scale.py) separate query-embedding time from the rest of the request.
    response["Server-Timing"] = ", ".join(f"{name};dur={value}" for name, value in timings.items())


@router.get("/users/{user_id}/search", response=SearchOut)
def search(
    request,
    response: HttpResponse,
    user_id: UserId,
    q: QueryText,
    k: K = 10,
    include: Text = "",
    as_of: AsOf | None = None,
    between: Between | None = None,
    kinds: Kinds | None = None,
):
    if not q.strip():
        raise Invalid("q: give some text to search for.", field="q")
    kinds = kinds or KINDS  # every kind unless the query names some
    wanted = parse_include(include)
    unknown = [s for s in wanted if s not in INCLUDABLE]
    if unknown:
        raise Invalid(f"include: unknown {', '.join(unknown)}; choose from {', '.join(INCLUDABLE)}.", field="include")
    user = memory_user_for(request.principal, user_id, known=getattr(request, "known_user", None))
    result = memory_search(
        principal=request.principal,
        memory_user=user,
        query=q,
        k=k,
        include=wanted,
        kinds=kinds,
        as_of=as_of,
        between=between,
    )
    _server_timing(response, result.timings)
    # Exactly what SearchOut would dump (its field order, floats as floats), rendered by the API's renderer
    # without a second pass of validation over every hit and fact (about a third of the Python time of a
    # search); a test holds this body equal to its validated form.
    body: dict[str, Any] = {
        "user_id": user.external_id,
        "query": q,
        "k": k,
        "include": list(wanted),
        "kinds": list(kinds),
        "weights": {name: float(value) for name, value in result.weights.items()},
        "candidates": result.candidates,
        # A hit's fact shows the effective confidence, staleness and stale flag its ranking used (scoring's
        # formulas, evaluated by Postgres for the candidate), not a second evaluation a moment later.
        "hits": [
            {
                "kind": h.kind,
                "fact": FactOut.of(h.fact, h.fact_scores()) if h.kind == "fact" else None,
                "message": h.message.out() if h.kind == "message" else None,
                "chunk": h.out() if h.kind == "chunk" else None,
                "score": h.components(),
            }
            for h in result.hits
        ],
        "timings": result.timings,
    }
    from memory_admin.api import api  # at call time: router modules never import the api package at load

    return api.create_response(request, body, temporal_response=response)


@router.get("/users/{user_id}/context", response=ContextOut)
def context(request, response: HttpResponse, user_id: UserId, task: QueryText = "", budget_tokens: BudgetTokens = 2000):
    user = memory_user_for(request.principal, user_id, known=getattr(request, "known_user", None))
    block = context_block(principal=request.principal, memory_user=user, task=task, budget_tokens=budget_tokens)
    _server_timing(response, block["timings"])
    return block
