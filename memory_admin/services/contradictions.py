"""Resolving a contradiction from the review queue: keep A, keep B, both true, merge, dismiss; and judging
again what the offline judge decided (`contradictions_rejudge`).

Safe when two reviewers act at once: the row is locked and must still be open, so the second
reviewer gets AlreadyResolved and nothing is applied twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memory_admin.embedding import embed_one
from memory_admin.errors import AlreadyResolved, Invalid
from memory_admin.models import Contradiction, Edge, Fact, RelationEnd
from memory_admin.selectors.access import CURATE, Principal, get_visible
from memory_admin.services.audit import audit, fact_snapshot
from memory_admin.services.entities import relations_reopen
from memory_admin.services.facts import check_fact_size, link, refresh_contested, successor, supersede
from memory_admin.services.facts.subject import UserSubject
from memory_admin.services.judge import rules_judge
from memory_admin.services.screening import screen_text

ACTIONS = ("keep_a", "keep_b", "both_true", "merge", "dismiss")


def _recount(a: Fact, b: Fact | None) -> None:
    """After a contradiction changed: both sides' `contested` flag recounted, and read again."""
    refresh_contested([a.pk, b.pk if b else None])
    a.refresh_from_db()
    if b is not None:
        b.refresh_from_db()


def _merged_text(principal: Principal, action: str, merged_text: str) -> tuple[str, list[float] | None]:
    """The text and vector of a merge, screened before the transaction so that a refusal's block
    record survives the refusal; nothing for the other actions."""
    if action != "merge":
        return merged_text, None
    check_fact_size(merged_text)
    merged_text = screen_text(principal, merged_text, route="review", memory_user_id=None).content
    return merged_text, embed_one(merged_text)


def _open_locked(principal: Principal, contradiction_id: Any) -> Contradiction:
    item = get_visible(principal, Contradiction.objects.select_for_update(of=("self",)), pk=contradiction_id)
    if item.status != Contradiction.Status.OPEN:
        raise AlreadyResolved(
            f"Already {item.status.replace('_', ' ')} by {item.resolved_by or 'someone'}"
            f" ({item.resolution or 'no action'}); nothing was changed.",
            status_now=item.status,
            resolution=item.resolution,
            resolved_by=item.resolved_by,
        )
    return item


def _merge(principal: Principal, a: Fact, b: Fact | None, *, text: str, vector: list[float] | None, note: str) -> Fact:
    """A reviewer's merge: one new fact, the next version of A, supersedes both sides."""
    merged = successor(
        a,
        principal=principal,
        key=a.key if b is None or a.key == b.key else None,
        content=text,
        confidence=max(a.confidence, b.confidence if b else 0),
        source=Fact.Source.USER_CORRECTION,
        embedding=vector,
        pinned=False,
        metadata={},
    )
    sides = [side for side in (a, b) if side is not None]
    for side in sides:
        if side.status == Fact.Status.ACTIVE:
            supersede(side, by=merged, reason=f"review: merged. {note}")
    merged.save(force_insert=True)
    for side in sides:
        link(principal, Edge.Type.SUPERSEDES, merged, side)
    return merged


def _apply(
    principal: Principal, action: str, a: Fact, b: Fact | None, *, text: str, vector: list[float] | None, note: str
) -> Fact | None:
    """What the action does to the facts; the merged fact when it makes one."""
    if action == "merge":
        return _merge(principal, a, b, text=text, vector=vector, note=note)
    if b is None:
        return None
    if action == "keep_a" and b.status == Fact.Status.ACTIVE:
        supersede(b, by=a, reason=f"review: kept the other side. {note}")
    elif action == "keep_b" and a.status == Fact.Status.ACTIVE:
        supersede(a, by=b, reason=f"review: kept the other side. {note}")
    elif action == "both_true":
        link(principal, Edge.Type.RELATED_TO, a, b)
    return None


def contradiction_resolve(
    *, principal: Principal, contradiction_id: Any, action: str, note: str = "", merged_text: str = ""
) -> Contradiction:
    principal.require(CURATE)
    if action not in ACTIONS:
        raise Invalid(f"action must be one of {', '.join(ACTIONS)}.", field="action")
    note = screen_text(principal, note, route="review", memory_user_id=None, what="note").content
    merged_text, merged_vector = _merged_text(principal, action, merged_text)
    with transaction.atomic():
        item = _open_locked(principal, contradiction_id)
        a = Fact.objects.select_for_update().get(pk=item.fact_a_id)
        b = Fact.objects.select_for_update().get(pk=item.fact_b_id) if item.fact_b_id else None
        before = {"a": fact_snapshot(a), "b": fact_snapshot(b)}
        merged = _apply(principal, action, a, b, text=merged_text, vector=merged_vector, note=note)
        item.status = Contradiction.Status.DISMISSED if action == "dismiss" else Contradiction.Status.RESOLVED
        item.resolution = action
        item.resolved_by = principal.actor
        item.resolved_at = timezone.now()
        item.note = note[:2000]
        item.merged_fact = merged
        item.save(update_fields=["status", "resolution", "resolved_by", "resolved_at", "note", "merged_fact"])
        _recount(a, b)
        audit(
            principal,
            "contradiction.resolve",
            outcome=action,
            target=item,
            memory_user_id=item.memory_user_id,
            before=before,
            after={"a": fact_snapshot(a), "b": fact_snapshot(b), "merged": fact_snapshot(merged)},
            reason=note,
        )
    return item


