"""Entities (SPEC §12): resolving a name to the entity it stands for, linking a fact's mentions, and
the relations a fact states, which a correction closes (never deletes).

Resolution, cheapest first, among the entities the fact's owner reads (its own and the tenant's):
1. exact alias: the name, folded (case, spaces), is one of an entity's names;
2. normalised name: one name's words are a subset of the other's, starting with the same word
   ("Acme" / "Acme Robotics", "Sam" / "Sam Lee"), and only when exactly one entity fits. An entity
   that already has another full name ("Sam Park") is not "Sam Lee", nor one whose facts disagree
   (Sam Lee works at Acme; "Sam works at Initech" is someone else): two people are kept apart.
3. embedding neighbour + judge (services/entity_neighbour.py): the new entity, embedded by name and
   type, is merged into its nearest neighbour when the judge agrees and the similarity is high
   (audited, undoable), or an entity-merge review item is queued when that is uncertain.
Otherwise a new entity. Merged entities (`merged_into`) are never resolved to."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import F, Q, QuerySet, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Greatest
from django.utils import timezone

from memory_admin.embedding import embed_one
from memory_admin.models import Entity, Fact, FactEntity, Relation
from memory_admin.models.entities import RELATION_TYPE_PATTERN, RelationEnd, fold_name
from memory_admin.selectors.access import Principal, visible
from memory_admin.services.agent_text import agent_text_ok, agent_text_problem
from memory_admin.services.audit import audit
from memory_admin.services.entity_kinds import SHARED_KINDS

log = logging.getLogger(__name__)

# The memory user themself: what "The user ..." facts are about.
SELF_NAME = "the user"
_NAME_MAX = 200
_CANDIDATES = 50


@dataclass(frozen=True, slots=True)
class EntityMention:
    """A name a fact mentions, its type and its role in the fact, with other names it goes by."""

    name: str
    type: str = Entity.Type.OTHER
    role: str = FactEntity.Role.MENTIONED
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RelationDraft:
    """subject -[type]-> object, by the names of two entities the fact mentions."""

    subject: str
    type: str
    object: str


def relation_type(raw: str) -> str | None:
    """`works at` → `works_at`; None when nothing usable is left, or when the type as given or as
    slugged is not fit to reach an agent (services.agent_text: a secret, instructions)."""
    slug = re.sub(r"[^a-z0-9]+", "_", fold_name(raw)).strip("_")[:40]
    if not re.match(RELATION_TYPE_PATTERN, slug):
        return None
    return slug if agent_text_ok(raw) and agent_text_ok(slug) else None


def _safe_name(name: str) -> bool:
    """A name fit to store: the rule of everything an agent reads (services.agent_text): something
    left after folding, no secret or contact PII (a model's entity names are not screened with the
    fact), and not instructions to a model."""
    return agent_text_ok(name)


def _types_agree(a: str, b: str) -> bool:
    return a == b or Entity.Type.OTHER in (a, b)


def _words_agree(words: list[str], alias: list[str]) -> bool:
    return bool(alias) and alias[0] == words[0] and (set(alias) <= set(words) or set(words) <= set(alias))


def _name_fits(words: list[str], entity: Entity) -> bool:
    """Step 2: some name of the entity agrees with `words`, and no full name of it disagrees."""
    names = [key.split() for key in entity.alias_keys if key != SELF_NAME]
    if not any(_words_agree(words, alias) for alias in names):
        return False
    full_names = [alias for alias in names if len(alias) >= 2 and alias[0] == words[0]]
    return len(words) < 2 or all(_words_agree(words, alias) for alias in full_names)


# Relations a person or thing has one of at a time: a second, different one is a disagreement.
SINGLE_VALUED = frozenset({"works_at", "lives_in", "is_from", "born_in", "married_to", "reports_to"})


def _disagrees(entity: Entity, claims: Sequence[tuple[str, str]]) -> bool:
    """The entity already holds a one-at-a-time relation (`works_at`...) to something other than what
    the mention's fact claims: by step 2 alone, that is another entity of the same first name."""
    for kind, object_key in claims:
        if kind not in SINGLE_VALUED:
            continue
        held = Relation.objects.filter(subject=entity, type=kind, valid_to__isnull=True)
        if held.exclude(object__alias_keys__contains=[object_key]).exists():
            return True
    return False


