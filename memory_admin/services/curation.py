"""Review-queue actions beside contradictions: quarantined writes (release, discard) and eviction
candidates (evict, keep). Each is locked, idempotent-safe for two reviewers, and audited."""

from __future__ import annotations

from uuid import UUID

from django.db import transaction
from django.utils import timezone

from memory_admin.errors import AlreadyResolved
from memory_admin.models import Edge, Fact, RelationEnd
from memory_admin.selectors.access import CURATE, Principal, get_visible
from memory_admin.services.audit import audit_fact, fact_snapshot
from memory_admin.services.entities import relations_end, relations_reopen
from memory_admin.services.facts import link, supersede
from memory_admin.services.screening import screens


def _locked(principal: Principal, fact_id: UUID | str, expected: str) -> Fact:
    fact = get_visible(principal, Fact.objects.select_for_update(of=("self",)), pk=fact_id)
    if fact.status != expected:
        raise AlreadyResolved(
            f"This fact is {fact.status} now, not {expected}: someone acted on it first; nothing was changed.",
            status_now=fact.status,
        )
    return fact


@screens("note", route="review")
@transaction.atomic
def quarantine_release(*, principal: Principal, fact_id: UUID | str, note: str = "") -> Fact:
    """A reviewer vouches for a quarantined write: it becomes active. If its key already has an active
    value, the released fact is the newer version of that slot (the old one is superseded)."""
    principal.require(CURATE)
    fact = _locked(principal, fact_id, Fact.Status.QUARANTINED)
    before = fact_snapshot(fact)
    slot = None
    if fact.key:
        slot = (
            Fact.objects.select_for_update()
            .for_user(fact.memory_user_id)
            .active()
            .filter(task_ref=fact.task_ref, key=fact.key)
            .first()
        )
    if slot is not None:
        supersede(slot, by=fact, reason="replaced by a released quarantined write")
        # `supersedes` is one-to-one: link the chain only if nothing else already corrects the slot.
        if not Fact.objects.filter(supersedes_id=slot.pk).exists():
            fact.supersedes_id = slot.pk
        fact.version = slot.version + 1
        link(principal, Edge.Type.SUPERSEDES, fact, slot)
    fact.status = Fact.Status.ACTIVE
    fact.status_reason = f"released from quarantine by {principal.actor}"[:300]
    fact.save(update_fields=["status", "status_reason", "supersedes", "version", "updated_at"])
    audit_fact(principal, "quarantine.release", fact, outcome="released", before=before, reason=note)
    return fact


@screens("note", route="review")
@transaction.atomic
def quarantine_discard(*, principal: Principal, fact_id: UUID | str, note: str = "") -> Fact:
    principal.require(CURATE)
    fact = _locked(principal, fact_id, Fact.Status.QUARANTINED)
    before = fact_snapshot(fact)
    fact.status = Fact.Status.EVICTED
    fact.status_reason = f"discarded from quarantine: {note}"[:300] if note else "discarded from quarantine"
    fact.save(update_fields=["status", "status_reason", "updated_at"])
    audit_fact(principal, "quarantine.discard", fact, outcome="evicted", before=before, reason=note)
    return fact


@screens("note", route="review")
@transaction.atomic
def eviction_evict(*, principal: Principal, fact_id: UUID | str, note: str = "") -> Fact:
    principal.require(CURATE)
    fact = _locked(principal, fact_id, Fact.Status.ACTIVE)
    before = fact_snapshot(fact)
    fact.status = Fact.Status.EVICTED
    fact.status_reason = "evicted by review: stale"
    fact.save(update_fields=["status", "status_reason", "updated_at"])
    relations_end(fact_ids=[fact.pk], reason=RelationEnd.REVIEW_EVICTED)
    audit_fact(
        principal,
        "fact.evict",
        fact,
        outcome="evicted",
        before=before,
        reason=note or "eviction candidate confirmed by a reviewer",
    )
    return fact


@screens("note", route="review")
@transaction.atomic
def eviction_keep(*, principal: Principal, fact_id: UUID | str, note: str = "") -> Fact:
    """Keep a stale fact: count it as just read, which resets its access decay (and so its staleness)."""
    principal.require(CURATE)
    fact = _locked(principal, fact_id, Fact.Status.ACTIVE)
    before = fact_snapshot(fact)
    fact.last_accessed_at = timezone.now()
    fact.save(update_fields=["last_accessed_at", "updated_at"])
    audit_fact(
        principal,
        "fact.keep",
        fact,
        outcome="kept",
        before=before,
        reason=note or "eviction candidate kept by a reviewer",
    )
    return fact


# What "undo" puts back after each queue action: (status the action left, status to return to).
UNDOABLE = {
    "evict": (Fact.Status.EVICTED, Fact.Status.ACTIVE),
    "discard": (Fact.Status.EVICTED, Fact.Status.QUARANTINED),
    "release": (Fact.Status.ACTIVE, Fact.Status.QUARANTINED),
}


@transaction.atomic
def queue_action_undo(*, principal: Principal, fact_id: UUID | str, action: str, note: str = "") -> Fact:
    """Reopen a review-queue decision: an evicted fact is served again, a discarded or released write
    is back in quarantine. Refused (AlreadyResolved) when the fact has moved on since, or when a
    release replaced an older value of its key (undoing that needs a correction, not a status flip)."""
    principal.require(CURATE)
    left, back = UNDOABLE[action]
    fact = _locked(principal, fact_id, left)
    if action == "release" and Fact.objects.filter(superseded_by_id=fact.pk).exists():
        raise AlreadyResolved(
            "This release replaced an older value; correct the fact instead of undoing.", status_now=fact.status
        )
    before = fact_snapshot(fact)
    fact.status = back
    fact.status_reason = f"{action} undone by {principal.actor}"[:300]
    fact.save(update_fields=["status", "status_reason", "updated_at"])
    if back == Fact.Status.QUARANTINED:  # relations drawn while it was served end with it
        relations_end(fact_ids=[fact.pk], reason=RelationEnd.QUARANTINED)
    elif action == "evict":  # served again: what the eviction closed holds again (as new rows)
        relations_reopen(fact_ids=[fact.pk], reason=RelationEnd.REVIEW_EVICTED)
    audit_fact(
        principal,
        f"{'quarantine' if action != 'evict' else 'fact'}.undo",
        fact,
        outcome=back,
        before=before,
        reason=note or f"undo {action}",
    )
    return fact
