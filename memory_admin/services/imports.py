"""Import of an export (`GET /users/{id}/export`) into a memory user, through the write path.

The export is replayed, not copied: every fact goes through `fact_write` (or `fact_correct` for a
correction of a fact this import wrote), notebook revisions through `notebook_save`, skill revisions
through `skill_save`, messages through `message_post`. So secrets are still blocked, the poisoning
guard, the confidence gate, dedup and the cap apply, and every write is audited as this principal's.
Facts and notebook revisions are replayed in the order they were created, so a correction chain, a
key's versions and a fact the notebook overruled come out as they went in.

History the write path cannot re-decide is restored after the replay, only in the direction of
serving less: a fact the export has as superseded (by a fact or notebook revision this import wrote),
stale, evicted or quarantined gets that status here, with an audit event. A fact the write path now
refuses or holds back (a secret, the tenant's threshold, the guard) stays refused: the report lists
it under `refused` or `diverged`. When-it-became-true times (valid_from, valid_to) and expiries are
kept from the export; ids and created/updated times are this install's own. Not replayed as such: a
promotion (its copy in the parent scope comes back as a new fact, version 1, and the task fact as
superseded by it) and a reviewer's decision (the outcome is restored, the contradiction row is closed
as settled by the import, not by the reviewer).

Idempotent: each replayed item is recorded (`ImportedItem`, by exported id or a digest, never text)
and an item found there is skipped, so importing the same export twice writes nothing the second
time, and an export that grew since imports only what is new. Imported messages are history: they
are stored as not to be extracted (their facts come with the export). The whole import is one
transaction: a failure midway leaves nothing behind. Checks that need no database (sizes, counts,
ids) run first, so bad input is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory_admin.embedding import embed
from memory_admin.errors import Blocked, Conflict, Invalid, TooLarge
from memory_admin.inputs import check_size
from memory_admin.models import (
    Entity,
    Episode,
    Fact,
    FactEntity,
    ImportedItem,
    MemoryUser,
    Message,
    NotebookRevision,
    Relation,
    RelationEnd,
    Thread,
)
from memory_admin.models.entities import fold_name
from memory_admin.selectors.access import WRITE_MEMORY, Principal
from memory_admin.services.agent_text import agent_text_check, agent_text_problem
from memory_admin.services.audit import audit, audit_fact, fact_snapshot
from memory_admin.services.entities import entity_find
from memory_admin.services.extraction import MAX_MESSAGES_PER_REQUEST, MessageIn, check_messages, message_post
from memory_admin.services.facts import (
    check_fact_size,
    close_contradictions_of,
    fact_correct,
    fact_forget,
    fact_write,
    fact_write_many,
    supersede,
)
from memory_admin.services.notebook import notebook_for, notebook_save
from memory_admin.services.pii import find as find_pii
from memory_admin.services.screening import screen_text
from memory_admin.services.skills import check_skill_path, skill_save

# Outcomes after which the import's fact is a row of its own (not an existing fact it was folded into).
NEW_ROW = frozenset(
    {
        "created",
        "updated",
        "superseded_existing",
        "queued_for_review",
        "quarantined",
        "overruled",
        "capped",
        "corrected",
    }
)
# Facts written by one `fact_write_many` call at most (one lock and one embedding call each).
RUN = 200
# Statuses the import restores from the export: each serves less than `active`.
RESTORABLE = frozenset({Fact.Status.SUPERSEDED, Fact.Status.STALE, Fact.Status.QUARANTINED, Fact.Status.EVICTED})


@dataclass
class ImportReport:
    user_id: str
    imported: Counter = field(default_factory=Counter)
    already_imported: Counter = field(default_factory=Counter)
    refused: list[dict[str, Any]] = field(default_factory=list)
    fact_outcomes: Counter = field(default_factory=Counter)
    diverged: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "imported": dict(self.imported),
            "already_imported": dict(self.already_imported),
            "refused": self.refused,
            "fact_outcomes": dict(self.fact_outcomes),
            "diverged": self.diverged,
        }


def _digest(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:40]


def _count_items(data: dict[str, Any]) -> int:
    return (
        len(data["facts"])
        + len(data["messages"])
        + len(data["episodes"])
        + len(_notebook_revisions(data))
        + sum(1 + len(s["revisions"]) for s in data["skills"])
        + len(data.get("entities", ()))
        + len(data.get("mentions", ()))
        + len(data.get("relations", ()))
    )


def check_import(data: dict[str, Any], *, max_items: int) -> None:
    """Refuse, before anything is written, an export this install would not take whole: more than
    `max_items` items, an item over its size limit, a fact id twice, an unusable skill path."""
    items = _count_items(data)
    if items > max_items:
        raise TooLarge(
            f"An import may hold at most {max_items} items; this one has {items}. Nothing was "
            "imported (import larger exports with manage.py import_memory).",
            code="too_many_items",
            limit=max_items,
        )
    ids = Counter(str(f["id"]) for f in data["facts"])
    twice = [fact_id for fact_id, n in ids.items() if n > 1]
    if twice:
        raise Invalid(
            f"facts.id: {twice[0]} appears {ids[twice[0]]} times; each fact id may appear once in an export.",
            field="facts.id",
        )
    for index, fact in enumerate(data["facts"]):
        check_fact_size(fact["content"], fact["metadata"])
        if fact["key"]:
            agent_text_check(fact["key"], field=f"facts.{index}.key", what="fact key")
    _check_history(data["facts"])
    for revision in _notebook_revisions(data):
        check_size(revision["content"], limit=settings.MAX_NOTEBOOK_BYTES, what="A notebook")
    for index, skill in enumerate(data["skills"]):
        try:
            check_skill_path(skill["path"])
        except Invalid as exc:
            raise Invalid(f"skills.{index}.path: {exc.detail}", code=exc.code, field=f"skills.{index}.path") from exc
        for revision in _skill_revisions(skill):
            check_size(revision["content"], limit=settings.MAX_SKILL_BYTES, what="A skill")
    _check_messages(data["messages"])
    _check_graph(data)


def _check_history(facts: list[dict[str, Any]]) -> None:
    """Refuse history the write path could never have made: a supersession cycle (every version of a
    chain replaced by another, none current), a superseded fact that names nothing that replaced it,
    two current (active) versions of one key."""
    by_id = {str(f["id"]): (index, f) for index, f in enumerate(facts)}
    successor: dict[str, str] = {}
    for fact_id, (_, fact) in by_id.items():
        if fact["superseded_by"] is not None and str(fact["superseded_by"]) in by_id:
            successor[fact_id] = str(fact["superseded_by"])
        if fact["supersedes"] is not None and str(fact["supersedes"]) in by_id:
            successor.setdefault(str(fact["supersedes"]), fact_id)
    cycle = _cycle_start(successor)
    if cycle is not None:
        index = by_id[cycle][0]
        raise Invalid(
            f"facts.{index}.superseded_by: the facts' supersession forms a cycle, so no version is current; "
            "the write path never makes one. Nothing was imported.",
            code="supersession_cycle",
            field=f"facts.{index}.superseded_by",
        )
    for index, fact in enumerate(facts):
        named = fact["superseded_by"] is not None or fact["superseded_by_notebook_version"] is not None
        if fact["status"] == Fact.Status.SUPERSEDED and not named and str(fact["id"]) not in successor:
            raise Invalid(
                f"facts.{index}.status: superseded, but nothing replaced it (no superseded_by, no notebook "
                "version). Nothing was imported.",
                code="no_current_version",
                field=f"facts.{index}.status",
            )
    _check_one_current(facts)


def _cycle_start(successor: dict[str, str]) -> str | None:
    """A fact on a cycle of `successor` links (each fact has at most one successor), or None."""
    done: set[str] = set()
    for start in successor:
        path: dict[str, None] = {}
        node: str | None = start
        while node is not None and node not in done:
            if node in path:
                return node
            path[node] = None
            node = successor.get(node)
        done.update(path)
    return None


def _check_one_current(facts: list[dict[str, Any]]) -> None:
    """A key (in a task's scope or the user's) has one active version: the write path supersedes the
    standing one when a new value comes."""
    current: dict[tuple[str, str], int] = {}
    for index, fact in enumerate(facts):
        if not fact["key"] or fact["status"] != Fact.Status.ACTIVE:
            continue
        slot = (fact["key"], fact["task_id"] or "")
        if slot in current:
            raise Invalid(
                f"facts.{index}.key: facts.{current[slot]} is already the current (active) version of this key; "
                "a key has one current version. Nothing was imported.",
                code="two_current_versions",
                field=f"facts.{index}.key",
            )
        current[slot] = index


def _check_graph(data: dict[str, Any]) -> None:
    """Entities once each; mentions and relations name entities of the export; a relation joins two
    entities and ends after it starts; only a closed relation says what closed it."""
    ids = Counter(str(e["id"]) for e in data.get("entities", ()))
    twice = [entity_id for entity_id, n in ids.items() if n > 1]
    if twice:
        raise Invalid(f"entities.id: {twice[0]} appears {ids[twice[0]]} times.", field="entities.id")
    for index, mention in enumerate(data.get("mentions", ())):
        if str(mention["entity_id"]) not in ids:
            raise Invalid(
                f"mentions.{index}.entity_id: not an entity of this export.", field=f"mentions.{index}.entity_id"
            )
    for index, relation in enumerate(data.get("relations", ())):
        problem = _relation_problem(relation, ids)
        if problem:
            raise Invalid(f"relations.{index}.{problem[0]}: {problem[1]}", field=f"relations.{index}.{problem[0]}")


def _relation_problem(relation: dict[str, Any], ids: Counter) -> tuple[str, str] | None:
    for end in ("subject_id", "object_id"):
        if str(relation[end]) not in ids:
            return end, "not an entity of this export."
    if relation["subject_id"] == relation["object_id"]:
        return "object_id", "a relation joins two different entities."
    if relation["valid_to"] is not None and relation["valid_to"] < relation["valid_from"]:
        return "valid_to", "a relation cannot end before it starts."
    if relation["valid_to"] is None and (relation["closed_reason"] or relation["invalidated_by_id"]):
        return "valid_to", "only a closed relation (with valid_to) says what closed it."
    return None


def _renumbered(exc: Invalid | TooLarge, offset: int) -> Invalid | TooLarge:
    """The error of a post's worth of messages, naming the message by its place in the whole export."""

    def shift(match: re.Match) -> str:
        return f"messages{match.group(1)}{int(match.group(2)) + offset}"

    exc.detail = re.sub(r"messages(\[|\.)(\d+)", shift, exc.detail)
    if "field" in exc.extra:
        exc.extra["field"] = re.sub(r"messages(\.)(\d+)", shift, exc.extra["field"])
    return exc


