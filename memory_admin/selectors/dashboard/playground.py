"""The context playground: a context block laid out by section, with what was dropped and why."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from memory_admin.models import Entity, Episode, Fact
from memory_admin.selectors.access import Principal, visible

# --- Context playground ------------------------------------------------------------------------------

SECTION_LABELS = {
    "notebook": "User notebook",
    "tenant_notebook": "Team notebook",
    "pinned": "Pinned facts",
    "entities": "Entities the task names",
    "facts": "Facts",
    "skills": "Skills",
    "episodes": "Recent episodes",
}


def _as_uuid(value: Any) -> Any:
    try:
        return UUID(str(value))
    except ValueError:
        return None


def _dropped_texts(principal: Principal, block: dict[str, Any]) -> tuple[dict[Any, str], dict[Any, str]]:
    """The text of the dropped facts, and the summaries of the dropped episodes with the names of the
    dropped entities (a query each)."""
    wanted: dict[str, list[Any]] = {"facts": [], "episodes": [], "entities": []}
    for section in block["sections"]:
        ids = [_as_uuid(item["id"]) for item in section["dropped"]]
        kind = section["name"] if section["name"] in ("episodes", "entities") else "facts"
        wanted[kind] += [i for i in ids if i]
    facts = (
        dict(visible(principal, Fact.objects.filter(pk__in=wanted["facts"])).values_list("pk", "content"))
        if wanted["facts"]
        else {}
    )
    episodes = (
        {
            pk: f"{ended:%Y-%m-%d}: {summary}"
            for pk, ended, summary in visible(principal, Episode.objects.filter(pk__in=wanted["episodes"])).values_list(
                "pk", "ended_at", "summary"
            )
        }
        if wanted["episodes"]
        else {}
    )
    return facts, {**episodes, **_entity_names(principal, wanted["entities"])}


def _entity_names(principal: Principal, ids: list[Any]) -> dict[Any, str]:
    """The names of the dropped entity lines (the preview names the entity, not its id)."""
    return dict(visible(principal, Entity.objects.filter(pk__in=ids)).values_list("pk", "name")) if ids else {}


def _dropped_label(section: str, item_id: str, episodes: dict[Any, str]) -> str:
    """A dropped item that is not a fact, in words: the notebook and its version, the skill's path,
    the episode's day and summary, the entity's name (`episodes` holds those of episodes and entities)."""
    if section in ("notebook", "tenant_notebook"):
        version = item_id.rsplit(":v", 1)[-1] if ":v" in item_id else ""
        return f"the whole notebook{f' (version {version})' if version.isdigit() else ''}"
    if section == "skills":
        return f"skill {item_id}"
    if section == "episodes":
        return f"episode {episodes.get(_as_uuid(item_id)) or item_id[:8]}"
    if section == "entities":
        return f"entity {episodes.get(_as_uuid(item_id)) or item_id[:8]}"
    return item_id[:12]


def context_layout(principal: Principal, block: dict[str, Any], budget: int) -> dict[str, Any]:
    """A context block (retrieval.context.context_block's answer) laid out for the playground: each
    section's share of the budget for a token bar, how many facts came in as related memory, and dropped
    items with the reason and what they are in words (the text of a dropped fact, an episode's summary: a
    query each) and, for a collapsed near-duplicate, the fact whose line holds it."""
    facts, episodes = _dropped_texts(principal, block)
    sections = []
    for index, section in enumerate(block["sections"]):
        dropped = []
        for item in section["dropped"]:
            text = facts.get(_as_uuid(item["id"]), "") if section["name"] != "episodes" else ""
            dropped.append(
                {
                    "id": str(item["id"]),
                    "reason": item.get("reason", ""),
                    "text": text,
                    "is_fact": bool(text),
                    "label": _dropped_label(section["name"], str(item["id"]), episodes),
                    "of": item.get("of"),
                }
            )
        sections.append(
            {
                "name": section["name"],
                "label": SECTION_LABELS.get(section["name"], section["name"]),
                "tokens": section["tokens"],
                "included": len(section["included"]),
                "related": len(section.get("related", ())),
                "truncated": bool(section["truncated"]),
                "dropped": dropped,
                "color": index,
                "share": round(100.0 * section["tokens"] / budget, 2) if budget else 0,
            }
        )
    return {
        "budget": budget,
        "tokens": block["tokens"],
        "text": block["text"],
        "warnings": block["warnings"],
        "sections": sections,
        "free": max(0.0, round(100.0 * (budget - block["tokens"]) / budget, 2)),
        "reasons": sorted({d["reason"] for s in sections for d in s["dropped"]}),
    }
