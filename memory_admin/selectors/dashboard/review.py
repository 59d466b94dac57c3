"""The review queues: contradictions (with their evidence, in plain words), eviction candidates, quarantine."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from memory_admin.models import Contradiction, Fact, MemoryUser, Tenant
from memory_admin.scoring import EVICTION_THRESHOLD, annotate_scores
from memory_admin.selectors.access import Principal, visible
from memory_admin.selectors.entities import merge_review_queue

# --- Review queues --------------------------------------------------------------------------------


# A review card shows each side with the message it came from: the joins that bring them in one query.
REVIEW_CARD_JOINS = (
    "memory_user",
    "fact_a__message__thread",
    "fact_a__agent",
    "fact_b__message__thread",
    "fact_b__agent",
    "notebook_revision",
)
REVIEW_CARD_DEFER = tuple(
    f"{side}__{field}" for side in ("fact_a", "fact_b") for field in ("embedding", "search_vector")
)


def review_queue(principal: Principal, filters: dict[str, str]) -> QuerySet[Contradiction]:
    qs = visible(principal, Contradiction.objects.filter(status=Contradiction.Status.OPEN))
    if filters.get("detector"):
        qs = qs.filter(detector=filters["detector"])
    if filters.get("user"):
        qs = qs.filter(
            Q(memory_user__external_id__icontains=filters["user"])
            | Q(memory_user__display_name__icontains=filters["user"])
        )
    if filters.get("category"):
        qs = qs.filter(fact_a__category=filters["category"])
    return review_card_rows(qs).order_by("created_at", "pk")


def review_card_rows(qs: QuerySet[Contradiction]) -> QuerySet[Contradiction]:
    """Contradictions with what their cards show: both sides, their messages and threads, the person."""
    return qs.select_related(*REVIEW_CARD_JOINS).defer(*REVIEW_CARD_DEFER)


def review_tab_counts(principal: Principal) -> dict[str, int]:
    """How many wait in each tab of the review queue: three counts in one statement, and the eviction
    candidates' (their staleness is raw SQL over the fact table's own name, which a subquery renames)."""

    def count(qs: QuerySet) -> Coalesce:
        # Every row is the principal's tenant's (visible()), so grouping by tenant gives one count.
        return Coalesce(Subquery(qs.order_by().values("tenant_id").annotate(n=Count("pk")).values("n")), 0)

    queues = {
        "contradictions": visible(principal, Contradiction.objects.filter(status=Contradiction.Status.OPEN)),
        "quarantine": quarantined(principal),
        "entities": merge_review_queue(principal),
    }
    # Prefixed: "contradictions" is also the name of the tenant's reverse relation.
    row = Tenant.objects.filter(pk=principal.tenant_id).values(
        **{f"n_{name}": count(qs) for name, qs in queues.items()}
    )
    counts = row.first() or {}
    return {
        **{name: counts.get(f"n_{name}", 0) for name in queues},
        "eviction": eviction_candidates(principal).order_by().count(),
    }


def person_name(memory_user: MemoryUser | None) -> str:
    """A memory user as people call them: the display name, else the id."""
    if memory_user is None:
        return "the team"
    return memory_user.display_name or memory_user.external_id


_ONE_VALUED = re.compile(r"same one-valued predicate \('(?P<verb>[^']+)'\) with different values")


def plain_reason(item: Contradiction) -> str:
    """Why two facts were put side by side, in a sentence a reviewer reads without knowing the judge's
    vocabulary ("same one-valued predicate ('prefers')" becomes "Both say what Alice prefers ...")."""
    name = person_name(item.memory_user)
    reason = (item.reason or "").strip()
    match = _ONE_VALUED.fullmatch(reason)
    if match:
        return f"Both say what {name} {match['verb']}, with different answers; only one can be true now."
    if reason == "one statement negates the other":
        return "One says the opposite of the other."
    if item.detector == Contradiction.Detector.NOTEBOOK:
        return f"The notebook says otherwise{': ' + reason if reason else '.'}"
    if not reason or reason in ("compatible statements", "no shared subject"):
        if item.detector == Contradiction.Detector.KEY:
            return "Both give a value for the same thing, and the values differ."
        return "The two are about the same thing and give different answers."
    return reason[0].upper() + reason[1:] + ("" if reason.endswith((".", "!", "?")) else ".")


@dataclass
class Origin:
    """Where one side of a review card came from: the message it was drawn from, else the door."""

    quote: str = ""
    speaker: str = ""
    at: datetime | None = None
    thread_id: int | None = None
    thread_name: str = ""
    message_id: int | None = None
    door: str = ""


def fact_origin(fact: Fact) -> Origin:
    """The message a fact was drawn from (with its thread), or the door it came in by, in words.
    Reads only what `review_card_rows` (or `fact_with_scores`) joined in."""
    if fact.message_id:
        message = fact.message
        return Origin(
            quote=message.content,
            speaker={"user": "the user", "assistant": "the assistant"}.get(message.role, message.role),
            at=message.created_at,
            thread_id=message.thread_id,
            thread_name=message.thread.external_id,
            message_id=message.pk,
        )
    return Origin(door=_door(fact))


def _door(fact: Fact) -> str:
    actor = fact.created_by or ""
    if fact.source == Fact.Source.NOTEBOOK:
        return "Written from the notebook."
    if fact.batch_id:
        return "Drawn from a conversation by the extractor (no single message recorded)."
    if actor.startswith("agent:"):
        agent = fact.agent.name if fact.agent_id and fact.agent else actor.removeprefix("agent:")
        return f"Saved by the agent “{agent}” through the API or MCP, not from a stored message."
    if actor.startswith("staff:"):
        return f"Written in the dashboard by {actor.removeprefix('staff:')}."
    if actor.startswith("import"):
        return "Brought in by an import."
    return f"Written by {actor}." if actor else "No source recorded."


def review_evidence(items: list[Contradiction]) -> list[Contradiction]:
    """Attach each card's plain reason, person and the origin of both sides (no query: joined)."""
    for item in items:
        item.plain_reason = plain_reason(item)
        item.person = person_name(item.memory_user)
        item.origin_a = fact_origin(item.fact_a) if item.fact_a_id else None
        item.origin_b = fact_origin(item.fact_b) if item.fact_b_id else None
    return items


# Staleness is 0.4·age + 0.3·access + 0.3·contested: without the contested term it cannot pass 0.7,
# so every eviction candidate (> 0.9) is contested, and the partial index on contested active facts
# finds them without scoring the whole table.
assert 0.4 + 0.3 < EVICTION_THRESHOLD  # noqa: S101 -- the filter below relies on it


def eviction_candidates(principal: Principal) -> QuerySet[Fact]:
    qs = annotate_scores(visible(principal, Fact.objects.active().filter(pinned=False, contested=True)))
    return qs.filter(stale_score__gt=EVICTION_THRESHOLD).select_related("memory_user").order_by("-stale_score", "pk")


def quarantined(principal: Principal) -> QuerySet[Fact]:
    return (
        visible(principal, Fact.objects.filter(status=Fact.Status.QUARANTINED))
        .select_related("memory_user", "agent")
        .order_by("created_at", "pk")
    )
