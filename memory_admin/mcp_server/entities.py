"""Tools on entities: search them by name, read one."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from memory_admin.api.entities import entity_detail_body
from memory_admin.api.schemas import EntityFilters, EntityOut
from memory_admin.mcp_server.door import EntityId, EntityLimit, _door, _json
from memory_admin.selectors.access import memory_user_for
from memory_admin.selectors.entities import entity_list


def search_entities(
    query: Annotated[str, Field(max_length=200)] = "", user_id: str | None = None, limit: EntityLimit = 20
) -> dict[str, Any]:
    """People, companies, projects, places and tools by name or alias (any case), most recently seen
    first; with user_id, those the user's facts name (theirs and the tenant's). Use an entity's id
    with get_entity."""
    with _door() as principal:
        EntityFilters(q=query, user_id=user_id, limit=limit)  # the REST API's checks of the same values
        user = memory_user_for(principal, user_id) if user_id else None
        rows = entity_list(principal, q=query, memory_user=user, limit=limit)
        return _json({"items": [EntityOut.of(e) for e in rows]})


def get_entity(entity_id: EntityId) -> dict[str, Any]:
    """One entity: its aliases, the facts that mention it, its relations over time (a closed one has
    valid_to), and the threads and episodes it came up in. An entity merged into another answers
    with `merged_into`, the id to use instead."""
    with _door() as principal:
        return _json(entity_detail_body(principal, entity_id))
