"""Entities drawn from document chunks into the same graph as the conversation memory's (SPEC §12).

A chunk's names are read by the facts' offline drawing (services/entity_draw.py `draw`) and resolved by
the same steps 1-2 (services/entities.py `entity_find`: alias, then normalised name) among the entities
its owner reads: a shared source's chunks among the tenant's, a user's source's among that user's and the
tenant's. A name that resolves to none becomes a new entity (`entity_create`, the one constructor), so
"Acme Robotics" in the handbook and in a conversation is one node. Each link is a ChunkEntity row: the
provenance (chunk → document → URL or file, section, version). A name not fit to reach an agent (a
secret, instructions: services/agent_text) is dropped, as for facts.

The relations the chunk states come from the same `draw` (the clause rules of extraction/rules/, and
"Acme Robotics is headquartered in Lisbon": based_in), between two of the names just linked. A relation's
type passes the facts' shape and screen (services/entities.py `relation_type`: RELATION_TYPE_PATTERN and
agent_text), so a document's text never becomes a type or a name an agent reads unscreened. The relation is
the open edge subject -[type]-> object (one however many statements hold it): a new one has the chunk as its
`source_chunk` (no `source_fact`) and the chunk's owner (null for a shared source); every chunk stating it
is in `stated_by_chunks`. "I" and "my" in a document are its author, not the memory user: mentions and
relations of "the user" are not drawn from chunks.

Only active chunks are drawn: a quarantined chunk's names and relations never enter the graph. When a chunk
stops being current (knowledge/digest.py: superseded by a re-crawl, its page or file retired; services.py:
its source deleted), `relations_end(chunk_ids=...)` closes what it stated (`superseded`, `retired`) unless an
active fact or another active chunk still states it, which then holds it; the new chunk's drawing states
again what still holds. A paused source keeps its chunks, and so its relations. Resolution's step 3
(embedding neighbour + judge) is not run here: it is recorded against a fact
(`EntityMerge.pending_fact_ids`), which a chunk is not.

Drawing runs on the bulk queue after a crawl (`knowledge.entities`), DRAW_CHUNKS chunks a task under the
owner's write lock (the facts' drawing takes the same one), and is idempotent: a chunk is drawn once
(`entities_drawn_at`).
"""

from __future__ import annotations

import logging
import re
import unicodedata

from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from memory_admin.errors import DomainError
from memory_admin.models import ChunkEntity, Entity, KnowledgeChunk, Relation
from memory_admin.models.entities import fold_name
from memory_admin.selectors.access import Principal, visible
from memory_admin.services.agent_text import agent_text_ok
from memory_admin.services.entities import (
    SELF_NAME,
    EntityMention,
    entity_create,
    entity_find,
    open_relation,
    relation_type,
)
from memory_admin.services.entity_draw import draw, names
from memory_admin.services.facts import lock_memory_user

log = logging.getLogger(__name__)

ACTOR = "knowledge:entities"
TASK = "knowledge.entities"
DRAW_CHUNKS = 50  # chunks per transaction (and per task): the owner's writes wait that long at most


def _relate(chunk: KnowledgeChunk, subject: Entity, object_: Entity, kind: str) -> Relation | None:
    """The open relation subject -[kind]-> object, stated by this chunk (its source unless a fact or
    another chunk stated it first): one edge however many statements hold it."""
    relation = open_relation(
        subject,
        object_,
        kind,
        tenant_id=chunk.tenant_id,
        memory_user_id=chunk.memory_user_id,
        source_chunk=chunk,
        valid_from=chunk.fetched_at,
    )
    if relation is None:
        return None
    relation.stated_by_chunks.add(chunk)
    return relation


def chunk_draw(text: str) -> tuple[list[EntityMention], list[tuple[str, str, str]]]:
    """What a chunk's text names and states, as the drawing keeps it: the mentions fit to store (not the
    document's "I", which is its author, not the memory user; names fit to reach an agent), and the
    relations (subject, type, object) between two proper names of the text (services/entity_draw.py
    `names`: a capitalised run, not a lone word opening a sentence) whose type passes `relation_type`.
    A document is not a first-person chat: a rule that fits "Checkpoint is a snapshot of the graph at a
    given point" names no one, so a relation whose ends are not both names is not drawn."""
    mentions, drafts = draw(text)
    kept = [m for m in mentions if fold_name(m.name) != SELF_NAME and agent_text_ok(m.name)]
    proper = {fold_name(n) for n in names(text)} & {fold_name(m.name) for m in kept}
    relations = []
    for draft in drafts:
        kind = relation_type(draft.type)  # the relation type's shape and screen, as for facts
        subject, object_ = fold_name(draft.subject), fold_name(draft.object)
        if kind and subject in proper and object_ in proper and subject != object_:
            if kind == "works_at" and not _says_employed(text, subject, object_):
                continue
            relations.append((subject, kind, object_))
    return kept, list(dict.fromkeys(relations))


