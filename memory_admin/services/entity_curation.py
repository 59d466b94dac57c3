"""Curating the knowledge graph (SPEC §12): merge two entities, undo a merge, split an alias off into
its own entity, rename, close (and reopen) a relation, and decide entity-merge review items.

Each is one transaction, needs a curator (`require_curator`; resolution's own automatic merges
excepted), reads through the one access function (another tenant's or user's entity is a 404), leaves
shared entities alone when the curator is limited to some users (403 `read_only_scope`) and is
audited. Nothing is deleted: a merged entity is kept as `merged_into` its survivor with an
`EntityMerge` record of what moved, so undoing puts every mention, relation and name back; a relation
is closed, never removed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from uuid import UUID

from django.db import transaction
from django.db.models import CharField, F, Q, Value
from django.db.models.functions import MD5, Concat, Greatest
from django.utils import timezone

from memory_admin.errors import AlreadyResolved, Forbidden, Invalid
from memory_admin.models import Entity, EntityMerge, EntityMergeReview, FactEntity, Relation
from memory_admin.models.entities import fold_name
from memory_admin.selectors.access import ADMIN, CURATE, Principal, get_visible
from memory_admin.services.audit import audit
from memory_admin.services.entities import _safe_name, entity_embed, entity_text
from memory_admin.services.screening import screens

_NAME_MAX = 200


def entity_text_hash(entity: Entity) -> str:
    """The hash of `entity_text` that `manage.py reembed` keeps beside a shadow vector."""
    return hashlib.md5(entity_text(entity).encode(), usedforsecurity=False).hexdigest()


# The same hash in SQL, of each row's current name and type (a test holds the two equal): a shadow
# vector whose hash differs was computed before a rename and is filled again, never swapped in.
ENTITY_TEXT_HASH_SQL = MD5(Concat("name", Value(" ("), "type", Value(")"), output_field=CharField()))


def entity_snapshot(entity: Entity) -> dict:
    return {
        "id": str(entity.pk),
        "name": entity.name,
        "type": entity.type,
        "aliases": list(entity.aliases),
        "merged_into": str(entity.merged_into_id) if entity.merged_into_id else None,
    }


def require_curator(principal: Principal) -> None:
    """Who curates the graph: dashboard admins and operators (CURATE) and admin API keys (ADMIN: the keys
    that already change what the whole tenant shares, settings and erase). An agent's ordinary key may
    not: it reads entities and writes the facts they are drawn from."""
    if not principal.can(ADMIN):
        principal.require(CURATE)


def _require_owned(principal: Principal, memory_user_id: int | None) -> None:
    """A curator limited to some memory users (a restricted admin key) changes only their entities and
    relations: a shared (org) one, which every user of the tenant reads, is read-only to it."""
    if principal.restricted and memory_user_id is None:
        raise Forbidden(
            "Shared (org) entities and relations are read-only to a key limited to some users.",
            code="read_only_scope",
        )


def _locked(principal: Principal, entity_id: UUID | str) -> Entity:
    """A visible entity, row-locked, that is not merged into another one and that the principal may change."""
    entity = get_visible(principal, Entity.objects.select_for_update(of=("self",)), pk=entity_id)
    _require_owned(principal, entity.memory_user_id)
    if entity.merged_into_id is not None:
        raise AlreadyResolved(
            "This entity was merged into another one; act on that one (or undo the merge) instead.",
            code="entity_merged",
            status_now="merged",
        )
    return entity


def _drop_names(entity: Entity, keys: set[str]) -> None:
    kept = [(alias, key) for alias, key in zip(entity.aliases, entity.alias_keys, strict=False) if key not in keys]
    entity.aliases = [alias for alias, _ in kept]
    entity.alias_keys = [key for _, key in kept]


def _merge(
    principal: Principal,
    survivor: Entity,
    loser: Entity,
    *,
    automatic: bool = False,
    similarity: float | None = None,
    judge: str = "",
    reason: str = "",
    pending_fact_ids: Sequence[UUID] = (),
) -> EntityMerge:
    """Move the loser's mentions, relations and names to the survivor and record what moved. The
    caller has checked access and holds both rows. A mention or open relation the survivor already
    has stays on the loser (it says nothing new), so nothing is deleted."""
    if survivor.pk == loser.pk:
        raise Invalid("An entity cannot be merged into itself.", code="entity_merge_same")
    if survivor.memory_user_id not in (None, loser.memory_user_id):
        raise Invalid(
            "Merge into an entity of the same user or into one the tenant shares; a shared entity cannot "
            "become one user's.",
            code="entity_scope_mismatch",
        )
    record = EntityMerge(
        tenant_id=survivor.tenant_id,
        memory_user_id=survivor.memory_user_id,
        survivor=survivor,
        loser=loser,
        automatic=automatic,
        similarity=similarity,
        judge=judge[:100],
        reason=reason[:2000],
        actor=principal.actor[:200],
        pending_fact_ids=list(pending_fact_ids),
        name_before=survivor.name,
        type_before=survivor.type,
    )
    had = set(FactEntity.objects.filter(entity=survivor).values_list("fact_id", "role"))
    moving = [m.pk for m in FactEntity.objects.filter(entity=loser) if (m.fact_id, m.role) not in had]
    FactEntity.objects.filter(pk__in=moving).update(entity=survivor)
    record.mention_ids = moving
    record.relation_sides = _move_relations(loser, survivor)
    record.alias_keys_added = [key for key in loser.alias_keys if key not in survivor.alias_keys]
    for alias, key in zip(loser.aliases, loser.alias_keys, strict=False):
        if key in record.alias_keys_added:
            survivor.aliases, survivor.alias_keys = [*survivor.aliases, alias], [*survivor.alias_keys, key]
    if survivor.type == Entity.Type.OTHER and loser.type != Entity.Type.OTHER:
        survivor.type = loser.type
    survivor.first_seen = min(survivor.first_seen, loser.first_seen)
    survivor.last_seen = max(survivor.last_seen, loser.last_seen)
    survivor.save(update_fields=["aliases", "alias_keys", "type", "first_seen", "last_seen"])
    loser.merged_into = survivor
    loser.save(update_fields=["merged_into"])
    record.save(force_insert=True)
    audit(
        principal,
        "entity.merge",
        outcome="automatic" if automatic else "merged",
        target=survivor,
        before={"survivor": record.name_before, "loser": entity_snapshot(loser)},
        after={
            "merge": str(record.pk),
            "survivor": entity_snapshot(survivor),
            "mentions_moved": len(moving),
            "relations_moved": len(record.relation_sides),
            "similarity": similarity,
            "judge": judge,
        },
        reason=reason,
    )
    return record


def _move_relations(loser: Entity, survivor: Entity) -> list[list]:
    """Point the loser's relations at the survivor, except one that would join the two entities (it
    would be a loop) or repeat an open relation the survivor already has. Returns [id, side] of each."""
    moved: list[list] = []
    for side, other in (("subject", "object"), ("object", "subject")):
        for relation in Relation.objects.filter(**{side: loser}).exclude(**{other: survivor}):
            if relation.valid_to is None:
                twin = {side: survivor, other + "_id": getattr(relation, other + "_id"), "type": relation.type}
                if Relation.objects.filter(valid_to__isnull=True, **twin).exists():
                    continue
            moved.append([relation.pk, side])
    for side in ("subject", "object"):
        ids = [rid for rid, s in moved if s == side]
        Relation.objects.filter(pk__in=ids).update(**{side: survivor})
    return moved


@screens("note", route="entity")
@transaction.atomic
def entity_merge(*, principal: Principal, survivor_id: UUID | str, loser_id: UUID | str, note: str = "") -> EntityMerge:
    """Merge `loser` into `survivor` (an operator's decision)."""
    require_curator(principal)
    first, second = sorted([str(survivor_id), str(loser_id)])  # one lock order for two curators
    locked = {str(e.pk): e for e in (_locked(principal, first), _locked(principal, second))}
    survivor, loser = locked[str(survivor_id)], locked.get(str(loser_id))
    if loser is None or survivor.pk == loser.pk:
        raise Invalid("Choose two different entities to merge.", code="entity_merge_same")
    return _merge(principal, survivor, loser, reason=note)


def merge_automatic(
    principal: Principal,
    survivor: Entity,
    loser: Entity,
    *,
    similarity: float,
    judge: str,
    reason: str,
    fact_id: UUID,
) -> EntityMerge:
    """Resolution's own merge (step 3): audited as automatic, undone like any other."""
    return _merge(
        principal,
        survivor,
        loser,
        automatic=True,
        similarity=similarity,
        judge=judge,
        reason=reason,
        pending_fact_ids=[fact_id],
    )


@screens("note", route="entity")
@transaction.atomic
def entity_unmerge(*, principal: Principal, merge_id: UUID | str, note: str = "") -> EntityMerge:
    """Undo a merge: the loser is an entity again with its mentions, relations and names."""
    require_curator(principal)
    record = get_visible(principal, EntityMerge.objects.select_for_update(of=("self",)), pk=merge_id)
    if record.undone_at is not None:
        raise AlreadyResolved("This merge was already undone.", code="already_resolved", status_now="undone")
    survivor = _locked(principal, record.survivor_id)
    loser = get_visible(principal, Entity.objects.select_for_update(of=("self",)), pk=record.loser_id)
    moved_back = FactEntity.objects.filter(pk__in=record.mention_ids, entity=survivor).update(entity=loser)
    if record.pending_fact_ids:
        moved_back += FactEntity.objects.filter(fact_id__in=record.pending_fact_ids, entity=survivor).update(
            entity=loser
        )
    for side in ("subject", "object"):
        ids = [rid for rid, s in record.relation_sides if s == side]
        Relation.objects.filter(pk__in=ids, **{side: survivor}).update(**{side: loser})
        if record.pending_fact_ids:
            other = "object" if side == "subject" else "subject"
            Relation.objects.filter(source_fact_id__in=record.pending_fact_ids, **{side: survivor}).exclude(
                **{other: loser}
            ).update(**{side: loser})
    _drop_names(survivor, set(record.alias_keys_added))
    if fold_name(survivor.name) in set(record.alias_keys_added):
        survivor.name = record.name_before
    if record.type_before == Entity.Type.OTHER and survivor.type == loser.type:
        survivor.type = Entity.Type.OTHER
    if survivor.name != record.name_before or survivor.type == Entity.Type.OTHER:
        entity_embed(survivor)
    survivor.save(update_fields=["aliases", "alias_keys", "name", "type", "embedding"])
    loser.merged_into = None
    loser.save(update_fields=["merged_into"])
    record.undone_at, record.undone_by = timezone.now(), principal.actor[:200]
    record.save(update_fields=["undone_at", "undone_by"])
    EntityMergeReview.objects.filter(merge=record, status=EntityMergeReview.Status.ACCEPTED).update(
        status=EntityMergeReview.Status.OPEN, resolved_at=None, resolved_by="", merge=None
    )
    audit(
        principal,
        "entity.unmerge",
        outcome="unmerged",
        target=loser,
        before={"merge": str(record.pk), "survivor": str(survivor.pk)},
        after={"entity": entity_snapshot(loser), "mentions_moved_back": moved_back},
        reason=note,
    )
    return record


def _uses(text: str, alias_key: str, longer: Sequence[str]) -> bool:
    """The (folded) fact text names `alias_key` as a word, not only as part of a longer name."""
    for other in longer:
        text = text.replace(other, " ")
    return re.search(rf"(?<!\w){re.escape(alias_key)}(?!\w)", text) is not None


@screens("note", route="entity")
@transaction.atomic
def entity_split(*, principal: Principal, entity_id: UUID | str, alias: str, note: str = "") -> Entity:
    """Split one alias off into its own entity, with the mentions of the facts that call it by that
    alias (and none of its other names) and the relations those facts state. Merging the new entity
    back undoes it."""
    require_curator(principal)
    entity = _locked(principal, entity_id)
    key = fold_name(alias)
    if key not in entity.alias_keys:
        raise Invalid("That name is not one of this entity's aliases.", code="entity_alias_unknown")
    if len(set(entity.alias_keys)) < 2:
        raise Invalid("An entity's only name cannot be split off; rename it instead.", code="entity_alias_last")
    written = entity.aliases[entity.alias_keys.index(key)]
    before = entity_snapshot(entity)
    _drop_names(entity, {key})
    if fold_name(entity.name) == key:
        entity.name = max(entity.aliases, key=len)
    longer = [k for k in entity.alias_keys if len(k) > len(key) and key in k]
    leaving = []
    for mention in FactEntity.objects.filter(entity=entity).select_related("fact"):
        text = fold_name(mention.fact.content)
        if _uses(text, key, longer) and not any(_uses(text, k, []) for k in entity.alias_keys):
            leaving.append(mention)
    seen = [m.fact.valid_from for m in leaving] or [entity.last_seen]
    new = Entity(
        tenant_id=entity.tenant_id,
        memory_user_id=entity.memory_user_id,
        scope=entity.scope,
        name=written,
        type=entity.type,
        aliases=[written],
        alias_keys=[key],
        first_seen=min(seen),
        last_seen=max(seen),
    )
    entity_embed(new)
    new.save(force_insert=True)
    entity_embed(entity)
    entity.save(update_fields=["aliases", "alias_keys", "name", "embedding"])
    FactEntity.objects.filter(pk__in=[m.pk for m in leaving]).update(entity=new)
    facts = [m.fact_id for m in leaving]
    for side, other in (("subject", "object"), ("object", "subject")):
        Relation.objects.filter(source_fact_id__in=facts, **{side: entity}).exclude(**{other: new}).update(
            **{side: new}
        )
    audit(
        principal,
        "entity.split",
        outcome="split",
        target=entity,
        before=before,
        after={"entity": entity_snapshot(entity), "split_off": entity_snapshot(new), "mentions_moved": len(leaving)},
        reason=note,
    )
    return new


def _checked_name(name: str) -> str:
    name = " ".join(name.split())
    if not fold_name(name):
        raise Invalid("Give the entity a name.", code="entity_name_empty")
    if len(name) > _NAME_MAX:
        raise Invalid(f"A name is at most {_NAME_MAX} characters.", code="entity_name_too_long")
    if not _safe_name(name):
        raise Invalid(
            "That name looks like a secret, contact details or instructions to a model; it was not stored.",
            code="entity_name_refused",
        )
    return name


@screens("name", route="entity")
@screens("note", route="entity")
@transaction.atomic
def entity_rename(*, principal: Principal, entity_id: UUID | str, name: str, note: str = "") -> Entity:
    """A new canonical name; the old one stays an alias, so lookups by it still find the entity."""
    require_curator(principal)
    name = _checked_name(name)
    entity = _locked(principal, entity_id)
    before = entity_snapshot(entity)
    key = fold_name(name)
    if key not in entity.alias_keys:
        entity.aliases, entity.alias_keys = [*entity.aliases, name], [*entity.alias_keys, key]
    entity.name = name
    entity_embed(entity)
    entity.save(update_fields=["name", "aliases", "alias_keys", "embedding"])
    audit(principal, "entity.rename", outcome="renamed", target=entity, before=before, after=entity_snapshot(entity))
    return entity


@screens("note", route="entity")
@transaction.atomic
def relation_close(*, principal: Principal, relation_id: int | str, note: str = "") -> Relation:
    """An operator ends a relation now (valid_to); it stays in the history and the graph as of before."""
    require_curator(principal)
    relation = get_visible(principal, Relation.objects.select_for_update(of=("self",)), pk=relation_id)
    _require_owned(principal, relation.memory_user_id)
    if relation.valid_to is not None:
        raise AlreadyResolved("This relation is already closed.", code="already_resolved", status_now="closed")
    Relation.objects.filter(pk=relation.pk).update(valid_to=Greatest(Value(timezone.now()), F("valid_from")))
    relation.refresh_from_db()
    audit(
        principal,
        "relation.close",
        outcome="closed",
        target=relation,
        after={"subject": str(relation.subject_id), "type": relation.type, "object": str(relation.object_id)},
        reason=note,
    )
    return relation


@screens("note", route="entity")
@transaction.atomic
def relation_reopen(*, principal: Principal, relation_id: int | str, note: str = "") -> Relation:
    """Undo an operator's close. A relation a correction closed stays closed (correct the fact instead),
    as does one whose edge is open again through another relation."""
    require_curator(principal)
    relation = get_visible(principal, Relation.objects.select_for_update(of=("self",)), pk=relation_id)
    _require_owned(principal, relation.memory_user_id)
    if relation.valid_to is None:
        raise AlreadyResolved("This relation is open.", code="already_resolved", status_now="open")
    if relation.invalidated_by_id is not None:
        raise Invalid("A correction closed this relation; correct the fact to change it.", code="relation_corrected")
    if relation.closed_reason:
        # Its fact stopped being true (forgotten, evicted, expired): bring the fact back to reopen it.
        reason = relation.closed_reason.replace("_", " ")
        if relation.source_chunk_id is not None:
            raise Invalid(
                f"This relation closed with its document ({reason}); re-crawl the source to state it again.",
                code="relation_corrected",
            )
        raise Invalid(
            f"This relation closed with its fact ({reason}); restore the fact to reopen it.", code="relation_corrected"
        )
    twin = Q(subject_id=relation.subject_id, object_id=relation.object_id, type=relation.type, valid_to__isnull=True)
    if Relation.objects.filter(twin).exists():
        raise AlreadyResolved("Another relation already states this and is open.", status_now="closed")
    relation.valid_to = None
    relation.save(update_fields=["valid_to"])
    audit(principal, "relation.reopen", outcome="reopened", target=relation, reason=note)
    return relation


@screens("note", route="review")
@transaction.atomic
def merge_review_decide(
    *, principal: Principal, review_id: UUID | str, accept: bool, note: str = ""
) -> EntityMergeReview:
    """Accept (merge the new entity into its candidate) or reject (keep them apart) a review item."""
    require_curator(principal)
    item = get_visible(principal, EntityMergeReview.objects.select_for_update(of=("self",)), pk=review_id)
    if item.status != EntityMergeReview.Status.OPEN:
        raise AlreadyResolved(
            f"Already decided by {item.resolved_by or 'someone else'} ({item.status}); your choice was not applied.",
            status_now=item.status,
        )
    if accept:
        first, second = sorted([str(item.candidate_id), str(item.entity_id)])
        locked = {str(e.pk): e for e in (_locked(principal, first), _locked(principal, second))}
        item.merge = _merge(
            principal,
            locked[str(item.candidate_id)],
            locked[str(item.entity_id)],
            similarity=item.similarity,
            judge=item.judge,
            reason=note or "entity-merge review accepted",
        )
    item.status = EntityMergeReview.Status.ACCEPTED if accept else EntityMergeReview.Status.REJECTED
    item.resolved_by, item.resolved_at = principal.actor[:200], timezone.now()
    item.save(update_fields=["status", "resolved_by", "resolved_at", "merge"])
    audit(
        principal,
        "entity.review",
        outcome=item.status,
        target_type="entitymergereview",
        target_id=str(item.pk),
        memory_user_id=item.memory_user_id,
        after={"entity": str(item.entity_id), "candidate": str(item.candidate_id)},
        reason=note,
    )
    return item


@transaction.atomic
def merge_review_reopen(*, principal: Principal, review_id: UUID | str) -> EntityMergeReview:
    """Undo a decision: an accepted item's merge is undone; the item is open again."""
    require_curator(principal)
    item = get_visible(principal, EntityMergeReview.objects.select_for_update(of=("self",)), pk=review_id)
    if item.status == EntityMergeReview.Status.OPEN:
        raise AlreadyResolved("This item is open.", status_now="open")
    if item.merge_id is not None:
        entity_unmerge(principal=principal, merge_id=item.merge_id, note="entity-merge review reopened")
    EntityMergeReview.objects.filter(pk=item.pk).update(
        status=EntityMergeReview.Status.OPEN, resolved_by="", resolved_at=None, merge=None
    )
    item.refresh_from_db()
    audit(
        principal,
        "entity.review",
        outcome="reopened",
        target_type="entitymergereview",
        target_id=str(item.pk),
        memory_user_id=item.memory_user_id,
    )
    return item


def merged_names_erase(*, memory_user_id: int) -> int:
    """Erase (GDPR): the names a user's entities brought to a shared entity by a merge leave it (the
    user's own entities and merge records go with the user). Returns the shared entities changed."""
    changed = 0
    merges = EntityMerge.objects.filter(loser__memory_user_id=memory_user_id, undone_at__isnull=True)
    for record in merges.exclude(survivor__memory_user_id=memory_user_id).select_related("survivor"):
        survivor = record.survivor
        _drop_names(survivor, set(record.alias_keys_added))
        if fold_name(survivor.name) in set(record.alias_keys_added):
            survivor.name = record.name_before
        survivor.save(update_fields=["aliases", "alias_keys", "name"])
        changed += 1
    return changed


def entities_erase(*, memory_user_id: int) -> int:
    """Erase (GDPR): the user's entities, their mentions and the relations its facts stated are removed,
    the one exception to "relations are only closed" (names are content). Returns the entities removed."""
    merged_names_erase(memory_user_id=memory_user_id)
    Relation.objects.filter(memory_user_id=memory_user_id).delete()
    FactEntity.objects.filter(fact__memory_user_id=memory_user_id).delete()
    return Entity.objects.filter(memory_user_id=memory_user_id).delete()[1].get(Entity._meta.label, 0)