@transaction.atomic
def contradiction_reopen(*, principal: Principal, contradiction_id: Any, note: str = "") -> Contradiction:
    """Undo a resolution: the contradiction is open again and a side that "keep" superseded is active
    again (only if nothing changed it since). A merge made a new fact: it cannot be undone this way
    (correct or forget the merged fact instead)."""
    principal.require(CURATE)
    item = get_visible(principal, Contradiction.objects.select_for_update(of=("self",)), pk=contradiction_id)
    if item.status == Contradiction.Status.OPEN:
        raise AlreadyResolved("This contradiction is already open again; nothing was changed.", status_now=item.status)
    if item.resolution == "merge":
        raise Invalid("A merge wrote a new fact: correct or forget that fact instead of reopening.", field="action")
    a = Fact.objects.select_for_update().get(pk=item.fact_a_id)
    b = Fact.objects.select_for_update().get(pk=item.fact_b_id) if item.fact_b_id else None
    before = {"a": fact_snapshot(a), "b": fact_snapshot(b)}
    winner, loser = {"keep_a": (a, b), "keep_b": (b, a)}.get(item.resolution, (None, None))
    if loser is not None and winner is not None:
        if loser.status != Fact.Status.SUPERSEDED or loser.superseded_by_id != winner.pk:
            if loser.status == Fact.Status.SUPERSEDED:
                raise AlreadyResolved(
                    "The replaced fact has changed since; correct it instead of reopening.", status_now=loser.status
                )
        else:
            Fact.objects.filter(pk=loser.pk).update(
                status=Fact.Status.ACTIVE,
                superseded_by=None,
                status_reason=f"reopened by {principal.actor}"[:300],
                updated_at=timezone.now(),
            )
            relations_reopen(fact_ids=[loser.pk], reason=RelationEnd.SUPERSEDED, invalidated_by_id=winner.pk)
    if item.resolution == "both_true" and b is not None and item.resolved_at is not None:
        edge = (
            Edge.objects.filter(
                type=Edge.Type.RELATED_TO,
                src_fact=a,
                dst_fact=b,
                created_at__gte=item.resolved_at - timedelta(seconds=5),
            )
            .order_by("-created_at")
            .first()
        )
        if edge is not None:
            edge.delete()
    was = {"status": item.status, "resolution": item.resolution, "resolved_by": item.resolved_by}
    item.status, item.resolution, item.resolved_by, item.resolved_at = Contradiction.Status.OPEN, "", "", None
    item.save(update_fields=["status", "resolution", "resolved_by", "resolved_at"])
    _recount(a, b)
    audit(
        principal,
        "contradiction.reopen",
        outcome="open",
        target=item,
        memory_user_id=item.memory_user_id,
        before={**before, **was},
        after={"a": fact_snapshot(a), "b": fact_snapshot(b)},
        reason=note or "undo",
    )
    return item


# What the offline judge opened (or settled by confidence) between two facts; `rejudge` reads these again.
_REJUDGED_DETECTORS = (Contradiction.Detector.SEMANTIC, Contradiction.Detector.SCAN)
_SETTLED_BY_CONFIDENCE = (Contradiction.Resolution.KEEP_A, Contradiction.Resolution.KEEP_B)


def contradictions_rejudge(*, apply: bool, tenant_id: int | None = None) -> dict[str, Any]:
    """The contradictions the offline judge decided between two facts, judged again by today's rules (as the
    write path judges: both statements about "the user"), so that a better judge also cleans what an older
    one left. Those it no longer calls contradictory: an open one is dismissed; one settled by confidence
    (the weaker fact superseded) is reopened, which makes the superseded fact active again when nothing
    changed it since, then dismissed. Each step is audited as the review queue's own ("rejudge"). Without
    `apply`, nothing changes and the counts say what would."""
    items = (
        Contradiction.objects.filter(
            judge="rules", detector__in=_REJUDGED_DETECTORS, fact_b__isnull=False, merged_fact__isnull=True
        )
        .filter(
            Q(status=Contradiction.Status.OPEN)
            | Q(status=Contradiction.Status.AUTO_RESOLVED, resolution__in=_SETTLED_BY_CONFIDENCE)
        )
        .select_related("fact_a", "fact_b", "memory_user")
        .order_by("created_at", "pk")
    )
    if tenant_id is not None:
        items = items.filter(tenant_id=tenant_id)
    counts = {"judged": 0, "still_contradictory": 0, "open_dismissed": 0, "superseded_restored": 0, "left": 0}
    subjects: dict[int, UserSubject] = {}
    for item in items.iterator(chunk_size=500):
        counts["judged"] += 1
        user = item.memory_user
        if user.pk not in subjects:
            subjects[user.pk] = UserSubject.of(user, known_name=UserSubject.known_name(user.pk))
        about = subjects[user.pk].about
        verdict = rules_judge(about(item.fact_a.content), about(item.fact_b.content))
        if verdict.contradictory:
            counts["still_contradictory"] += 1
            continue
        opened = item.status == Contradiction.Status.OPEN
        if not apply:
            counts["open_dismissed" if opened else "superseded_restored"] += 1
            continue
        principal = Principal.system(item.tenant_id, actor="rejudge")
        note = f"The offline judge no longer calls these contradictory ({verdict.reason})."
        try:
            with transaction.atomic():
                if not opened:
                    contradiction_reopen(principal=principal, contradiction_id=item.pk, note=note)
                contradiction_resolve(principal=principal, contradiction_id=item.pk, action="dismiss", note=note)
        except AlreadyResolved:  # changed since (a reviewer, a later correction): left as it is
            counts["left"] += 1
            continue
        counts["open_dismissed" if opened else "superseded_restored"] += 1
    return counts
