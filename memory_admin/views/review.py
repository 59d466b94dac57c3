"""The review queue (contradictions) and its siblings: eviction candidates and quarantined writes."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from memory_admin.errors import AlreadyResolved, DomainError, NotFound
from memory_admin.models import Contradiction, Fact
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import CURATE, get_visible
from memory_admin.services.contradictions import ACTIONS, contradiction_reopen, contradiction_resolve
from memory_admin.services.curation import (
    eviction_evict,
    eviction_keep,
    quarantine_discard,
    quarantine_release,
    queue_action_undo,
)
from memory_admin.views.base import paginate, paginate_ids, safe_next, tenant_view

REVIEW_FILTERS = ("detector", "user", "category")
ACTION_LABELS = {
    "keep_a": "Kept A",
    "keep_b": "Kept B",
    "both_true": "Both true",
    "merge": "Merged",
    "dismiss": "Dismissed",
}


@tenant_view(staff_only=True)
def review_queue(request: HttpRequest) -> HttpResponse:
    filters = {name: request.GET.get(name, "") for name in REVIEW_FILTERS}
    page = paginate(request, sel.review_queue(request.principal, filters), 20)
    sel.review_evidence(page.object_list)
    return render(
        request,
        "dashboard/review.html",
        {
            "page": page,
            "filters": filters,
            "detectors": Contradiction.Detector.values,
            "categories": Fact.Category.values,
            "queue": "contradictions",
            "counts": sel.review_tab_counts(request.principal),
        },
    )


def _card(request: HttpRequest, contradiction_id) -> Contradiction:
    """One contradiction with what its card shows (both sides, their messages, the person)."""
    item = get_visible(request.principal, sel.review_card_rows(Contradiction.objects.all()), pk=contradiction_id)
    return sel.review_evidence([item])[0]


@require_POST
@tenant_view(ability=CURATE)
def review_resolve(request: HttpRequest, contradiction_id) -> HttpResponse:
    action = request.POST.get("action", "")
    try:
        item = contradiction_resolve(
            principal=request.principal,
            contradiction_id=contradiction_id,
            action=action,
            note=request.POST.get("note", ""),
            merged_text=request.POST.get("merged_text", ""),
        )
        outcome = {"level": "success", "detail": f"{ACTION_LABELS.get(action, action)}."}
    except NotFound:
        raise
    except AlreadyResolved:
        item = get_visible(
            request.principal,
            Contradiction.objects.select_related("memory_user", "fact_a", "fact_b", "merged_fact"),
            pk=contradiction_id,
        )
        done = ACTION_LABELS.get(item.resolution, "closed without an action")
        outcome = {
            "level": "warning",
            "already": True,
            "detail": f"Already resolved by {item.resolved_by or 'someone else'} ({done}); "
            "your choice was not applied.",
        }
    except DomainError as exc:
        if not request.htmx:
            messages.error(request, exc.detail)
            return redirect(safe_next(request, _queue_url(request)))
        return render(
            request, "dashboard/_review_card.html", {"item": _card(request, contradiction_id), "card_error": exc.detail}
        )
    outcome.update(resolution_sides(item))
    if request.htmx:
        return render(request, "dashboard/_review_done.html", {"item": item, **outcome})
    kept = f" Kept: “{outcome['kept'].content[:80]}”." if outcome.get("kept") else ""
    getattr(messages, outcome["level"])(request, outcome["detail"] + kept)
    return redirect(safe_next(request, _queue_url(request)))


@require_POST
@tenant_view(ability=CURATE)
def review_reopen(request: HttpRequest, contradiction_id) -> HttpResponse:
    """Undo a resolution: the card comes back open (htmx) or the queue shows it again."""
    try:
        contradiction_reopen(
            principal=request.principal, contradiction_id=contradiction_id, note=request.POST.get("note", "")
        )
        level, detail = "success", "Reopened: back in the queue, the facts as they were."
    except NotFound:
        raise
    except DomainError as exc:
        level, detail = "warning", exc.detail
    if request.htmx:
        item = _card(request, contradiction_id)
        if item.status == Contradiction.Status.OPEN:
            return render(request, "dashboard/_review_card.html", {"item": item, "card_note": detail})
        return render(
            request,
            "dashboard/_review_done.html",
            {"item": item, "level": level, "detail": detail, **resolution_sides(item)},
        )
    getattr(messages, level)(request, detail)
    return redirect(safe_next(request, _queue_url(request)))


@require_POST
@tenant_view(ability=CURATE)
def review_bulk(request: HttpRequest) -> HttpResponse:
    """One action on many contradictions; each is resolved on its own, so one already resolved by
    someone else is reported and skipped, never applied twice."""
    action = request.POST.get("action", "")
    ids = request.POST.getlist("ids")
    if action not in ACTIONS or action == "merge":
        messages.error(request, "Choose keep A, keep B, both true or dismiss for a bulk action.")
        return redirect(safe_next(request, _queue_url(request)))
    if not ids:
        messages.warning(request, "Select at least one contradiction first (its checkbox, or x).")
        return redirect(safe_next(request, _queue_url(request)))
    if request.POST.get("confirmed") != "1":
        # First the list of what would change, with each side's text; applying is a second POST.
        items = list(sel.review_queue(request.principal, {}).filter(pk__in=[i for i in ids[:200] if _is_uuid(i)]))
        return render(
            request,
            "dashboard/review_bulk_confirm.html",
            {
                "items": items,
                "action": action,
                "action_label": ACTION_LABELS[action],
                "ids": [str(i.pk) for i in items],
                "note": request.POST.get("note", ""),
                "next": safe_next(request, _queue_url(request)),
            },
        )
    done = skipped = 0
    for cid in ids[:200]:
        try:
            contradiction_resolve(
                principal=request.principal, contradiction_id=cid, action=action, note=request.POST.get("note", "")
            )
            done += 1
        except (AlreadyResolved, NotFound):
            skipped += 1
        except DomainError as exc:
            messages.error(request, exc.detail)
            skipped += 1
    messages.success(
        request,
        f"{ACTION_LABELS[action]}: {done} resolved"
        + (f", {skipped} skipped (already resolved or not visible)" if skipped else "")
        + ".",
    )
    return redirect(safe_next(request, _queue_url(request)))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def resolution_sides(item: Contradiction) -> dict:
    """Which fact a resolution kept and which it replaced, so the message names the right one."""
    a, b = item.fact_a, item.fact_b
    if item.resolution == "keep_a":
        return {"kept": a, "replaced": [b] if b else []}
    if item.resolution == "keep_b":
        return {"kept": b, "replaced": [a]}
    if item.resolution == "merge":
        return {"kept": item.merged_fact, "replaced": [f for f in (a, b) if f]}
    if item.resolution == "both_true":
        return {"both": [f for f in (a, b) if f]}
    return {}


def _queue_url(request: HttpRequest) -> str:
    return reverse("review", args=[request.tenant.slug])


@tenant_view(staff_only=True)
def eviction_queue(request: HttpRequest) -> HttpResponse:
    page = paginate(request, sel.eviction_candidates(request.principal))
    return render(
        request,
        "dashboard/review_facts.html",
        {
            "page": page,
            "queue": "eviction",
            "title": "Eviction candidates",
            "intro": "Active facts whose staleness is above 0.9: old, unread for long, or contested. Evict them "
            "(they stop being served, history is kept) or keep them (counts as a fresh read).",
            "actions": [("keep", "Keep"), ("evict", "Evict")],
            "counts": sel.review_tab_counts(request.principal),
        },
    )


@tenant_view(staff_only=True)
def quarantine_queue(request: HttpRequest) -> HttpResponse:
    page = paginate_ids(request, sel.quarantined(request.principal))
    return render(
        request,
        "dashboard/review_facts.html",
        {
            "page": page,
            "queue": "quarantine",
            "title": "Quarantined writes",
            "intro": "Writes the poisoning guard held back: text that reads like instructions to a model, or "
            "came from an external source. They are never served until released.",
            "actions": [("release", "Release"), ("discard", "Discard")],
            "counts": sel.review_tab_counts(request.principal),
        },
    )


def _undo(action: str):
    def run(*, principal, fact_id, note=""):
        return queue_action_undo(principal=principal, fact_id=fact_id, action=action, note=note)

    return run


FACT_QUEUE_ACTIONS = {
    ("eviction", "evict"): (eviction_evict, "Evicted: no longer served to agents."),
    ("eviction", "keep"): (eviction_keep, "Kept; counted as read."),
    ("quarantine", "release"): (quarantine_release, "Released: agents now receive this text."),
    ("quarantine", "discard"): (quarantine_discard, "Discarded: never served."),
    ("eviction", "undo_evict"): (_undo("evict"), "Undone: served to agents again."),
    ("quarantine", "undo_discard"): (_undo("discard"), "Undone: back in quarantine."),
    ("quarantine", "undo_release"): (_undo("release"), "Undone: back in quarantine, not served."),
}
UNDO_OF = {"evict": "undo_evict", "discard": "undo_discard", "release": "undo_release"}


@require_POST
@tenant_view(ability=CURATE)
def fact_queue_action(request: HttpRequest, queue: str, fact_id, action: str) -> HttpResponse:
    entry = FACT_QUEUE_ACTIONS.get((queue, action))
    if entry is None:
        raise Http404("No such action.")
    service, label = entry
    undo = None
    try:
        fact = service(principal=request.principal, fact_id=fact_id, note=request.POST.get("note", ""))
        level, detail = "success", label
        if action in UNDO_OF:
            undo = reverse("fact_queue_action", args=[request.tenant.slug, queue, fact_id, UNDO_OF[action]])
    except NotFound:
        raise
    except DomainError as exc:
        level, detail, fact = "warning", exc.detail, None
    context = {
        "level": level,
        "detail": detail,
        "colspan": 7,
        "fact": fact,
        "undo_url": undo,
        "next": safe_next(
            request, reverse(queue if queue != "contradictions" else "review", args=[request.tenant.slug])
        ),
    }
    if request.htmx:
        return render(request, "dashboard/_flash_row.html", context)
    if undo:  # without JavaScript: the outcome page with its undo button
        return render(request, "dashboard/queue_done.html", context)
    getattr(messages, level)(request, detail)
    return redirect(context["next"])