# The role rule reads "I'm a scoring engine for ONNX" as a job at ONNX: fine in a chat, where "I" is a
# person, wrong of the products a document describes. From a document, employment needs its own words.
_EMPLOYED = re.compile(r"\b(?:works?|working|worked)\s+(?:at|for)\b|\bemployed\s+(?:at|by)\b|\bjoined\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def _says_employed(text: str, subject: str, object_: str) -> bool:
    """A sentence of the text names both and says one works for the other in so many words."""
    for sentence in _SENTENCE.split(text):
        folded = " ".join(unicodedata.normalize("NFKC", sentence).casefold().split())  # fold_name, not cut
        if subject in folded and object_ in folded and _EMPLOYED.search(sentence):
            return True
    return False


def chunk_entities_link(principal: Principal, chunk: KnowledgeChunk) -> list[Entity]:
    """Resolve (or create) the entities the chunk's text names, link them to it, and record the relations
    it states between them; returns the entities. Idempotent: drawing a chunk again adds nothing."""
    if chunk.status != KnowledgeChunk.Status.ACTIVE:
        return []  # a quarantined (or no longer current) chunk's text never enters the graph
    mentions, relations = chunk_draw(chunk.content)
    linked: dict = {}
    by_name: dict[str, Entity] = {}
    for mention in mentions:
        entity = entity_find(
            principal, memory_user_id=chunk.memory_user_id, name=mention.name, type=mention.type
        ) or entity_create(
            tenant_id=chunk.tenant_id, memory_user_id=chunk.memory_user_id, mention=mention, seen_at=chunk.fetched_at
        )
        ChunkEntity.objects.get_or_create(chunk=chunk, entity=entity, defaults={"role": mention.role})
        linked[entity.pk] = entity
        by_name[fold_name(mention.name)] = entity
    for subject_key, kind, object_key in relations:
        subject, object_ = by_name.get(subject_key), by_name.get(object_key)
        if subject and object_:
            _relate(chunk, subject, object_, kind)
    return list(linked.values())


def _due(source_id):
    return KnowledgeChunk.objects.filter(
        source_id=source_id, status=KnowledgeChunk.Status.ACTIVE, entities_drawn_at__isnull=True
    )


def chunks_draw(source_id, *, limit: int = DRAW_CHUNKS) -> tuple[int, bool]:
    """Draw the entities of up to `limit` due chunks of the source: (chunks drawn, whether more are due)."""

    with transaction.atomic():
        chunks = list(
            _due(source_id)
            .select_for_update(skip_locked=True)
            .defer(*KnowledgeChunk.VECTORS)
            .order_by("created_at")[:limit]
        )
        if not chunks:
            return 0, False
        if chunks[0].memory_user_id is not None:
            lock_memory_user(chunks[0].memory_user_id)
        principal = Principal.system(chunks[0].tenant_id, actor=ACTOR)
        for chunk in chunks:
            try:
                with transaction.atomic():
                    chunk_entities_link(principal, chunk)
            except (DatabaseError, DomainError):
                log.warning("the entities of chunk %s were not drawn", chunk.pk, exc_info=True)
        KnowledgeChunk.objects.filter(pk__in=[c.pk for c in chunks]).update(entities_drawn_at=timezone.now())
    return len(chunks), _due(source_id).exists()


def chunk_entities(chunk_ids) -> dict:
    """{chunk id: [(entity id, name, type, role)...]} for these chunks (a page's), the survivor of a merge
    in place of the merged-away entity."""
    found: dict = {}
    rows = (
        ChunkEntity.objects.filter(chunk_id__in=list(chunk_ids))
        .select_related("entity", "entity__merged_into")
        .order_by("chunk_id", "entity__name")
    )
    for row in rows:
        entity = row.entity.merged_into or row.entity
        found.setdefault(row.chunk_id, []).append((entity.pk, entity.name, entity.type, row.role))
    return found


def chunk_relations(principal: Principal, chunk_ids) -> dict:
    """{chunk id: [Relation...]} the relations these chunks (a page's) state, open and closed, as far as
    the principal reads them, with their two entities."""
    through = Relation.stated_by_chunks.through
    stated = through.objects.filter(knowledgechunk_id__in=list(chunk_ids))
    relations = visible(principal, Relation.objects.filter(pk__in=stated.values("relation_id")))
    by_id = {r.pk: r for r in relations.select_related("subject", "object")}
    found: dict = {}
    for chunk_id, relation_id in stated.order_by("knowledgechunk_id", "relation_id").values_list(
        "knowledgechunk_id", "relation_id"
    ):
        if relation_id in by_id:
            found.setdefault(chunk_id, []).append(by_id[relation_id])
    return found


DOCUMENT_MENTIONS_SHOWN = 50


def entity_document_mentions(principal: Principal, entity: Entity) -> list[ChunkEntity]:
    """The active chunks (with their document and source) that name the entity or one merged into it,
    newest first, as far as the principal reads them: the entity page's provenance from documents."""
    chunks = visible(principal, KnowledgeChunk.objects.filter(status=KnowledgeChunk.Status.ACTIVE))
    return list(
        ChunkEntity.objects.filter(Q(entity=entity) | Q(entity__merged_into=entity), chunk__in=chunks.values("pk"))
        .select_related("chunk__document", "chunk__source")
        .defer(*(f"chunk__{name}" for name in KnowledgeChunk.VECTORS))
        .order_by("-chunk__fetched_at", "chunk_id")[:DOCUMENT_MENTIONS_SHOWN]
    )
