"""Facts: the lists and their filters, a member's own facts in plain words, beliefs as of a date, a fact's detail."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db.models import CharField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Cast
from django.utils import timezone

from memory_admin import scoring
from memory_admin.models import AuditEvent, Contradiction, Edge, Fact, MemoryUser
from memory_admin.scoring import STALE_THRESHOLD, annotate_scores
from memory_admin.selectors.access import Principal, get_visible, visible

# --- Facts ----------------------------------------------------------------------------------------


def fact_rows(principal: Principal, memory_user: MemoryUser | None, filters: dict[str, str]) -> QuerySet[Fact]:
    """The facts lists (a user's tab, or tenant-wide with `user` naming one by exact id): filters by
    status/category/kind/source/stale/text and effective-confidence and staleness bands, with scores
    computed in SQL."""
    qs = visible(principal, Fact.objects.all())
    if memory_user is not None:
        qs = qs.filter(memory_user=memory_user)
    status = filters.get("status", "active")
    if status and status != "all":
        qs = qs.filter(status=status)
    for name in ("category", "kind", "source"):
        if filters.get(name):
            qs = qs.filter(**{name: filters[name]})
    if filters.get("q"):
        qs = qs.filter(Q(content__icontains=filters["q"]) | Q(key__icontains=filters["q"]))
    if filters.get("user"):
        qs = qs.filter(memory_user__external_id=filters["user"])
    qs = _in_score_bands(annotate_scores(qs), filters)
    if filters.get("stale") == "yes":
        qs = qs.filter(Q(status=Fact.Status.STALE) | Q(stale_score__gt=STALE_THRESHOLD))
    elif filters.get("stale") == "no":
        qs = qs.exclude(status=Fact.Status.STALE).filter(stale_score__lte=STALE_THRESHOLD)
    # The vectors are never shown: reading and parsing 50 of them was a third of the page's time.
    return (
        qs.select_related("memory_user").defer("embedding", "search_vector").order_by("-pinned", "-created_at", "-pk")
    )


# Range filters of the facts lists: effective confidence and staleness from `_min` (inclusive) to `_max`
# (exclusive, but 1 includes 1.0: the top bar of a distribution holds 0.9 to 1.0).
SCORE_BANDS = (("conf", "eff_conf"), ("stale", "stale_score"))


def _in_score_bands(qs: QuerySet[Fact], filters: dict[str, str]) -> QuerySet[Fact]:
    """Validated numbers (views.facts.score_band_filters) narrow an annotate_scores queryset."""
    for prefix, field in SCORE_BANDS:
        low, high = filters.get(f"{prefix}_min"), filters.get(f"{prefix}_max")
        if low:
            qs = qs.filter(**{f"{field}__gte": float(low)})
        if high and float(high) < 1:
            qs = qs.filter(**{f"{field}__lt": float(high)})
    return qs


def fact_with_scores(principal: Principal, fact_id: UUID | str) -> Fact:
    return get_visible(
        principal,
        annotate_scores(
            Fact.objects.select_related(
                "memory_user", "message", "message__thread", "batch", "superseded_by_notebook", "agent"
            )
        ),
        pk=fact_id,
    )


def fact_edges(principal: Principal, fact: Fact) -> list[Edge]:
    return list(
        visible(principal, Edge.objects.filter(Q(src_fact=fact) | Q(dst_fact=fact)))
        .select_related("src_fact", "dst_fact", "src_episode", "dst_episode")
        .order_by("created_at")[:200]
    )


# --- A member's own facts, in plain words -------------------------------------------------------------

# The audit actions that take a fact out of use or bring it back: the last of them says why a fact
# that is not in use left (a Forget, which can be undone, or a removal by review, cap or GC).
IN_OUT_ACTIONS = (
    "fact.forget",
    "fact.restore",
    "fact.evict",
    "fact.lifecycle",
    "fact.undo",
    "quarantine.discard",
    "quarantine.undo",
)
MEMBER_SHOWS = {"in_use": "In use", "forgotten": "Forgotten by you", "all": "Everything"}


def with_last_change(qs: QuerySet[Fact]) -> QuerySet[Fact]:
    """Annotate each fact with its last in-or-out change (action, actor, time): a lookup each on the
    audit log's (target_type, target_id) index."""
    last = (
        AuditEvent.objects.filter(
            target_type="fact", target_id=Cast(OuterRef("pk"), CharField()), action__in=IN_OUT_ACTIONS
        )
        .order_by("-created_at", "-pk")
        .values("action", "actor", "created_at")
    )
    return qs.annotate(
        change_action=Subquery(last.values("action")[:1]),
        change_actor=Subquery(last.values("actor")[:1]),
        change_at=Subquery(last.values("created_at")[:1]),
    )


def member_fact_rows(principal: Principal, memory_user: MemoryUser, show: str, q: str = "") -> QuerySet[Fact]:
    """A member's facts: in use (active or stale), forgotten by them (their Forget was the last change),
    or everything but older versions (those are in each fact's history). Newest first."""
    qs = with_last_change(visible(principal, Fact.objects.filter(memory_user=memory_user)))
    if show == "forgotten":
        qs = qs.filter(status=Fact.Status.EVICTED, change_action="fact.forget", change_actor=principal.actor)
    elif show == "all":
        qs = qs.exclude(status=Fact.Status.SUPERSEDED)
    else:
        qs = qs.filter(status__in=[Fact.Status.ACTIVE, Fact.Status.STALE])
    if q:
        qs = qs.filter(content__icontains=q)
    return qs.defer("embedding", "search_vector").order_by("-pinned", "-created_at", "-pk")


def fact_last_change(principal: Principal, fact: Fact) -> Fact:
    """`with_last_change` for one fact already read (the fact page): one query."""
    row = with_last_change(visible(principal, Fact.objects.filter(pk=fact.pk))).values(
        "change_action", "change_actor", "change_at"
    )
    for name, value in (row.first() or {}).items():
        setattr(fact, name, value)
    return fact


# --- Beliefs as of a date -------------------------------------------------------------------------

LEAVING_ACTIONS = ("fact.forget", "fact.evict", "fact.lifecycle", "quarantine.discard", "user.erase")


def beliefs_as_of(principal: Principal, memory_user: MemoryUser, moment: datetime, limit: int = 500) -> list[Fact]:
    """Facts that were active at `moment`: already written and true (valid_from), not yet replaced.

    A fact leaves the active set when its successor is written (superseded_by's created_at), when the
    notebook overrules it (the revision's time), or when it is forgotten or evicted (the audit event of
    that change; updated_at when there is none). Stale facts are still served (at half weight), so they
    still count as beliefs. A fact whose successor is older than
    itself was overruled on arrival and was never believed. Three queries whatever the count."""
    candidates = list(
        visible(principal, Fact.objects.for_user(memory_user))
        .filter(created_at__lte=moment, valid_from__lte=moment)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=moment))
        .exclude(status=Fact.Status.QUARANTINED)
        .select_related("superseded_by", "superseded_by_notebook")
        .order_by("-valid_from")
    )
    leaving_ids = [str(f.pk) for f in candidates if f.status == Fact.Status.EVICTED]
    left_at: dict[str, datetime] = {}
    if leaving_ids:
        for target_id, at in (
            visible(principal, AuditEvent.objects.filter(target_type="fact", target_id__in=leaving_ids))
            .filter(action__in=LEAVING_ACTIONS, outcome="evicted")
            .order_by("created_at")
            .values_list("target_id", "created_at")
        ):
            left_at.setdefault(target_id, at)
    believed = []
    for fact in candidates:
        if fact.superseded_by_id:
            end = fact.superseded_by.created_at
        elif fact.superseded_by_notebook_id:
            end = fact.superseded_by_notebook.created_at
        elif fact.status == Fact.Status.EVICTED:
            end = left_at.get(str(fact.pk), fact.updated_at)
        else:
            end = None
        if end is not None and end <= fact.created_at:
            continue  # overruled on arrival: never believed
        if end is None or end > moment:
            believed.append(fact)
        if len(believed) >= limit:
            break
    return believed