def _owned(principal: Principal, memory_user_id: int | None):
    """The entities a fact of this owner resolves against: its own and the tenant's shared ones."""
    owner = Q(memory_user__isnull=True)
    if memory_user_id is not None:
        owner |= Q(memory_user_id=memory_user_id)
    return visible(principal, Entity.objects.filter(owner, merged_into__isnull=True))


def _pick(found: list[Entity], memory_user_id: int | None) -> Entity | None:
    """The one entity found; of several, the owner's own one if it has exactly one; else none."""
    if len(found) == 1:
        return found[0]
    own = [e for e in found if e.memory_user_id == memory_user_id]
    return own[0] if len(own) == 1 else None


def entity_find(
    principal: Principal,
    *,
    memory_user_id: int | None,
    name: str,
    type: str,
    aliases: Sequence[str] = (),
    claims: Sequence[tuple[str, str]] = (),
) -> Entity | None:
    """The existing entity `name` stands for, or None (steps 1 and 2 of the module docstring).
    `claims`: (relation type, folded object name) the mention's fact states of it; step 2 does not
    pick an entity they disagree with."""
    keys = [k for k in dict.fromkeys(fold_name(n) for n in (name, *aliases)) if k]
    if not keys:
        return None
    owned = _owned(principal, memory_user_id)
    exact = [e for e in owned.filter(alias_keys__overlap=keys)[:_CANDIDATES] if _types_agree(e.type, type)]
    if exact:
        return _pick(exact, memory_user_id)
    words = keys[0].split()
    if keys[0] == SELF_NAME:
        return None
    text = RawSQL("array_to_string(alias_keys, ' ')", [])  # noqa: S611 - constant SQL, no input
    near = owned.annotate(names=text).filter(names__contains=words[0])[:_CANDIDATES]
    fits = [e for e in near if _types_agree(e.type, type) and _name_fits(words, e)]
    return _pick([e for e in fits if not _disagrees(e, claims)], memory_user_id)


def _better_name(entity: Entity, name: str) -> bool:
    """A fuller name replaces a shorter one ("Acme" → "Acme Robotics"); anything replaces the self name."""
    if fold_name(entity.name) == SELF_NAME:
        return fold_name(name) != SELF_NAME
    return len(fold_name(name).split()) > len(fold_name(entity.name).split())


def _absorb(entity: Entity, mention: EntityMention, seen_at: datetime, *, by_user: bool = False) -> Entity:
    """Add the mention's names and time to the entity it resolved to. A user's fact naming a shared
    (tenant) entity adds at most its type: a tenant entity is a name, and never carries one user's
    aliases or times to the others (nor keeps them after that user is erased)."""
    if by_user and entity.memory_user_id is None:
        if entity.type == Entity.Type.OTHER and mention.type != Entity.Type.OTHER:
            entity.type = mention.type
            entity.save(update_fields=["type"])
        return entity
    changed = False
    for alias in (mention.name, *mention.aliases):
        key = fold_name(alias)
        if key and key not in entity.alias_keys:
            entity.aliases, entity.alias_keys = [*entity.aliases, alias[:_NAME_MAX]], [*entity.alias_keys, key]
            changed = True
    if _better_name(entity, mention.name):
        entity.name, changed = mention.name[:_NAME_MAX], True
        entity_embed(entity)
    if entity.type == Entity.Type.OTHER and mention.type != Entity.Type.OTHER:
        entity.type, changed = mention.type, True
    if seen_at > entity.last_seen or seen_at < entity.first_seen:
        entity.first_seen, entity.last_seen = min(entity.first_seen, seen_at), max(entity.last_seen, seen_at)
        changed = True
    if changed:
        entity.save(update_fields=["aliases", "alias_keys", "name", "type", "first_seen", "last_seen", "embedding"])
    return entity