def _check_messages(messages: list[dict[str, Any]]) -> None:
    """`check_messages` (the rules of a message post) over any number of messages, a post's worth at a time."""
    for start in range(0, len(messages), MAX_MESSAGES_PER_REQUEST):
        chunk = messages[start : start + MAX_MESSAGES_PER_REQUEST]
        try:
            check_messages([MessageIn(m["role"], m["content"], m["created_at"]) for m in chunk])
        except (Invalid, TooLarge) as exc:
            raise _renumbered(exc, start) from None


def _notebook_revisions(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The notebook's revisions; an export that carries only the current text is one revision, made when
    the export was (so it overrules, as the notebook does, the facts that disagree with it)."""
    notebook = data["notebook"]
    if notebook["revisions"] or not notebook["content"]:
        return notebook["revisions"]
    return [
        {
            "version": notebook["version"] or 1,
            "content": notebook["content"],
            "note": "",
            "created_at": data["exported_at"] or timezone.now(),
        }
    ]


def _skill_revisions(skill: dict[str, Any]) -> list[dict[str, Any]]:
    """A skill's revisions, oldest first; an export without them carries the current text only."""
    revisions = sorted(skill["revisions"], key=lambda r: r["version"])
    return revisions or [{"version": skill["version"], "content": skill["content"]}]


class _Replay:
    """One import: what was done before (ImportedItem rows), the id map, the report."""

    def __init__(self, principal: Principal, memory_user: MemoryUser, data: dict[str, Any]) -> None:
        self.principal, self.user, self.data = principal, memory_user, data
        self.report = ImportReport(user_id=memory_user.external_id)
        self.done = dict(ImportedItem.objects.filter(memory_user=memory_user).values_list("source", "target"))
        self.fact_ids = {
            source[5:]: target for source, target in self.done.items() if source.startswith("fact:") and target
        }
        self.notebook_versions = {
            int(source[9:]): int(target)
            for source, target in self.done.items()
            if source.startswith("notebook:") and target
        }
        self.written: list[tuple[dict[str, Any], str]] = []  # facts written as rows of their own, this run
        self.vectors: dict[str, list[float]] = {}
        self.exported = {str(f["id"]): f for f in data["facts"]}
        self.recorded: list[ImportedItem] = []  # inserted together at the end of the import

    def seen(self, kind: str, source: str) -> bool:
        if source in self.done:
            self.report.already_imported[kind] += 1
            return True
        return False

    def record(self, kind: str, source: str, target: str) -> None:
        self.recorded.append(ImportedItem(memory_user=self.user, source=source, target=target))
        self.done[source] = target
        if target:
            self.report.imported[kind] += 1

    def refuse(self, kind: str, index: int, source: str, exc: Blocked | Invalid) -> None:
        self.report.refused.append(
            {
                "kind": kind,
                "index": index,
                "code": exc.code,
                **({"field": exc.extra["field"]} if exc.extra.get("field") else {}),
                **({"block_id": exc.extra["block_id"]} if "block_id" in exc.extra else {}),
            }
        )
        self.record(kind, source, "")


# --- facts and notebook revisions, in the order they were created -------------------------------


def _embed_facts(replay: _Replay) -> None:
    """One embedding call for the facts to write (not those with PII: the write path may redact them,
    and their vector must be of the stored text)."""
    todo = [f for f in replay.data["facts"] if f"fact:{f['id']}" not in replay.done and not find_pii(f["content"])]
    if todo:
        replay.vectors = dict(zip((str(f["id"]) for f in todo), embed([f["content"] for f in todo]), strict=True))


def _write_kwargs(replay: _Replay, item: dict[str, Any]) -> dict[str, Any]:
    """`fact_write`'s arguments for an exported fact."""
    return {
        "content": item["content"],
        "key": item["key"],
        "category": item["category"],
        "kind": item["kind"],
        "confidence": item["confidence"],
        "source": item["source"],
        "observed_at": item["valid_from"],
        "pinned": item["pinned"],
        "importance": item["importance"],
        "metadata": item["metadata"] or None,
        "task_ref": item["task_id"] or "",
        "embedding": replay.vectors.get(str(item["id"])),
    }


def _correction_of(replay: _Replay, item: dict[str, Any]) -> str | None:
    """The fact (here) that an exported correction corrects, when this import wrote it."""
    if item["source"] != Fact.Source.USER_CORRECTION or not item["supersedes"]:
        return None
    return replay.fact_ids.get(str(item["supersedes"]))


def _write_fact(replay: _Replay, item: dict[str, Any]) -> tuple[Fact | None, str]:
    predecessor = _correction_of(replay, item)
    if predecessor:
        reason = replay.exported.get(str(item["supersedes"]), {}).get("status_reason", "")
        try:
            fact = fact_correct(
                principal=replay.principal,
                fact_id=predecessor,
                content=item["content"],
                confidence=item["confidence"],
                category=item["category"],
                reason=reason,
            )
            return fact, "corrected"
        except Conflict:
            pass  # the predecessor was superseded here by something else: written as a fact of its own
    result = fact_write(
        principal=replay.principal, memory_user=replay.user, route="import", **_write_kwargs(replay, item)
    )
    return result.fact, result.outcome


def _stored(replay: _Replay, item: dict[str, Any], fact: Fact | None, outcome: str) -> None:
    """Bookkeeping after the write path answered for an exported fact."""
    replay.report.fact_outcomes[outcome] += 1
    replay.record("facts", f"fact:{item['id']}", str(fact.pk) if fact else "")
    if fact is None:
        return
    replay.fact_ids[str(item["id"])] = str(fact.pk)
    if outcome in NEW_ROW:
        replay.written.append((item, str(fact.pk)))
        if item["status"] == Fact.Status.EVICTED and fact.status != Fact.Status.EVICTED:
            # At once: while active it would take part in the dedup of the facts that follow.
            try:
                fact_forget(
                    principal=replay.principal,
                    fact_id=fact.pk,
                    reason=item["status_reason"] or "evicted before the export",
                )
            except Blocked:  # the recorded reason itself held a secret: forgotten without it
                fact_forget(principal=replay.principal, fact_id=fact.pk, reason="evicted before the export")


def _replay_fact(replay: _Replay, index: int, item: dict[str, Any]) -> None:
    try:
        fact, outcome = _write_fact(replay, item)
    except (Blocked, Invalid) as exc:
        replay.refuse("facts", index, f"fact:{item['id']}", exc)
        replay.report.fact_outcomes[exc.code] += 1
        return
    _stored(replay, item, fact, outcome)


def _replay_run(replay: _Replay, run: list[tuple[int, dict[str, Any]]]) -> None:
    """Consecutive plain facts through `fact_write_many`: one lock, one embedding call, the same
    outcomes as one `fact_write` after the other."""
    results = fact_write_many(
        principal=replay.principal,
        memory_user=replay.user,
        route="import",
        facts=[_write_kwargs(replay, item) for _, item in run],
    )
    for (index, item), result in zip(run, results, strict=True):
        if result.outcome == "blocked":
            replay.refuse("facts", index, f"fact:{item['id']}", Blocked("", block_id=result.block_id))
            replay.report.fact_outcomes["blocked"] += 1
        elif result.outcome == "error":  # not recorded: a later import tries it again
            replay.report.refused.append({"kind": "facts", "index": index, "code": "error"})
        else:
            _stored(replay, item, result.fact, result.outcome)


def _replay_revision(replay: _Replay, index: int, revision: dict[str, Any]) -> None:
    source = f"notebook:{revision['version']}"
    if replay.seen("notebook_revisions", source):
        return
    notebook = notebook_for(replay.principal.tenant_id, replay.user)
    try:
        saved = notebook_save(
            principal=replay.principal,
            memory_user=replay.user,
            content=revision["content"],
            base_version=notebook.version if notebook else 0,
            note=revision["note"],
        )
    except (Blocked, Invalid) as exc:
        replay.refuse("notebook_revisions", index, source, exc)
        return
    replay.notebook_versions[revision["version"]] = saved.version
    replay.record("notebook_revisions", source, str(saved.version))


def _plain(replay: _Replay, item: dict[str, Any]) -> bool:
    """A fact that can share a `fact_write_many` run: neither a correction of a fact of the export (its
    predecessor may be in the run, not written yet) nor one to forget at once."""
    correction = item["source"] == Fact.Source.USER_CORRECTION and str(item["supersedes"]) in replay.exported
    return not correction and item["status"] != Fact.Status.EVICTED


def _replay_timeline(replay: _Replay) -> None:
    events = [(f["created_at"], 1, i, f) for i, f in enumerate(replay.data["facts"])]
    events += [(r["created_at"], 0, i, r) for i, r in enumerate(_notebook_revisions(replay.data))]
    run: list[tuple[int, dict[str, Any]]] = []
    for _, kind, index, item in sorted(events, key=lambda e: e[:3]):
        if kind == 1 and replay.seen("facts", f"fact:{item['id']}"):
            continue
        if kind == 1 and _plain(replay, item) and len(run) < RUN:
            run.append((index, item))
            continue
        if run:
            _replay_run(replay, run)
            run = []
        if kind == 0:
            _replay_revision(replay, index, item)
        elif _plain(replay, item):
            run.append((index, item))
        else:
            _replay_fact(replay, index, item)
    if run:
        _replay_run(replay, run)


# --- history the write path does not re-decide ----------------------------------------------------


TIMES = ("valid_from", "valid_to", "soft_expires_at", "hard_expires_at")


def _restore_times(fact: Fact, item: dict[str, Any]) -> None:
    """When the fact became true and when it expires, as exported (a correction starts `now` here)."""
    if any(getattr(fact, name) != item[name] for name in TIMES):
        Fact.objects.filter(pk=fact.pk).update(**{name: item[name] for name in TIMES})


def _restore_superseded(replay: _Replay, fact: Fact, item: dict[str, Any]) -> bool:
    reason = item["status_reason"] or "superseded before the export"
    successor = replay.fact_ids.get(str(item["superseded_by"])) if item["superseded_by"] else None
    if successor and successor != str(fact.pk):
        supersede(fact, by=Fact(pk=successor), reason=reason)
    else:
        version = replay.notebook_versions.get(item["superseded_by_notebook_version"] or -1)
        revision = NotebookRevision.objects.filter(notebook__memory_user=replay.user, version=version).first()
        if revision is None:
            return False
        Fact.objects.filter(pk=fact.pk).update(
            status=Fact.Status.SUPERSEDED,
            superseded_by_notebook=revision,
            status_reason=reason[:300],
            contested=False,
            updated_at=timezone.now(),
        )
    close_contradictions_of(replay.principal, fact, note="settled by an import")
    return True


def _restore_status(replay: _Replay, item: dict[str, Any], fact: Fact) -> None:
    want = item["status"]
    if fact.status == want:
        return
    before = fact_snapshot(fact)
    restored = False
    if want in RESTORABLE and fact.status == Fact.Status.ACTIVE:
        if want == Fact.Status.SUPERSEDED:
            restored = _restore_superseded(replay, fact, item)
        else:
            Fact.objects.filter(pk=fact.pk).update(
                status=want, status_reason=item["status_reason"][:300], updated_at=timezone.now()
            )
            restored = True
    if not restored:
        replay.report.diverged.append(
            {"id": str(item["id"]), "fact_id": str(fact.pk), "exported_status": want, "status": fact.status}
        )
        return
    fact.refresh_from_db()
    audit_fact(
        replay.principal,
        "fact.import_status",
        fact,
        outcome=want,
        before=before,
        reason="status as in the imported export",
    )


def _restore_history(replay: _Replay) -> None:
    facts = Fact.objects.defer("embedding", "embedding_next").in_bulk([fact_id for _, fact_id in replay.written])
    for item, fact_id in replay.written:
        _restore_times(facts[uuid.UUID(fact_id)], item)
    for item, fact_id in replay.written:
        _restore_status(replay, item, facts[uuid.UUID(fact_id)])


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
    facts = {str(relation.source_fact_id)}
    facts |= {replay.fact_ids[str(f)] for f in item.get("stated_by", ()) if str(f) in replay.fact_ids}
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


# --- skills, messages, episodes ---------------------------------------------------------------------


def _replay_skills(replay: _Replay) -> None:
    for index, skill in enumerate(replay.data["skills"]):
        path = check_skill_path(skill["path"])
        for revision in _skill_revisions(skill):
            source = f"skill:{_digest(path, revision['version'])}"
            if replay.seen("skill_revisions", source):
                continue
            current = replay.user.skills.filter(path=path).values_list("version", flat=True).first() or 0
            try:
                saved = skill_save(
                    principal=replay.principal,
                    path=path,
                    content=revision["content"],
                    base_version=current,
                    memory_user=replay.user,
                )
            except (Blocked, Invalid) as exc:
                replay.refuse("skill_revisions", index, source, exc)
                continue
            replay.record("skill_revisions", source, str(saved.version))


def _message_sources(messages: list[dict[str, Any]]) -> list[str]:
    """A message's identity: a digest of its thread, role, time and text, and which repeat it is."""
    seen: Counter = Counter()
    sources = []
    for m in messages:
        key = _digest(m["thread_id"], m["role"], m["created_at"].isoformat(), m["content"])
        seen[key] += 1
        sources.append(f"message:{_digest(key, seen[key])}")
    return sources


def _replay_messages(replay: _Replay) -> None:
    sources = _message_sources(replay.data["messages"])
    todo = [
        (i, m, sources[i]) for i, m in enumerate(replay.data["messages"]) if not replay.seen("messages", sources[i])
    ]
    runs: list[list[tuple[int, dict[str, Any], str]]] = []
    for entry in todo:  # consecutive messages of one thread: one post
        if runs and runs[-1][0][1]["thread_id"] == entry[1]["thread_id"] and len(runs[-1]) < MAX_MESSAGES_PER_REQUEST:
            runs[-1].append(entry)
        else:
            runs.append([entry])
    for run in runs:
        _post_messages(replay, run)


def _post_messages(replay: _Replay, run: list[tuple[int, dict[str, Any], str]]) -> None:
    """One thread's consecutive messages; secrets in them are redacted by `message_post` (a thread id
    that is itself a secret refuses the run)."""
    try:
        posted = message_post(
            principal=replay.principal,
            memory_user=replay.user,
            thread_id=run[0][1]["thread_id"],
            messages=[MessageIn(m["role"], m["content"], m["created_at"]) for _, m, _ in run],
        )
    except Blocked as exc:
        for index, _, source in run:
            replay.refuse("messages", index, source, exc)
        return
    Message.objects.filter(pk__in=[m.pk for m in posted.messages]).update(
        status=Message.Status.SKIPPED, skip_reason="imported"
    )
    if not posted.thread.messages.filter(status=Message.Status.PENDING).exists():
        Thread.objects.filter(pk=posted.thread.pk).update(extract_due_at=None)
    for (_, _, source), message in zip(run, posted.messages, strict=True):
        replay.record("messages", source, str(message.pk))


def _replay_episode(replay: _Replay, index: int, item: dict[str, Any]) -> None:
    source = f"episode:{item['id']}"
    if replay.seen("episodes", source):
        return
    try:
        summary = screen_text(replay.principal, item["summary"], route="episode", memory_user_id=replay.user.pk).content
        agent_text_check(summary, field="summary", what="episode summary", prose=True, allow_empty=True)
    except (Blocked, Invalid) as exc:
        replay.refuse("episodes", index, source, exc)
        return
    thread = replay.user.threads.filter(external_id=item["thread_id"]).first() if item["thread_id"] else None
    episode = Episode.objects.create(
        tenant_id=replay.principal.tenant_id,
        memory_user=replay.user,
        thread=thread,
        started_at=item["started_at"],
        ended_at=max(item["ended_at"], item["started_at"]),
        summary=summary,
        outcome=item["outcome"],
        summarizer="import",
    )
    fact_ids = [replay.fact_ids[str(i)] for i in item["fact_ids"] if str(i) in replay.fact_ids]
    episode.facts.set(Fact.objects.filter(pk__in=fact_ids, memory_user=replay.user))
    audit(replay.principal, "episode.import", outcome="created", target=episode, memory_user_id=replay.user.pk)
    replay.record("episodes", source, str(episode.pk))


def user_import(*, principal: Principal, memory_user: MemoryUser, data: dict[str, Any], max_items: int) -> ImportReport:
    """Replay an export (validated by the API's `ExportIn`, as a dict) into `memory_user`; see the
    module docstring. Raises TooLarge/Invalid for an export refused whole (nothing written)."""
    principal.require(WRITE_MEMORY)
    check_import(data, max_items=max_items)
    with transaction.atomic():
        # One import of a user at a time: the second waits, then finds the first's items done.
        MemoryUser.objects.select_for_update(no_key=True).filter(pk=memory_user.pk).first()
        replay = _Replay(principal, memory_user, data)
        _embed_facts(replay)
        _replay_timeline(replay)
        _restore_history(replay)
        _replay_graph(replay)
        _replay_skills(replay)
        _replay_messages(replay)
        for index, item in enumerate(data["episodes"]):
            _replay_episode(replay, index, item)
        ImportedItem.objects.bulk_create(replay.recorded, batch_size=1000)
        report = replay.report
        audit(
            principal,
            "user.import",
            outcome="imported",
            target=memory_user,
            memory_user_id=memory_user.pk,
            after={
                "imported": dict(report.imported),
                "already_imported": dict(report.already_imported),
                "refused": len(report.refused),
                "diverged": len(report.diverged),
            },
        )
    return report
