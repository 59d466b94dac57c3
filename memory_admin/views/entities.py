"""Entities in the dashboard (SPEC §12): the list, an entity's page (aliases, facts, relations over time,
the graph around it), curation (merge with undo, split an alias off, rename, close a relation) and the
entity-merge review queue. Thin views over selectors/entities.py and services/entity_curation.py."""

from __future__ import annotations

from datetime import datetime, time

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from memory_admin.errors import DomainError, NotFound
from memory_admin.knowledge.entities import entity_document_mentions
from memory_admin.models import Entity, EntityMergeReview
from memory_admin.selectors.access import CURATE, get_visible
from memory_admin.selectors.dashboard import review_tab_counts
from memory_admin.selectors.entities import (
    MAX_GRAPH_DEPTH,
    entity_counts,
    entity_detail,
    entity_get_for,
    entity_graph,
    entity_history,
    entity_merges,
    entity_queryset,
    entity_sample_facts,
    merge_candidates,
    merge_review_queue,
)
from memory_admin.services.entity_curation import (
    entity_merge,
    entity_rename,
    entity_split,
    entity_unmerge,
    merge_review_decide,
    merge_review_reopen,
    relation_close,
    relation_reopen,
)
from memory_admin.views.base import paginate, paginate_ids, safe_next, tenant_view
from memory_admin.views.graph_svg import layout


@tenant_view(staff_only=True)
def entities(request: HttpRequest) -> HttpResponse:
    q = request.GET.get("q", "").strip()[:200]
    kind = request.GET.get("type", "")
    kind = kind if kind in Entity.Type.values else ""
    page = paginate_ids(request, entity_queryset(request.principal, q=q, type=kind))
    counts = entity_counts(request.principal, [e.pk for e in page.object_list])
    rows = [(e, *counts.get(e.pk, (0, 0))) for e in page.object_list]
    return render(
        request,
        "dashboard/entities.html",
        {"page": page, "rows": rows, "q": q, "type": kind, "types": Entity.Type.values},
    )


def _as_of(raw: str) -> tuple[datetime | None, str]:
    """The graph's moment from a date field: None for now, or an error to show."""
    if not raw:
        return None, ""
    try:
        day = datetime.fromisoformat(raw)
    except ValueError:
        return None, "Give a date as YYYY-MM-DD; the graph shows today."
    moment = day if "T" in raw else datetime.combine(day.date(), time.max)
    return (timezone.make_aware(moment) if timezone.is_naive(moment) else moment), ""


def _depth(raw: str) -> int:
    try:
        return max(1, min(MAX_GRAPH_DEPTH, int(raw)))
    except ValueError:
        return 1


@tenant_view(staff_only=True)
def entity(request: HttpRequest, entity_id) -> HttpResponse:
    item = entity_get_for(request.principal, entity_id)
    if item.merged_into_id is not None:
        messages.info(request, f"“{item.name}” was merged into this entity.")
        return redirect("entity", request.tenant.slug, item.merged_into_id)
    detail = entity_detail(request.principal, item)
    as_of, date_error = _as_of(request.GET.get("as_of", "").strip())
    depth = _depth(request.GET.get("depth", "1"))
    graph = entity_graph(request.principal, item, depth=depth, as_of=as_of)
    split_from = None
    if request.GET.get("split_from"):
        try:
            split_from = entity_get_for(request.principal, request.GET["split_from"])
        except NotFound:
            split_from = None
    can_curate = request.principal.can(CURATE)
    return render(
        request,
        "dashboard/entity.html",
        {
            "entity": item,
            "detail": detail,
            "graph": layout(graph),
            "graph_edges": len(graph.edges),
            "as_of": request.GET.get("as_of", "").strip()[:32] if not date_error else "",
            "date_error": date_error,
            "depth": depth,
            "depths": range(1, MAX_GRAPH_DEPTH + 1),
            "merges": entity_merges(request.principal, item),
            "history": entity_history(request.principal, item),
            "candidates": merge_candidates(request.principal, item) if can_curate else [],
            "split_from": split_from,
            "aliases": [a for a in item.aliases if a != item.name],
            "documents": entity_document_mentions(request.principal, item),
        },
    )


def _entity_url(request: HttpRequest, entity_id) -> str:
    return reverse("entity", args=[request.tenant.slug, entity_id])