# --- Fact detail: the open contradiction, the decay curve ---------------------------------------


def open_contradiction_of(principal: Principal, fact: Fact) -> Contradiction | None:
    """The open contradiction a contested fact is part of (the oldest, when several)."""
    if not fact.contested:
        return None
    return (
        visible(principal, Contradiction.objects.filter(status=Contradiction.Status.OPEN))
        .filter(Q(fact_a=fact) | Q(fact_b=fact))
        .order_by("created_at")
        .first()
    )


DECAY_PAST_DAYS = 90
DECAY_FUTURE_DAYS = 365
DECAY_W, DECAY_H, DECAY_PAD = 560, 150, 30


def decay_curve(fact: Fact, now: datetime | None = None) -> dict[str, Any]:
    """Effective confidence and staleness of one fact over time, from `scoring.terms` (the formula's
    one Python form): the past since it was stored (with the reads it has now: the history of reads is
    not kept) and a projection for the next year if nobody reads it. Also the day it would turn stale
    and become an eviction candidate, unread. Geometry only; the template draws and escapes."""
    now = now or timezone.now()
    start = max(fact.created_at, now - timedelta(days=DECAY_PAST_DAYS)) if fact.created_at else now
    span = (now - start).total_seconds() / 86400.0 + DECAY_FUTURE_DAYS
    plot_w, plot_h = DECAY_W - DECAY_PAD, DECAY_H - 20
    step = max(1.0, span / 60)
    past, future = [], []
    stale_on = evict_on = half_on = None
    now_effective = scoring.terms(fact, now=now)["effective"]
    t = 0.0
    while t <= span + 1e-9:
        moment = start + timedelta(days=t)
        terms = scoring.terms(fact, now=moment)
        point = (round(DECAY_PAD + plot_w * t / span, 1), round(plot_h * (1 - terms["effective"]), 1))
        (past if moment <= now else future).append(point)
        if moment > now and stale_on is None and terms["staleness"] > scoring.STALE_THRESHOLD:
            stale_on = moment
        if moment > now and evict_on is None and terms["staleness"] > scoring.EVICTION_THRESHOLD:
            evict_on = moment
        if moment > now and half_on is None and terms["effective"] < now_effective / 2:
            half_on = moment
        t += step
    if past and future:
        future.insert(0, past[-1])
    now_x = round(DECAY_PAD + plot_w * (now - start).total_seconds() / 86400.0 / span, 1)
    current = scoring.terms(fact, now=now)
    return {
        "w": DECAY_W,
        "h": DECAY_H,
        "plot_h": plot_h,
        "pad": DECAY_PAD,
        "now_x": now_x,
        "past": " ".join(f"{x},{y}" for x, y in past),
        "future": " ".join(f"{x},{y}" for x, y in future),
        "start": start,
        "end": now + timedelta(days=DECAY_FUTURE_DAYS),
        "effective": current["effective"],
        "in_year": scoring.terms(fact, now=now + timedelta(days=DECAY_FUTURE_DAYS))["effective"],
        "stale_on": stale_on,
        "evict_on": evict_on,
        "half_on": half_on,
        "has_past": now_x - DECAY_PAD > 40,
        "staleness": current["staleness"],
        "already_stale": current["staleness"] > scoring.STALE_THRESHOLD,
        "pinned": fact.pinned,
        "contested": fact.contested,
    }
