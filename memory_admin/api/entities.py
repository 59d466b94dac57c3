"""Entities (SPEC §12): search by name, one entity with its facts and relations over time, and the
graph around it as of a moment."""

from __future__ import annotations

from uuid import UUID

from ninja import Query, Router

from memory_admin.api.messages import episode_core
from memory_admin.api.schemas import (
    EntityDetailOut,
    EntityFilters,
    EntityGraphOut,
    EntityOut,
    EntityPage,
    EntityRefOut,
    GraphFilters,
    RelationOut,
)
from memory_admin.models import Thread
from memory_admin.selectors.access import Principal, memory_user_for
from memory_admin.selectors.entities import (
    entity_detail,
    entity_get_for,
    entity_graph,
    entity_list,
    entity_merges,
    entity_sources,
    entity_survivor,
)

router = Router(tags=["entities"])


@router.get("/entities", response=EntityPage)
def list_entities(request, filters: Query[EntityFilters]):
    """Entities whose name or alias matches `q`, most recently seen first."""
    user = memory_user_for(request.principal, filters.user_id) if filters.user_id else None
    rows = entity_list(request.principal, q=filters.q, memory_user=user, limit=filters.limit)
    return {"items": [EntityOut.of(e) for e in rows]}


@router.get("/entities/{entity_id}", response=EntityDetailOut)
def get_entity(request, entity_id: UUID):
    """The entity, the facts that mention it, its relations over time (closed ones included), and the
    threads and episodes it came up in (the 20 most recent of each, with the counts).

    An entity merged into another still answers 200, as it is now: `merged_into` names the live entity
    its facts, relations and names went to (follow it), `merge_id` the merge (undo it with
    POST /entity-merges/{merge_id}/undo); its own facts and relations are the few it kept because the
    survivor already had them."""
    return entity_detail_body(request.principal, entity_id)


def entity_detail_body(principal: Principal, entity_id: UUID | str) -> dict:
    """GET /entities/{id}'s answer (the MCP tool `get_entity` answers the same)."""
    entity = entity_get_for(principal, entity_id)
    survivor, merge = entity_survivor(principal, entity)
    detail = entity_detail(principal, entity)
    sources = entity_sources(principal, detail.entity)
    facts = [
        {
            "fact_id": m.fact_id,
            "content": m.fact.content,
            "status": m.fact.status,
            "role": m.role,
            "valid_from": m.fact.valid_from,
        }
        for m in detail.mentions
    ]
    return {
        **EntityOut.of(detail.entity),
        "merged_into": survivor.pk if survivor.pk != entity.pk else None,
        "merge_id": merge.pk if merge else None,
        "merges": [
            {"id": m.pk, "loser": EntityRefOut.of(m.loser), "automatic": m.automatic, "created_at": m.created_at}
            for m in entity_merges(principal, entity)
        ],
        "facts": facts,
        "relations": [RelationOut.of(r) for r in detail.relations],
        "threads": [_thread_out(t) for t in sources.threads],
        "thread_count": sources.thread_count,
        "episodes": [episode_core(e) for e in sources.episodes],
        "episode_count": sources.episode_count,
    }


def _thread_out(thread: Thread) -> dict:
    return {
        "thread_id": thread.external_id,
        "user_id": thread.memory_user.external_id,
        "created_at": thread.created_at,
        "last_message_at": thread.last_message_at,
        "closed_at": thread.closed_at,
    }


@router.get("/entities/{entity_id}/graph", response=EntityGraphOut)
def get_entity_graph(request, entity_id: UUID, filters: Query[GraphFilters]):
    """The entities up to `depth` (1-3) relations away and the relations that held at `as_of`. For an
    entity merged into another, the graph of the live entity it went to (`root`), with `merged_from`
    the id asked for: its relations moved there."""
    entity = entity_get_for(request.principal, entity_id)
    survivor, _ = entity_survivor(request.principal, entity)
    graph = entity_graph(request.principal, survivor, depth=filters.depth, as_of=filters.as_of)
    return {
        "root": graph.root.pk,
        "merged_from": entity.pk if survivor.pk != entity.pk else None,
        "depth": graph.depth,
        "as_of": graph.as_of,
        "nodes": [EntityOut.of(e) for e in graph.nodes],
        "edges": [RelationOut.of(r) for r in graph.edges],
    }
