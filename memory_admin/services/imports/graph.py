"""The knowledge graph of an export (SPEC §12): entities, mentions and relations."""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from memory_admin.errors import Blocked, Invalid
from memory_admin.models import Entity, Fact, FactEntity, Relation, RelationEnd
from memory_admin.models.entities import fold_name
from memory_admin.services.agent_text import agent_text_problem
from memory_admin.services.entities import entity_find
from memory_admin.services.imports.checks import _digest
from memory_admin.services.imports.replay import _Replay
from memory_admin.services.screening import screen_text

# --- the knowledge graph (SPEC §12) -----------------------------------------------------------------

# An open relation whose fact is not served here (refused, or restored as not active) ends at import.
_ENDED_BY = {
    Fact.Status.SUPERSEDED: RelationEnd.SUPERSEDED,
    Fact.Status.EVICTED: RelationEnd.FORGOTTEN,
    Fact.Status.STALE: RelationEnd.LOW_CONFIDENCE,
    Fact.Status.QUARANTINED: RelationEnd.QUARANTINED,
}


def _entity_for(replay: _Replay, item: dict[str, Any]) -> Entity:
    """The entity an exported one becomes here: the one its names resolve to among the user's and the
    tenant's (resolution as for a fact's mention), else a new entity of the user. The caller checked
    that its name and aliases are fit to store."""
    aliases = item["aliases"]
    found = entity_find(
        replay.principal, memory_user_id=replay.user.pk, name=item["name"], type=item["type"], aliases=aliases
    )
    if found is not None:
        return found
    names = list(dict.fromkeys([item["name"], *aliases]))
    return Entity.objects.create(
        tenant_id=replay.principal.tenant_id,
        memory_user=replay.user,
        scope=Entity.Scope.USER,
        name=item["name"],
        type=item["type"],
        aliases=names,
        alias_keys=list(dict.fromkeys(k for k in map(fold_name, names) if k)),
        summary=_entity_summary(replay, item["summary"]),
        first_seen=item["first_seen"],
        last_seen=max(item["first_seen"], item["last_seen"]),
    )


def _entity_summary(replay: _Replay, summary: str) -> str:
    """The summary as the write path would keep it (contact PII redacted by the tenant's policy);
    dropped when it holds a secret or is not fit to reach an agent."""
    try:
        kept = screen_text(replay.principal, summary, route="import", memory_user_id=replay.user.pk, what="summary")
    except Blocked:
        return ""
    return "" if agent_text_problem(kept.content, prose=True, allow_empty=True) else kept.content


def _entity_problem(item: dict[str, Any]) -> tuple[str, str] | None:
    """(field, code) of the first name of an exported entity not fit to reach an agent."""
    for field_name, name in [("name", item["name"]), *((f"aliases.{i}", a) for i, a in enumerate(item["aliases"]))]:
        problem = agent_text_problem(name)
        if problem:
            return field_name, problem
    return None


def _replay_entities(replay: _Replay) -> dict[str, str]:
    """Exported entity id -> entity id here, for every entity this import (or an earlier one) mapped."""
    mapped = {}
    for index, item in enumerate(replay.data.get("entities", [])):
        source = f"entity:{item['id']}"
        if not replay.seen("entities", source):
            problem = _entity_problem(item)  # a secret, contact PII, instructions, in a name or an alias
            if problem:
                replay.refuse("entities", index, source, Invalid("", code=problem[1], field=problem[0]))
            else:
                replay.record("entities", source, str(_entity_for(replay, item).pk))
        if replay.done[source]:
            mapped[str(item["id"])] = replay.done[source]
    return mapped


