"""Retrieval: ranked search over a user's memory and the token-capped context block (SPEC §6)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django.http import HttpResponse
from ninja import Router
from pydantic import Field

from memory_admin.api.schemas import (
    BudgetTokens,
    ContextOut,
    FactOut,
    K,
    KindList,
    Kinds,
    QueryText,
    SearchOut,
    StrictIn,
    Text,
    UserId,
    text,
)
from memory_admin.api.time_filter import AsOf, Between
from memory_admin.errors import Invalid
from memory_admin.retrieval import INCLUDABLE, KINDS, memory_search, parse_include
from memory_admin.retrieval.context import context_block
from memory_admin.selectors.access import memory_user_for

router = Router(tags=["retrieval"])


def _server_timing(response: HttpResponse, timings: dict[str, float]) -> None:
    # Lets a client (and bench/scale.py) separate query-embedding time from the rest of the request.
    response["Server-Timing"] = ", ".join(f"{name};dur={value}" for name, value in timings.items())


# The body form (POST) takes a list where the query takes a comma-separated string; either is accepted.
_Names = Annotated[list[text(max_length=20)], Field(min_length=1, max_length=10)]


class SearchIn(StrictIn):
    """A search's parameters as a JSON body: the query's own, for a `q` too long for a URL (2,000
    characters of Chinese are ~18 kB once escaped, over what web servers and proxies read of a URL)."""

    q: QueryText
    k: K = 10
    include: _Names | text(max_length=100) = ""
    as_of: AsOf | None = None
    between: Between | None = None
    kinds: KindList | Kinds | None = None


class ContextIn(StrictIn):
    """A context block's parameters as a JSON body, for a `task` too long for a URL."""

    task: QueryText = ""
    budget_tokens: BudgetTokens = 2000


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
    return _search(request, response, user_id, q, k, include, as_of, between, kinds)


@router.post("/users/{user_id}/search", response=SearchOut)
def search_post(request, response: HttpResponse, user_id: UserId, payload: SearchIn):
    """The same search as GET, its parameters in a JSON body (read-only keys may call it)."""
    p = payload
    return _search(request, response, user_id, p.q, p.k, p.include, p.as_of, p.between, p.kinds)


def _search(
    request,
    response: HttpResponse,
    user_id: str,
    q: str,
    k: int,
    include: str | list[str],
    as_of: datetime | None,
    between: tuple[datetime, datetime] | None,
    kinds: tuple[str, ...] | None,
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
    return _context(request, response, user_id, task, budget_tokens)


@router.post("/users/{user_id}/context", response=ContextOut)
def context_post(request, response: HttpResponse, user_id: UserId, payload: ContextIn):
    """The same context block as GET, its parameters in a JSON body (read-only keys may call it)."""
    return _context(request, response, user_id, payload.task, payload.budget_tokens)


def _context(request, response: HttpResponse, user_id: str, task: str, budget_tokens: int):
    user = memory_user_for(request.principal, user_id, known=getattr(request, "known_user", None))
    block = context_block(principal=request.principal, memory_user=user, task=task, budget_tokens=budget_tokens)
    _server_timing(response, block["timings"])
    return block
