"""What refuses an export whole, before anything is written: its size, its history, its graph, its messages."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Any

from django.conf import settings
from django.utils import timezone

from memory_admin.errors import Invalid, TooLarge
from memory_admin.inputs import check_size
from memory_admin.models import Fact
from memory_admin.services.agent_text import agent_text_check
from memory_admin.services.extraction import MAX_MESSAGES_PER_REQUEST, MessageIn, check_messages
from memory_admin.services.facts import check_fact_size
from memory_admin.services.skills import check_skill_path


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