def _refused(request: HttpRequest, exc: DomainError, entity_id) -> HttpResponse:
    messages.error(request, f"{exc.detail} Nothing was changed.")
    return redirect(safe_next(request, _entity_url(request, entity_id)))


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def entity_merge_view(request: HttpRequest, entity_id) -> HttpResponse:
    """Merge another entity into this one: a confirmation page first, then the merge."""
    survivor = entity_get_for(request.principal, entity_id)
    other_id = request.POST.get("other", "")
    try:
        loser = entity_get_for(request.principal, other_id)
    except NotFound:
        messages.error(request, "Choose the entity to merge into this one.")
        return redirect(_entity_url(request, entity_id))
    if request.POST.get("confirmed") != "1":
        counts = entity_counts(request.principal, [survivor.pk, loser.pk])
        return render(
            request,
            "dashboard/entity_merge_confirm.html",
            {
                "survivor": survivor,
                "loser": loser,
                "counts": counts,
                "samples": entity_sample_facts(request.principal, [loser.pk]).get(loser.pk, []),
                "next": safe_next(request, _entity_url(request, survivor.pk)),
            },
        )
    try:
        entity_merge(
            principal=request.principal, survivor_id=survivor.pk, loser_id=loser.pk, note=request.POST.get("note", "")
        )
    except NotFound:
        raise
    except DomainError as exc:
        return _refused(request, exc, entity_id)
    messages.success(request, f"Merged “{loser.name}” into “{survivor.name}”. Undo it under Merged entities.")
    return redirect(_entity_url(request, survivor.pk))


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def entity_unmerge_view(request: HttpRequest, entity_id, merge_id) -> HttpResponse:
    try:
        record = entity_unmerge(principal=request.principal, merge_id=merge_id, note=request.POST.get("note", ""))
    except NotFound:
        raise
    except DomainError as exc:
        return _refused(request, exc, entity_id)
    messages.success(request, f"Merge undone: “{record.loser.name}” is its own entity again, with its facts.")
    return redirect(safe_next(request, _entity_url(request, entity_id)))


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def entity_split_view(request: HttpRequest, entity_id) -> HttpResponse:
    try:
        new = entity_split(
            principal=request.principal,
            entity_id=entity_id,
            alias=request.POST.get("alias", ""),
            note=request.POST.get("note", ""),
        )
    except NotFound:
        raise
    except DomainError as exc:
        return _refused(request, exc, entity_id)
    messages.success(request, f"Split “{new.name}” off into its own entity.")
    return redirect(f"{_entity_url(request, new.pk)}?split_from={entity_id}")


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def entity_rename_view(request: HttpRequest, entity_id) -> HttpResponse:
    try:
        renamed = entity_rename(
            principal=request.principal,
            entity_id=entity_id,
            name=request.POST.get("name", ""),
            note=request.POST.get("note", ""),
        )
    except NotFound:
        raise
    except DomainError as exc:
        return _refused(request, exc, entity_id)
    messages.success(request, f"Renamed to “{renamed.name}”; the old name still finds it.")
    return redirect(_entity_url(request, entity_id))


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def relation_action(request: HttpRequest, entity_id, relation_id: int, action: str) -> HttpResponse:
    service = {"close": relation_close, "reopen": relation_reopen}.get(action)
    if service is None:
        raise NotFound("No such action.")
    try:
        service(principal=request.principal, relation_id=relation_id, note=request.POST.get("note", ""))
    except NotFound:
        raise
    except DomainError as exc:
        return _refused(request, exc, entity_id)
    detail = (
        "Relation closed: it stays in the history and in the graph as of earlier dates. Reopen undoes it."
        if action == "close"
        else "Relation reopened."
    )
    messages.success(request, detail)
    return redirect(safe_next(request, _entity_url(request, entity_id)))


# --- the entity-merge review queue (a tab of the review queue) -----------------------------------


@tenant_view(staff_only=True)
def entity_review(request: HttpRequest) -> HttpResponse:
    page = paginate(request, merge_review_queue(request.principal), 20)
    ids = [i.entity_id for i in page.object_list] + [i.candidate_id for i in page.object_list]
    samples = entity_sample_facts(request.principal, ids)
    cards = [(item, samples.get(item.entity_id, []), samples.get(item.candidate_id, [])) for item in page.object_list]
    return render(
        request,
        "dashboard/entity_review.html",
        {"page": page, "cards": cards, "queue": "entities", "counts": review_tab_counts(request.principal)},
    )


@require_POST
@tenant_view(ability=CURATE, staff_only=True)
def entity_review_action(request: HttpRequest, review_id, action: str) -> HttpResponse:
    if action not in ("accept", "reject", "reopen"):
        raise NotFound("No such action.")
    try:
        if action == "reopen":
            item = merge_review_reopen(principal=request.principal, review_id=review_id)
            level, detail = "success", "Reopened: back in the queue, the entities as they were."
        else:
            item = merge_review_decide(
                principal=request.principal,
                review_id=review_id,
                accept=action == "accept",
                note=request.POST.get("note", ""),
            )
            level = "success"
            detail = "Merged: one entity now." if action == "accept" else "Kept apart: two entities."
    except NotFound:
        raise
    except DomainError as exc:
        item = get_visible(request.principal, EntityMergeReview.objects.all(), pk=review_id)
        level, detail = "warning", exc.detail
    undo = None
    if item.status != EntityMergeReview.Status.OPEN:
        undo = reverse("entity_review_action", args=[request.tenant.slug, review_id, "reopen"])
    context = {"item": item, "level": level, "detail": detail, "undo_url": undo}
    if request.htmx and item.status == EntityMergeReview.Status.OPEN:
        samples = entity_sample_facts(request.principal, [item.entity_id, item.candidate_id])
        context.update(
            card_note=detail, new_facts=samples.get(item.entity_id, []), old_facts=samples.get(item.candidate_id, [])
        )
        return render(request, "dashboard/_entity_review_card.html", context)
    if request.htmx:
        return render(request, "dashboard/_entity_review_done.html", context)
    getattr(messages, level)(request, detail)
    return redirect(safe_next(request, reverse("entity_review", args=[request.tenant.slug])))