def _replay_mentions(replay: _Replay, entities: dict[str, str]) -> None:
    """Mentions are unique per (fact, entity, role): a second import adds none (no ImportedItem needed)."""
    rows = {
        (replay.fact_ids[str(m["fact_id"])], entities[str(m["entity_id"])], m["role"])
        for m in replay.data.get("mentions", [])
        if str(m["fact_id"]) in replay.fact_ids and str(m["entity_id"]) in entities
    }
    facts = {fact_id for fact_id, _, _ in rows}
    before = FactEntity.objects.filter(fact_id__in=facts).count()
    FactEntity.objects.bulk_create(
        [FactEntity(fact_id=f, entity_id=e, role=role) for f, e, role in rows], ignore_conflicts=True
    )
    added = FactEntity.objects.filter(fact_id__in=facts).count() - before
    if added:
        replay.report.imported["mentions"] += added
    if len(rows) - added:
        replay.report.already_imported["mentions"] += len(rows) - added


def _relation_for(replay: _Replay, item: dict[str, Any], ends: tuple[str, str], fact: Fact) -> Relation:
    """The relation here: as exported (times, what closed it); an open one joins the open edge already
    here, or ends now when its fact is not served here."""
    valid_to, reason = item["valid_to"], item["closed_reason"]
    by = replay.fact_ids.get(str(item["invalidated_by_id"])) if item["invalidated_by_id"] else None
    if valid_to is None and fact.status != Fact.Status.ACTIVE:
        valid_to, reason = max(timezone.now(), item["valid_from"]), _ENDED_BY.get(fact.status, "")
        by = fact.superseded_by_id if fact.status == Fact.Status.SUPERSEDED else None
    elif valid_to is None:
        open_edge = Relation.objects.filter(
            subject_id=ends[0], type=item["type"], object_id=ends[1], valid_to__isnull=True
        ).first()
        if open_edge is not None:
            return _stated(replay, open_edge, item)
    relation = Relation.objects.create(
        tenant_id=replay.principal.tenant_id,
        memory_user_id=fact.memory_user_id,
        subject_id=ends[0],
        object_id=ends[1],
        type=item["type"],
        source_fact=fact,
        valid_from=item["valid_from"],
        valid_to=valid_to,
        invalidated_by_id=by if valid_to else None,
        closed_reason=reason if valid_to else "",
    )
    return _stated(replay, relation, item)


def _stated(replay: _Replay, relation: Relation, item: dict[str, Any]) -> Relation:
    """The facts (here) that state the relation: its source fact and the export's others."""
    facts = {str(relation.source_fact_id)} if relation.source_fact_id else set()  # else a document states it
    facts |= {replay.fact_ids[str(f)] for f in item.get("stated_by", ()) if str(f) in replay.fact_ids}
    if facts:
        relation.stated_by.add(*facts)
    return relation


def _replay_relations(replay: _Replay, entities: dict[str, str]) -> None:
    """Relations whose fact and two entities came through; the others are skipped (their fact was
    refused here, or an entity's name was), recorded so a later import does not retry them."""
    relations = replay.data.get("relations", [])
    wanted = [replay.fact_ids.get(str(r["source_fact_id"])) for r in relations]
    facts = Fact.objects.only("status", "memory_user_id", "superseded_by_id").in_bulk([f for f in wanted if f])
    for index, (item, fact_id) in enumerate(zip(relations, wanted, strict=True)):
        source = f"relation:{_digest(item['id'], item['subject_id'], item['type'], item['object_id'])}"
        if replay.seen("relations", source):
            continue
        problem = agent_text_problem(item["type"])  # served to agents as it is stored
        if problem:
            replay.refuse("relations", index, source, Invalid("", code=problem, field="type"))
            continue
        ends = (entities.get(str(item["subject_id"])), entities.get(str(item["object_id"])))
        fact = facts.get(uuid.UUID(fact_id)) if fact_id else None
        if fact is None or None in ends or ends[0] == ends[1]:
            # Its fact or one of its entities is not here (refused): nothing to attach it to.
            replay.report.refused.append({"kind": "relations", "index": index, "code": "not_found"})
            replay.record("relations", source, "")
            continue
        replay.record("relations", source, str(_relation_for(replay, item, ends, fact).pk))


def _replay_graph(replay: _Replay) -> None:
    entities = _replay_entities(replay)
    _replay_mentions(replay, entities)
    _replay_relations(replay, entities)