def entity_resolve(
    principal: Principal, *, fact: Fact, mention: EntityMention, claims: Sequence[tuple[str, str]] = ()
) -> Entity:
    """The entity the mention stands for, in the fact's scope: found (and given the new names) or created."""
    found = entity_find(
        principal,
        memory_user_id=fact.memory_user_id,
        name=mention.name,
        type=mention.type,
        aliases=mention.aliases,
        claims=claims,
    )
    if found is not None:
        return _absorb(found, mention, fact.valid_from, by_user=fact.memory_user_id is not None)
    # Inside: entity_neighbour imports this module at the top.
    from memory_admin.services.entity_neighbour import neighbour_step

    entity = entity_create(
        tenant_id=fact.tenant_id, memory_user_id=fact.memory_user_id, mention=mention, seen_at=fact.valid_from
    )
    return neighbour_step(principal, fact=fact, mention=mention, entity=entity, claims=claims) or entity


def entity_create(*, tenant_id: int, memory_user_id: int | None, mention: EntityMention, seen_at: datetime) -> Entity:
    """A new entity for a mention that resolved to none, in its owner's scope, embedded and stored."""
    # A place, tool, organisation or event is one tenant entity however many users name it (one "Zed",
    # not one per user): it holds the name only; the facts and relations that name it stay their owners'.
    shared = memory_user_id is None or (_share_kinds() and mention.type in SHARED_KINDS)
    names = [mention.name[:_NAME_MAX]] if shared else []
    names = names or list(dict.fromkeys(n[:_NAME_MAX] for n in (mention.name, *mention.aliases) if fold_name(n)))
    entity = Entity(
        tenant_id=tenant_id,
        memory_user_id=None if shared else memory_user_id,
        scope=Entity.Scope.ORG if shared else Entity.Scope.USER,
        name=mention.name[:_NAME_MAX],
        type=mention.type,
        aliases=names,
        alias_keys=list(dict.fromkeys(fold_name(n) for n in names)),
        first_seen=seen_at,
        last_seen=seen_at,
    )
    entity_embed(entity)
    entity.save(force_insert=True)
    return entity


def _share_kinds() -> bool:
    return bool(getattr(settings, "ENTITY_SHARED_KINDS", False))


def open_relation(subject: Entity, object_: Entity, kind: str, **new: Any) -> Relation | None:
    """The open relation subject -[kind]-> object, one edge however many statements hold it: made from
    `new` (its owner, source and start) when there is none; None for an entity related to itself."""
    if subject.pk == object_.pk:
        return None
    relation, _ = Relation.objects.get_or_create(
        subject=subject, type=kind, object=object_, valid_to__isnull=True, defaults=new
    )
    return relation


def _relate(fact: Fact, subject: Entity, object_: Entity, kind: str) -> Relation | None:
    """The open relation subject -[kind]-> object, stated by this fact unless another one already does."""
    relation = open_relation(
        subject,
        object_,
        kind,
        tenant_id=fact.tenant_id,
        memory_user_id=fact.memory_user_id,
        source_fact=fact,
        valid_from=fact.valid_from,
    )
    if relation is None:
        return None
    relation.stated_by.add(fact)  # a second fact stating it keeps it open when the first ends
    return relation


def _claims(mention: EntityMention, relations: Sequence[RelationDraft]) -> list[tuple[str, str]]:
    """What the fact states of the mention as a subject: (relation type, folded object name)."""
    keys = {fold_name(n) for n in (mention.name, *mention.aliases)}
    return [(relation_type(d.type) or "", fold_name(d.object)) for d in relations if fold_name(d.subject) in keys]


