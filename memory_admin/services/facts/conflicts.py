"""Two facts that disagree: who wins without a person (the confidence gap), the Contradiction row that
records it, and the `contested` flag. Used by the write path and by the periodic contradiction scan
(services.lifecycle), so that both settle a disagreement the same way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from memory_admin.models import Contradiction, Fact
from memory_admin.selectors.access import Principal
from memory_admin.services.judge import Verdict


def contradiction_winner(*, standing: Fact, challenger: Fact, gap: float) -> Fact | None:
    """The side that wins a contradiction without a person, or None when a person has to decide.

    A pinned fact in memory (a person vouched for it) wins against an unpinned one and is never the
    loser; two pinned facts go to a person. A new fact's own `pinned` (the challenger of a write, not
    stored yet) gives it no such right. Otherwise the surer side wins when it is surer by at least
    `gap` (the tenant's auto_resolve_gap); on a tie at a gap of 0, the challenger (the newer fact)."""
    challenger_pinned = challenger.pinned and not challenger._state.adding
    if standing.pinned or challenger_pinned:
        if standing.pinned and challenger_pinned:
            return None
        return standing if standing.pinned else challenger
    if challenger.confidence - standing.confidence >= gap:
        return challenger
    if standing.confidence - challenger.confidence >= gap:
        return standing
    return None


def notebook_overrule_record(
    principal: Principal, fact: Fact, *, revision_id: int, excerpt: str, verdict: Verdict
) -> Contradiction:
    """The Contradiction of a fact the notebook overruled (the notebook always wins): recorded already
    resolved, for the audit trail and the review history, never for a person to decide."""
    return Contradiction.objects.create(
        tenant_id=principal.tenant_id,
        memory_user_id=fact.memory_user_id,
        fact_a=fact,
        notebook_revision_id=revision_id,
        notebook_excerpt=excerpt,
        detector=Contradiction.Detector.NOTEBOOK,
        judge=verdict.judge,
        reason=verdict.reason,
        status=Contradiction.Status.AUTO_RESOLVED,
        resolution=Contradiction.Resolution.AUTO,
        resolved_by="system",
        resolved_at=timezone.now(),
    )


def contradiction_record(
    principal: Principal,
    *,
    fact_a: Fact,
    fact_b: Fact,
    detector: str,
    verdict: Verdict,
    similarity: float,
    winner: Fact | None,
    resolved_by: str,
) -> Contradiction:
    """The Contradiction between two facts: open (for a person) when there is no winner, else already
    resolved in the winner's favour."""
    closed = (
        {}
        if winner is None
        else {
            "status": Contradiction.Status.AUTO_RESOLVED,
            "resolved_by": resolved_by,
            "resolved_at": timezone.now(),
            "resolution": Contradiction.Resolution.KEEP_B if winner is fact_b else Contradiction.Resolution.KEEP_A,
        }
    )
    return Contradiction.objects.create(
        tenant_id=principal.tenant_id,
        memory_user_id=fact_a.memory_user_id,
        fact_a=fact_a,
        fact_b=fact_b,
        detector=detector,
        judge=verdict.judge,
        reason=verdict.reason,
        similarity=similarity,
        **closed,
    )


def refresh_contested(fact_ids: Iterable[Any]) -> None:
    """`contested` is true exactly while a fact is part of an open contradiction."""
    ids = [i for i in fact_ids if i]
    if not ids:
        return
    open_q = Contradiction.objects.filter(
        Q(fact_a=OuterRef("pk")) | Q(fact_b=OuterRef("pk")), status=Contradiction.Status.OPEN
    )
    Fact.objects.filter(pk__in=ids).update(contested=Exists(open_q))


def close_contradictions_of(principal: Principal, fact: Fact, *, note: str) -> None:
    """A fact that leaves (corrected, forgotten, evicted) settles the open contradictions it was in."""
    open_ = Contradiction.objects.filter(Q(fact_a=fact) | Q(fact_b=fact), status=Contradiction.Status.OPEN)
    others = set()
    for c in open_:
        others.update({c.fact_a_id, c.fact_b_id})
    open_.update(
        status=Contradiction.Status.AUTO_RESOLVED,
        resolution=Contradiction.Resolution.AUTO,
        resolved_by=principal.actor,
        resolved_at=timezone.now(),
        note=note,
    )
    refresh_contested(others | {fact.pk})
