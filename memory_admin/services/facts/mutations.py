"""The other fact mutations: correct, forget, pin, promote; and the read counter."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from memory_admin.embedding import embed_one
from memory_admin.errors import Conflict, Invalid
from memory_admin.models import AuditEvent, Fact, RelationEnd
from memory_admin.selectors.access import CURATE, Principal, writable_fact
from memory_admin.services.access_counts import record_access as accumulate
from memory_admin.services.audit import audit, audit_fact, fact_snapshot
from memory_admin.services.entities import relations_end, relations_reopen
from memory_admin.services.facts.checks import check_fact_size
from memory_admin.services.facts.conflicts import close_contradictions_of
from memory_admin.services.facts.versions import lock_memory_user, newest_version, replace, successor, supersede
from memory_admin.services.guard import refuse_instructions
from memory_admin.services.screening import screen_text, screens

SCOPE_ORDER = {"task": 0, "user": 1, "org": 2, "global": 3}


def fact_correct(
    *,
    principal: Principal,
    fact_id: Any,
    content: str,
    confidence: float | None = None,
    category: str | None = None,
    reason: str = "",
) -> Fact:
    """A new version that supersedes the fact (source user_correction). Only the newest version of a
    chain can be corrected; correcting an older one answers 409 with the current id."""
    old = writable_fact(principal, fact_id)
    check_fact_size(content)
    # Screen outside the transaction: a refusal's block record must survive the refusal.
    content = screen_text(principal, content, route="correction", memory_user_id=old.memory_user_id).content
    reason = screen_text(
        principal, reason, route="correction", memory_user_id=old.memory_user_id, what="reason"
    ).content
    # A correction replaces a served fact at once, so it is refused rather than quarantined.
    refuse_instructions(principal, content, what="correction")
    vector = embed_one(content)
    with transaction.atomic():
        if old.memory_user_id:
            lock_memory_user(old.memory_user_id)
        old.refresh_from_db()
        if old.status == Fact.Status.SUPERSEDED:
            raise Conflict(
                "This fact was already corrected; correct its newest version instead.",
                code="already_superseded",
                current_id=str(_served_instead(old)),
            )
        new = successor(
            old,
            principal=principal,
            content=content,
            category=category or old.category,
            confidence=1.0 if confidence is None else confidence,
            source=Fact.Source.USER_CORRECTION,
            embedding=vector,
        )
        before = fact_snapshot(old)
        replace(principal, old, by=new, reason=reason or "corrected")
        close_contradictions_of(principal, old, note="superseded by a correction")
        audit_fact(principal, "fact.correct", new, outcome="superseded", before=before, reason=reason)
    return new


def _served_instead(old: Fact) -> Any:
    """What stands in place of a superseded fact: its newest version, or the fact that beat it."""
    newest = newest_version(old)
    return newest.pk if newest.pk != old.pk else (old.superseded_by_id or "")


@screens("reason", route="forget")
@transaction.atomic
def fact_forget(*, principal: Principal, fact_id: Any, reason: str = "") -> Fact:
    """Evict the fact. A version that was replaced since (corrected, updated by its key, superseded by a
    surer fact) is refused with `already_superseded` and the id of the version served now: forgetting
    the old one would change nothing the agent reads, and forgetting the new one on its behalf could
    throw away a correction it has not seen. The same rule as `fact_correct`, on every door."""
    fact = writable_fact(principal, fact_id)
    if fact.status == Fact.Status.SUPERSEDED:
        newest = newest_version(fact)
        if newest.pk != fact.pk:
            raise Conflict(
                "This fact was replaced by a newer version; forget that one (current_id) to forget what is served.",
                code="already_superseded",
                current_id=str(newest.pk),
                current_status=newest.status,
            )
    before = fact_snapshot(fact)
    Fact.objects.filter(pk=fact.pk).update(
        status=Fact.Status.EVICTED, status_reason=(reason or "forgotten")[:300], pinned=False, updated_at=timezone.now()
    )
    fact.refresh_from_db()
    relations_end(fact_ids=[fact.pk], reason=RelationEnd.FORGOTTEN)
    close_contradictions_of(principal, fact, note="one side was forgotten")
    audit_fact(principal, "fact.forget", fact, outcome="evicted", before=before, reason=reason)
    return fact


FORGET_ACTION = "fact.forget"
RESTORE_ACTION = "fact.restore"


@transaction.atomic
def fact_restore(*, principal: Principal, fact_id: Any) -> Fact:
    """Undo a Forget: the fact is served again and the relations its forgetting closed hold again.
    Only a fact whose last change was a Forget can come back (`not_forgotten`: one evicted by a
    reviewer, the cap or the GC is restored in the review queue, if at all), and not while another
    fact holds its key (`key_taken`: a newer value was stored since)."""
    fact = writable_fact(principal, fact_id)
    last = (
        AuditEvent.objects.filter(target_type="fact", target_id=str(fact.pk))
        .order_by("-created_at", "-pk")
        .values_list("action", flat=True)
        .first()
    )
    if fact.status != Fact.Status.EVICTED or last != FORGET_ACTION:
        raise Conflict(
            "Only a forgotten fact can be restored; this one was not forgotten (or is in use).",
            code="not_forgotten",
            status_now=fact.status,
        )
    if fact.key and (
        Fact.objects.active()
        .filter(tenant_id=fact.tenant_id, memory_user_id=fact.memory_user_id, task_ref=fact.task_ref, key=fact.key)
        .exists()
    ):
        raise Conflict("A newer fact about the same thing is in use now; correct that one instead.", code="key_taken")
    before = fact_snapshot(fact)
    Fact.objects.filter(pk=fact.pk).update(
        status=Fact.Status.ACTIVE, status_reason=f"restored by {principal.actor}"[:300], updated_at=timezone.now()
    )
    fact.refresh_from_db()
    relations_reopen(fact_ids=[fact.pk], reason=RelationEnd.FORGOTTEN)
    audit_fact(principal, RESTORE_ACTION, fact, outcome="active", before=before, reason="forget undone")
    return fact


@transaction.atomic
def fact_pin(*, principal: Principal, fact_id: Any, pinned: bool) -> Fact:
    fact = writable_fact(principal, fact_id)
    if fact.memory_user_id is None:
        principal.require(CURATE)
    before = fact_snapshot(fact)
    Fact.objects.filter(pk=fact.pk).update(pinned=pinned, updated_at=timezone.now())
    fact.refresh_from_db()
    audit_fact(principal, "fact.pin" if pinned else "fact.unpin", fact, outcome="updated", before=before)
    return fact


def record_access(fact_ids: Any) -> None:
    """Reads bump access counts: accumulated in process and written about once a second as one
    statement (services.access_counts), not a write per request."""

    accumulate(fact_ids)


def _promotable(principal: Principal, fact_id: Any, to: str) -> Fact:
    if to not in ("user", "org"):
        raise Invalid("A fact is promoted to the user or the org scope.", field="to")
    old = writable_fact(principal, fact_id)
    if SCOPE_ORDER[to] <= SCOPE_ORDER[old.scope]:
        raise Invalid(f"A {old.scope} fact cannot be promoted to {to}: promotion only moves up.", field="to")
    if to == "org":
        principal.require(CURATE)
    return old


def fact_promote(*, principal: Principal, fact_id: Any, to: str) -> Fact:
    """Move a fact up the scope tree (task → user → org, SPEC §3): a copy in the parent scope
    supersedes it. Promoting to the org scope is curation (admins and operators)."""
    old = _promotable(principal, fact_id, to)
    with transaction.atomic():
        if old.memory_user_id:
            lock_memory_user(old.memory_user_id)
        old.refresh_from_db()
        if old.status != Fact.Status.ACTIVE:
            raise Conflict("Only an active fact can be promoted.", code="not_active", status_now=old.status)
        new = successor(
            old,
            principal=principal,
            memory_user_id=old.memory_user_id if to == "user" else None,
            scope=to,
            task_ref="",
            valid_from=old.valid_from,
            extractor=old.extractor,
        )
        before = fact_snapshot(old)
        # The target slot may already hold this key: the promoted copy replaces it as a new version.
        if new.key:
            target = (
                Fact.objects.active()
                .filter(tenant_id=new.tenant_id, memory_user_id=new.memory_user_id, task_ref="", key=new.key)
                .first()
            )
            if target is not None:
                supersede(target, by=new, reason=f"replaced by a promoted {old.scope} fact")
        replace(principal, old, by=new, reason=f"promoted to {to}")
        audit(
            principal,
            "fact.promote",
            outcome=to,
            target=new,
            memory_user_id=old.memory_user_id,
            before=before,
            after=fact_snapshot(new),
        )
    return new
