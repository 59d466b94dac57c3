"""Curating the knowledge graph over the API (SPEC §12), as the dashboard does: merge two entities (and
undo it), split an alias off, rename, close and reopen a relation, decide entity-merge review items.

Admin keys only (an ordinary agent key gets 403 `forbidden`); a key limited to some memory users
curates only their entities and relations (a shared one is 403 `read_only_scope`, another user's or
another tenant's is 404). Every change is audited by the service, as from the dashboard."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from ninja import Path, Query, Router

from memory_admin.api.schemas import (
    CurationNoteIn,
    EntityMergeIn,
    EntityMergeOut,
    EntityOut,
    EntityRenameIn,
    EntityReviewFilters,
    EntityReviewOut,
    EntityReviewPage,
    EntitySplitIn,
    EntitySplitOut,
    RelationOut,
)
from memory_admin.models import EntityMerge, EntityMergeReview
from memory_admin.selectors.access import get_visible
from memory_admin.selectors.entities import entity_get_for, merge_review_queue, relations_with_sources
from memory_admin.services.entity_curation import (
    entity_merge,
    entity_rename,
    entity_split,
    entity_unmerge,
    merge_review_decide,
    merge_review_reopen,
    relation_close,
    relation_reopen,
)

router = Router(tags=["entity curation"])

RelationId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _note(payload: CurationNoteIn | None) -> str:
    return payload.note if payload else ""


def _merge_out(request, merge_id: UUID) -> dict:
    merges = EntityMerge.objects.select_related("survivor__memory_user", "loser__memory_user")
    return EntityMergeOut.of(get_visible(request.principal, merges, pk=merge_id))


@router.post("/entity-merges", response={201: EntityMergeOut})
def merge_entities(request, payload: EntityMergeIn):
    """Merge `loser_id` into `survivor_id`: the loser's facts, relations and names move to the survivor;
    the loser stays, answering with `merged_into`. Entities of one user, or a user's into a shared one."""
    record = entity_merge(
        principal=request.principal, survivor_id=payload.survivor_id, loser_id=payload.loser_id, note=payload.note
    )
    return 201, _merge_out(request, record.pk)


@router.post("/entity-merges/{merge_id}/undo", response=EntityMergeOut)
def undo_entity_merge(request, merge_id: UUID, payload: CurationNoteIn | None = None):
    """Undo a merge (a curator's or resolution's): the loser is its own entity again, with its facts,
    relations and names. Undoing twice is 409 `already_resolved`."""
    record = entity_unmerge(principal=request.principal, merge_id=merge_id, note=_note(payload))
    return _merge_out(request, record.pk)


@router.post("/entities/{entity_id}/split", response={201: EntitySplitOut})
def split_entity(request, entity_id: UUID, payload: EntitySplitIn):
    """Split one alias off into a new entity, with the facts that call the entity by that alias only."""
    new = entity_split(principal=request.principal, entity_id=entity_id, alias=payload.alias, note=payload.note)
    return 201, {
        "entity": EntityOut.of(entity_get_for(request.principal, entity_id)),
        "split_off": EntityOut.of(entity_get_for(request.principal, new.pk)),
    }


@router.post("/entities/{entity_id}/rename", response=EntityOut)
def rename_entity(request, entity_id: UUID, payload: EntityRenameIn):
    """A new canonical name; the old one stays an alias, so searches by it still find the entity."""
    entity_rename(principal=request.principal, entity_id=entity_id, name=payload.name, note=payload.note)
    return EntityOut.of(entity_get_for(request.principal, entity_id))


def _relation_out(request, relation_id: int) -> dict:
    return RelationOut.of(get_visible(request.principal, relations_with_sources(request.principal), pk=relation_id))


@router.post("/relations/{relation_id}/close", response=RelationOut)
def close_relation(request, relation_id: RelationId, payload: CurationNoteIn | None = None):
    """End a relation now (`valid_to`): it stays in the entity's history and in graphs as of earlier."""
    relation_close(principal=request.principal, relation_id=relation_id, note=_note(payload))
    return _relation_out(request, relation_id)


@router.post("/relations/{relation_id}/reopen", response=RelationOut)
def reopen_relation(request, relation_id: RelationId, payload: CurationNoteIn | None = None):
    """Undo a curator's close. A relation a correction (or its fact's end) closed stays closed: 422
    `relation_corrected`."""
    relation_reopen(principal=request.principal, relation_id=relation_id, note=_note(payload))
    return _relation_out(request, relation_id)


@router.get("/entity-reviews", response=EntityReviewPage)
def list_entity_reviews(request, filters: Query[EntityReviewFilters]):
    """Open entity-merge review items (resolution was unsure two entities are one), oldest first."""
    return {"items": [EntityReviewOut.of(i) for i in merge_review_queue(request.principal)[: filters.limit]]}


def _review_out(request, review_id: UUID) -> dict:
    items = EntityMergeReview.objects.select_related("entity__memory_user", "candidate__memory_user")
    return EntityReviewOut.of(get_visible(request.principal, items, pk=review_id))


@router.post("/entity-reviews/{review_id}/accept", response=EntityReviewOut)
def accept_entity_review(request, review_id: UUID, payload: CurationNoteIn | None = None):
    """The two are one: the new entity is merged into its candidate (`merge_id`)."""
    merge_review_decide(principal=request.principal, review_id=review_id, accept=True, note=_note(payload))
    return _review_out(request, review_id)


@router.post("/entity-reviews/{review_id}/reject", response=EntityReviewOut)
def reject_entity_review(request, review_id: UUID, payload: CurationNoteIn | None = None):
    """The two are different: they stay apart."""
    merge_review_decide(principal=request.principal, review_id=review_id, accept=False, note=_note(payload))
    return _review_out(request, review_id)


@router.post("/entity-reviews/{review_id}/reopen", response=EntityReviewOut)
def reopen_entity_review(request, review_id: UUID):
    """Undo a decision: an accepted item's merge is undone, and the item is open again."""
    merge_review_reopen(principal=request.principal, review_id=review_id)
    return _review_out(request, review_id)