def fact_entities_link(
    *,
    principal: Principal,
    fact: Fact,
    mentions: Sequence[EntityMention],
    relations: Sequence[RelationDraft] = (),
) -> list[Entity]:
    """Resolve the fact's mentions to entities, record them (subject / object / mentioned) and the
    relations the fact states between them. Idempotent: linking the same fact twice adds nothing.
    The caller holds the fact owner's write lock (the write path's), so two links cannot race."""
    if fact.tenant_id is None or fact.status != Fact.Status.ACTIVE:
        return []  # global, quarantined or refused facts name no entities
    by_name: dict[str, Entity] = {}
    dropped = 0  # names and relation types not fit to reach an agent: counted, never logged
    for raw in mentions:
        mention = EntityMention(raw.name, raw.type, raw.role, tuple(a for a in raw.aliases if _safe_name(a)))
        dropped += len(raw.aliases) - len(mention.aliases)
        if not _safe_name(mention.name):
            dropped += 1
            continue
        entity = entity_resolve(principal, fact=fact, mention=mention, claims=_claims(mention, relations))
        FactEntity.objects.get_or_create(fact=fact, entity=entity, role=mention.role)
        for alias in (mention.name, *mention.aliases):
            by_name[fold_name(alias)] = entity
    made = 0
    for draft in relations:
        kind = relation_type(draft.type)
        if kind is None and draft.type.strip():
            dropped += 1
        subject, object_ = by_name.get(fold_name(draft.subject)), by_name.get(fold_name(draft.object))
        if kind and subject and object_ and _relate(fact, subject, object_, kind):
            made += 1
    entities = list({e.pk: e for e in by_name.values()}.values())
    if entities or dropped:
        audit(
            principal,
            "entity.link",
            outcome="dropped" if dropped and not entities else "",
            target_type="fact",
            target_id=str(fact.pk),
            memory_user_id=fact.memory_user_id,
            after={"entities": [str(e.pk) for e in entities], "relations": made, "dropped": dropped},
        )
    if dropped:
        log.info("fact %s: %d entity names or relation types were not fit to store", fact.pk, dropped)
    return entities


def relations_close(*, old: Fact, by: Fact) -> int:
    """A fact was superseded: the relations it stated end now, invalidated by its successor; never
    deleted, so the graph as of an earlier date still shows them. A successor with the same text (a
    promotion to a wider scope) states the same thing: the relations and mentions move to it instead.
    Returns the relations closed."""
    if by.content_hash and by.content_hash == old.content_hash:
        moved = Relation.objects.filter(source_fact_id=old.pk, valid_to__isnull=True)
        _stated_by(list(moved.values_list("pk", flat=True)), by.pk)
        moved.update(source_fact_id=by.pk, memory_user_id=by.memory_user_id)
        mentions = FactEntity.objects.filter(fact_id=old.pk).values_list("entity_id", "role")
        FactEntity.objects.bulk_create(
            [FactEntity(fact_id=by.pk, entity_id=entity, role=role) for entity, role in mentions], ignore_conflicts=True
        )
        return 0
    ending = Relation.objects.filter(source_fact_id=old.pk, valid_to__isnull=True)
    kept = _hand_over(ending, fact_ids=[old.pk])
    return ending.exclude(pk__in=kept).update(
        valid_to=Greatest(Value(timezone.now()), F("valid_from")),
        invalidated_by_id=by.pk,
        closed_reason=RelationEnd.SUPERSEDED,
    )


def _stated_by(relation_ids: Sequence[int], fact_id: object) -> None:
    through = Relation.stated_by.through
    through.objects.bulk_create(
        [through(relation_id=pk, fact_id=fact_id) for pk in relation_ids], ignore_conflicts=True
    )


def _hand_over(
    ending: QuerySet[Relation], *, fact_ids: Sequence[object] = (), chunk_ids: Sequence[object] = ()
) -> set[int]:
    """Of the open relations whose source (facts `fact_ids`, document chunks `chunk_ids`) ends, those
    another still-active fact or chunk also states pass to it (the oldest fact, else the oldest chunk)
    and stay open: ending one statement of an edge does not end the edge. Returns the ids of the
    relations handed over (one statement when there are none)."""
    heirs: dict[int, tuple[object, object, int | None]] = {}
    facts = (
        Relation.stated_by.through.objects.filter(relation__in=ending, fact__status=Fact.Status.ACTIVE)
        .exclude(fact_id__in=list(fact_ids))
        .order_by("relation_id", "fact__valid_from", "fact_id")
        .values_list("relation_id", "fact_id", "fact__memory_user_id")
    )
    for relation_id, fact_id, owner in facts:
        heirs.setdefault(relation_id, (fact_id, None, owner))
    chunks = (
        Relation.stated_by_chunks.through.objects.filter(relation__in=ending, knowledgechunk__status="active")
        .exclude(knowledgechunk_id__in=list(chunk_ids))
        .order_by("relation_id", "knowledgechunk__created_at", "knowledgechunk_id")
        .values_list("relation_id", "knowledgechunk_id", "knowledgechunk__memory_user_id")
    )
    for relation_id, chunk_id, owner in chunks:
        heirs.setdefault(relation_id, (None, chunk_id, owner))
    for relation_id, (fact_id, chunk_id, owner) in heirs.items():
        Relation.objects.filter(pk=relation_id).update(
            source_fact_id=fact_id, source_chunk_id=chunk_id, memory_user_id=owner
        )
    return set(heirs)


