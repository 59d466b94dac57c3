"""Reads of the knowledge-graph layer (SPEC §12): entities by name, one entity with its facts and
relations over time, and the graph around an entity as of a moment. Every query goes through
`visible()`: another tenant's or another user's entities look like entities that do not exist."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone

from memory_admin.models import (
    AuditEvent,
    Entity,
    EntityMerge,
    EntityMergeReview,
    Episode,
    Fact,
    FactEntity,
    KnowledgeChunk,
    MemoryUser,
    Relation,
    Thread,
)
from memory_admin.models.entities import fold_name
from memory_admin.selectors.access import Principal, get_visible, visible

MAX_GRAPH_DEPTH = 3
_GRAPH_EDGES = 500  # a hub can have many relations: a page of the graph, not all of it


def entity_list(principal: Principal, *, q: str = "", memory_user: MemoryUser | None = None, limit: int = 50) -> list:
    """Entities by name or alias (exact folded alias first, then a name containing `q`), most recently
    seen first; with `memory_user`, those its facts resolve to (its own and the tenant's). Entities
    merged into another are left out (the survivor carries their names)."""
    entities = entity_queryset(principal, q=q)
    if memory_user is not None:
        entities = entities.filter(Q(memory_user=memory_user) | Q(memory_user__isnull=True))
    return list(entities[:limit])


def entity_get_for(principal: Principal, entity_id: UUID | str) -> Entity:
    return get_visible(principal, Entity.objects.select_related("memory_user"), pk=entity_id)


_MERGE_CHAIN_MAX = 50  # merges chain (A into B, later B into C); a bound, never a loop


def entity_survivor(principal: Principal, entity: Entity) -> tuple[Entity, EntityMerge | None]:
    """Where a merged entity lives on: the live entity its facts, relations and names went to (through
    a chain of merges), and the merge that moved this one (to undo it; None if the key cannot see it).
    A live entity answers itself and None. The survivor of an entity the principal sees is always
    visible to it (a merge keeps to one user, or goes into a shared entity)."""
    survivor, merge = entity, None
    if entity.merged_into_id is not None:
        merge = visible(principal, EntityMerge.objects).filter(loser=entity, undone_at__isnull=True).first()
    for _ in range(_MERGE_CHAIN_MAX):
        if survivor.merged_into_id is None:
            break
        survivor = entity_get_for(principal, survivor.merged_into_id)
    return survivor, merge


def relations_with_sources(principal: Principal) -> QuerySet[Relation]:
    """The relations the principal reads, with their entities and, for one a document states, its chunk
    and document (the provenance shown beside it), in one statement."""
    return visible(
        principal,
        Relation.objects.select_related("subject", "object", "source_chunk__document").defer(
            *(f"source_chunk__{name}" for name in KnowledgeChunk.VECTORS)
        ),
    )


@dataclass
class EntityDetail:
    entity: Entity
    mentions: list[FactEntity]
    relations: list[Relation]  # open and closed, oldest first


def entity_detail(principal: Principal, entity: Entity) -> EntityDetail:
    mentions = visible(principal, FactEntity.objects.filter(entity=entity).select_related("fact"))
    relations = relations_with_sources(principal).select_related("source_fact", "invalidated_by")
    relations = relations.filter(Q(subject=entity) | Q(object=entity))
    return EntityDetail(
        entity,
        list(mentions.order_by("-fact__valid_from", "pk")[:200]),
        list(relations.order_by("valid_from", "pk")[:200]),
    )


SOURCES_SHOWN = 20  # threads and episodes listed on an entity's page; the counts say how many in all


@dataclass
class EntitySources:
    """Where an entity came up: the threads whose messages stated a fact mentioning it (the message a
    fact came from, or its extraction batch), and the episodes that hold such a fact or such a message.
    Most recent first, at most SOURCES_SHOWN of each, with the full counts."""

    threads: list[Thread]
    thread_count: int
    episodes: list[Episode]
    episode_count: int


def entity_sources(principal: Principal, entity: Entity) -> EntitySources:
    # Uncorrelated IN (...) subqueries: Postgres reads the entity's facts once and hashes them, where
    # an OR of correlated EXISTS would be run again for every thread or episode of the tenant.
    facts = visible(principal, Fact.objects.filter(mentions__entity=entity))
    threads = visible(principal, Thread.objects.select_related("memory_user")).filter(
        Q(pk__in=facts.values("message__thread_id")) | Q(pk__in=facts.values("batch__thread_id"))
    )
    episodes = visible(principal, Episode.objects.select_related("memory_user", "thread")).filter(
        Q(pk__in=facts.values("episodes__id")) | Q(pk__in=facts.values("message__episode_id"))
    )
    shown_threads = list(threads.order_by("-last_message_at", "-pk")[:SOURCES_SHOWN])
    shown_episodes = list(episodes.order_by("-started_at", "pk")[:SOURCES_SHOWN])
    return EntitySources(
        shown_threads, _total(shown_threads, threads), shown_episodes, _total(shown_episodes, episodes)
    )


def _total(shown: list, rows: QuerySet) -> int:
    """A list shorter than the page is the whole of it: counted without a second statement."""
    return len(shown) if len(shown) < SOURCES_SHOWN else rows.count()


@dataclass
class EntityGraph:
    root: Entity
    as_of: datetime
    depth: int
    nodes: list[Entity]
    edges: list[Relation]


def entity_graph(principal: Principal, entity: Entity, *, depth: int = 1, as_of: datetime | None = None) -> EntityGraph:
    """The entities up to `depth` relations away and the relations between them that held at `as_of`
    (default now): valid_from <= as_of < valid_to. A closed relation shows as of a date it held."""
    as_of = as_of or timezone.now()
    held = relations_with_sources(principal).filter(valid_from__lte=as_of)
    held = held.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=as_of))
    reached, frontier, edges = {entity.pk}, {entity.pk}, {}
    for _ in range(max(1, min(depth, MAX_GRAPH_DEPTH))):
        step = held.filter(Q(subject_id__in=frontier) | Q(object_id__in=frontier)).order_by("valid_from", "pk")
        found = [r for r in step[:_GRAPH_EDGES] if r.pk not in edges]
        edges.update((r.pk, r) for r in found)
        frontier = {r.subject_id for r in found} | {r.object_id for r in found}
        frontier -= reached
        reached |= frontier
        if not frontier:
            break
    nodes = {e.pk: e for e in visible(principal, Entity.objects.select_related("memory_user")).filter(pk__in=reached)}
    kept = [r for r in edges.values() if r.subject_id in nodes and r.object_id in nodes]
    return EntityGraph(entity, as_of, depth, list(nodes.values()), kept)


# --- the dashboard's reads (list with counts, merges, the entity-merge review queue) ---------------


def entity_queryset(principal: Principal, *, q: str = "", type: str = "") -> QuerySet[Entity]:
    """The entity list page: live (unmerged) entities by name or alias, of one type, most recently
    seen first."""
    entities = visible(principal, Entity.objects.select_related("memory_user")).filter(merged_into__isnull=True)
    if type in Entity.Type.values:
        entities = entities.filter(type=type)
    key = fold_name(q)
    if key:
        entities = entities.filter(Q(alias_keys__contains=[key]) | Q(name__icontains=q.strip()))
    return entities.order_by("-last_seen", "pk")


def entity_counts(principal: Principal, entity_ids: list) -> dict:
    """{entity id: (facts that mention it, open relations)} for one page of entities (two queries)."""
    mentions = dict(
        visible(principal, FactEntity.objects.filter(entity_id__in=entity_ids))
        .values("entity_id")
        .annotate(n=Count("fact_id", distinct=True))
        .values_list("entity_id", "n")
    )
    relations: dict = {}
    open_ = relations_with_sources(principal).filter(valid_to__isnull=True)
    for side in ("subject_id", "object_id"):
        rows = open_.filter(**{f"{side}__in": entity_ids}).values(side).annotate(n=Count("pk")).values_list(side, "n")
        for entity_id, n in rows:
            relations[entity_id] = relations.get(entity_id, 0) + n
    return {pk: (mentions.get(pk, 0), relations.get(pk, 0)) for pk in entity_ids}


def entity_merges(principal: Principal, entity: Entity) -> list[EntityMerge]:
    """The merges into this entity that can still be undone, newest first."""
    merges = visible(principal, EntityMerge.objects.select_related("loser")).filter(
        survivor=entity, undone_at__isnull=True
    )
    return list(merges.order_by("-created_at")[:50])


def merge_candidates(principal: Principal, entity: Entity, limit: int = 200) -> list[Entity]:
    """What an operator may merge into this entity: live entities of the same owner (a shared entity
    also takes a user's), the likeliest first: by the cosine likeness of their name-and-type vectors,
    a name sharing a word first among equals; each carries `likeness` (0-1, None without a vector)."""
    from difflib import SequenceMatcher

    from pgvector.django import CosineDistance

    others = visible(principal, Entity.objects.filter(merged_into__isnull=True)).exclude(pk=entity.pk)
    if entity.memory_user_id is not None:
        others = others.filter(memory_user_id=entity.memory_user_id)
    if entity.embedding is not None:
        others = others.annotate(distance=CosineDistance("embedding", entity.embedding))
        found = list(others.order_by(F("distance").asc(nulls_last=True), "name", "pk")[:limit])
    else:
        found = list(others.order_by("name", "pk")[:limit])
    name = entity.name.casefold()
    for other in found:
        distance = getattr(other, "distance", None)
        spelled = SequenceMatcher(None, name, other.name.casefold()).ratio()
        other.likeness = round(max(0.0, 1 - distance) * 0.7 + spelled * 0.3, 2) if distance is not None else None
    found.sort(key=lambda o: (o.likeness is None, -(o.likeness or 0), o.name))
    return found


def merge_review_queue(principal: Principal) -> QuerySet[EntityMergeReview]:
    """Open entity-merge review items, oldest first."""
    items = visible(principal, EntityMergeReview.objects.filter(status=EntityMergeReview.Status.OPEN))
    return items.select_related("entity__memory_user", "candidate__memory_user", "memory_user").order_by(
        "created_at", "pk"
    )


def entity_sample_facts(principal: Principal, entity_ids: list, per_entity: int = 3) -> dict:
    """A few facts that mention each entity (newest first): what a reviewer compares."""
    found: dict = {pk: [] for pk in entity_ids}
    rows = visible(principal, FactEntity.objects.filter(entity_id__in=entity_ids).select_related("fact"))
    for mention in rows.order_by("-fact__valid_from", "pk")[: 20 * max(1, len(entity_ids))]:
        if len(found[mention.entity_id]) < per_entity:
            found[mention.entity_id].append(mention.fact)
    return found


def entity_history(principal: Principal, entity: Entity, limit: int = 20) -> list[AuditEvent]:
    """The curation of this entity (merges, undos, splits, renames), newest first."""
    events = visible(principal, AuditEvent.objects.filter(target_type="entity", target_id=str(entity.pk)))
    return list(events.order_by("-created_at", "-pk")[:limit])
