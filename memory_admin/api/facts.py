"""Facts: list, write (the write path), get, history, correct, forget, pin."""

from __future__ import annotations

from uuid import UUID

from ninja import Query, Router

from memory_admin.api.schemas import (
    MAX_BATCH_FACTS,
    CorrectIn,
    FactBatchIn,
    FactBatchOut,
    FactFilters,
    FactIn,
    FactOut,
    FactPage,
    ForgetIn,
    HistoryOut,
    PinIn,
    PromoteIn,
    UserId,
    WriteOut,
)
from memory_admin.errors import TooLarge
from memory_admin.selectors.access import memory_user_for
from memory_admin.selectors.facts import chain_events, fact_chain, fact_get_for, fact_list
from memory_admin.services.access_counts import record_usage
from memory_admin.services.facts import (
    WriteResult,
    check_fact_size,
    fact_correct,
    fact_forget,
    fact_pin,
    fact_promote,
    fact_write,
    fact_write_many,
)

router = Router(tags=["facts"])


@router.get("/users/{user_id}/facts", response=FactPage)
def list_facts(request, user_id: UserId, filters: Query[FactFilters]):
    user = memory_user_for(request.principal, user_id)
    rows, next_cursor = fact_list(
        request.principal,
        user,
        status=None if filters.status == "any" else filters.status,
        category=filters.category,
        kind=filters.kind,
        key=filters.key,
        text=filters.text,
        cursor=filters.cursor,
        limit=filters.limit,
    )
    return {"items": [FactOut.of(f) for f in rows], "next_cursor": next_cursor}


@router.post("/users/{user_id}/facts", response={200: WriteOut, 201: WriteOut})
def write_fact(request, user_id: UserId, payload: FactIn):
    check_fact_size(payload.content, payload.metadata)  # before the first write creates the user
    user = memory_user_for(request.principal, user_id, create=True, known=getattr(request, "known_user", None))
    data = payload.dict(exclude_none=True)
    task_ref = data.pop("task_id", "")
    result = fact_write(principal=request.principal, memory_user=user, task_ref=task_ref, **data)
    status = 201 if result.outcome.stored else 200
    # Exactly what WriteOut would dump, rendered without validating it again (as the batch route does; a
    # test holds the body equal to its validated form).
    return _rendered(request, _write_out(result), status)


def _rendered(request, body: dict, status: int):
    from memory_admin.api import api  # at call time: router modules never import the api package at load

    return api.create_response(request, body, status=status)


def _write_out(result: WriteResult) -> dict:
    return {
        "outcome": result.outcome,
        "reason": result.reason,
        "fact": FactOut.of(result.fact) if result.fact else None,
        "other_fact_id": result.other.pk if result.other else None,
        "contradiction_id": result.contradiction.pk if result.contradiction else None,
        "evicted_ids": [f.pk for f in result.evicted],
    }


@router.post("/users/{user_id}/facts/batch", response=FactBatchOut)
def write_facts(request, user_id: UserId, payload: FactBatchIn):
    """Up to 100 facts through the write path in one request: one embedding call, one transaction under
    one lock of the user, and an outcome per fact in the order given."""
    if len(payload.facts) > MAX_BATCH_FACTS:
        raise TooLarge(
            f"A batch holds at most {MAX_BATCH_FACTS} facts; this one has {len(payload.facts)}.",
            code="batch_too_large",
            limit=MAX_BATCH_FACTS,
        )
    for item in payload.facts:
        check_fact_size(item.content, item.metadata)  # before the first write creates the user
    user = memory_user_for(request.principal, user_id, create=True, known=getattr(request, "known_user", None))
    facts = []
    for item in payload.facts:
        data = item.dict(exclude_none=True)
        data["task_ref"] = data.pop("task_id", "")
        facts.append(data)
    results = fact_write_many(principal=request.principal, memory_user=user, facts=facts)
    # Exactly what FactBatchOut would dump (its field order: WriteOut's, then index and block_id),
    # rendered without a second pass of validation over up to 100 outcomes and their facts; a test
    # holds this body equal to its validated form.
    body = {
        "user_id": user.external_id,
        "results": [{**_write_out(r), "index": i, "block_id": r.block_id} for i, r in enumerate(results)],
    }
    return _rendered(request, body, 200)


@router.get("/facts/{fact_id}", response=FactOut)
def get_fact(request, fact_id: UUID):
    fact = fact_get_for(request.principal, fact_id)
    record_usage(request.principal.tenant_id, "fact")
    return FactOut.of(fact)


@router.get("/facts/{fact_id}/history", response=HistoryOut)
def fact_history(request, fact_id: UUID):
    fact = fact_get_for(request.principal, fact_id)
    chain = fact_chain(fact)
    return {
        "fact_id": fact.pk,
        "chain": [FactOut.of(f) for f in chain],
        "events": list(chain_events(request.principal, chain)),
    }


@router.post("/facts/{fact_id}/correct", response={201: FactOut})
def correct_fact(request, fact_id: UUID, payload: CorrectIn):
    new = fact_correct(principal=request.principal, fact_id=fact_id, **payload.dict(exclude_none=True))
    return 201, FactOut.of(fact_get_for(request.principal, new.pk))


@router.delete("/facts/{fact_id}", response=FactOut)
def forget_fact(request, fact_id: UUID, payload: ForgetIn | None = None):
    fact = fact_forget(principal=request.principal, fact_id=fact_id, reason=payload.reason if payload else "")
    return FactOut.of(fact_get_for(request.principal, fact.pk))


@router.post("/facts/{fact_id}/pin", response=FactOut)
def pin_fact(request, fact_id: UUID, payload: PinIn):
    fact = fact_pin(principal=request.principal, fact_id=fact_id, pinned=payload.pinned)
    return FactOut.of(fact_get_for(request.principal, fact.pk))


@router.post("/facts/{fact_id}/promote", response={201: FactOut})
def promote_fact(request, fact_id: UUID, payload: PromoteIn):
    new = fact_promote(principal=request.principal, fact_id=fact_id, to=payload.to)
    return 201, FactOut.of(fact_get_for(request.principal, new.pk))