def relations_end(*, fact_ids: Iterable = (), chunk_ids: Iterable = (), reason: RelationEnd) -> int:
    """Facts stopped being true with no successor (forgotten, evicted by the cap, the GC, a reviewer), or
    document chunks stopped being current (superseded by a re-crawl, their page or source gone): the
    relations they stated end now, with the reason, unless another active fact or chunk still states
    them; never deleted, so the graph as of an earlier date still shows them. An undo that serves a fact
    again calls `relations_reopen`. Returns the relations closed (one statement)."""
    facts, chunks = list(fact_ids), list(chunk_ids)
    if not facts and not chunks:
        return 0
    source = Q(source_fact_id__in=facts) if facts else Q(source_chunk_id__in=chunks)
    if facts and chunks:
        source |= Q(source_chunk_id__in=chunks)
    ending = Relation.objects.filter(source, valid_to__isnull=True)
    kept = _hand_over(ending, fact_ids=facts, chunk_ids=chunks)
    return ending.exclude(pk__in=kept).update(
        valid_to=Greatest(Value(timezone.now()), F("valid_from")), closed_reason=reason
    )


def relations_reopen(*, fact_ids: Iterable, reason: RelationEnd, invalidated_by_id: object = None) -> int:
    """An action that ended facts was undone (a reviewer's eviction, a contradiction's "keep"): the
    relations it closed (`reason`, and `invalidated_by_id` when given) hold again, as new open rows from
    now; the closed rows stay, so the graph as of the time between still shows the gap. An edge that
    is open again already (another fact restated it) is left as it is. Returns the relations reopened."""
    closed = Relation.objects.filter(source_fact_id__in=list(fact_ids), closed_reason=reason)
    if invalidated_by_id is not None:
        closed = closed.filter(invalidated_by_id=invalidated_by_id)
    latest: dict[tuple, Relation] = {}
    for relation in closed.order_by("valid_to", "pk"):
        latest[(relation.subject_id, relation.type, relation.object_id)] = relation
    if not latest:
        return 0
    open_now = Relation.objects.filter(
        valid_to__isnull=True, subject_id__in={s for s, _, _ in latest}, object_id__in={o for _, _, o in latest}
    ).values_list("subject_id", "type", "object_id")
    todo = [r for edge, r in latest.items() if edge not in set(open_now)]
    now = timezone.now()
    made = Relation.objects.bulk_create(
        [
            Relation(
                tenant_id=r.tenant_id,
                memory_user_id=r.memory_user_id,
                subject_id=r.subject_id,
                object_id=r.object_id,
                type=r.type,
                source_fact_id=r.source_fact_id,
                valid_from=now,
            )
            for r in todo
        ]
    )
    through = Relation.stated_by.through
    through.objects.bulk_create([through(relation_id=r.pk, fact_id=r.source_fact_id) for r in made])
    return len(made)


def entity_name_problem(name: str) -> str | None:
    """Why a name is not fit to store as an entity's (the check linking applies), as an error code
    (`invalid`, `blocked`, `instruction_like`); None when it is fit. For names that come from
    elsewhere, such as an imported export."""
    return agent_text_problem(name)


def entity_text(entity: Entity) -> str:
    """What an entity's embedding is computed from: its name and type."""
    return f"{entity.name} ({entity.type})"


def entity_embed(entity: Entity) -> None:
    """Give the entity the embedding of its name and type (not saved here)."""

    entity.embedding = embed_one(entity_text(entity))
