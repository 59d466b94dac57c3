"""Fact detail, the tenant-wide facts list (where the overview's confidence and staleness bars lead),
the filters of every facts list, and the inline fact actions (pin, correct, forget), partial-page with htmx."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from memory_admin import scoring
from memory_admin.errors import DomainError, Invalid, NotFound
from memory_admin.inputs import unit_score
from memory_admin.models import Fact
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import CURATE, WRITE_MEMORY
from memory_admin.selectors.facts import chain_events, fact_chain
from memory_admin.services.facts import fact_correct, fact_forget, fact_pin, fact_restore
from memory_admin.views.base import paginate, paginate_id_list, safe_next, tenant_view

FACT_FILTERS = ("status", "category", "kind", "source", "stale", "q", "conf_min", "conf_max", "stale_min", "stale_max")
BAND_NAMES = {"conf": "Effective confidence", "stale": "Staleness"}


def fact_filters(request: HttpRequest, names: tuple[str, ...] = FACT_FILTERS) -> dict[str, str]:
    """The facts lists' filters from the query string; active facts unless a status is chosen. A band
    bound that is not a number from 0 to 1, or a lower bound above the upper one, is refused (422)."""
    filters = {name: request.GET.get(name, "").strip() for name in names}
    if "status" not in request.GET:
        filters["status"] = "active"
    for prefix, name in BAND_NAMES.items():
        low = unit_score(filters.get(f"{prefix}_min"), field=f"“{name} from”")
        high = unit_score(filters.get(f"{prefix}_max"), field=f"“{name} to”")
        if low is not None and high is not None and low > high:
            raise Invalid(f"“{name} from” ({low:g}) is above “{name} to” ({high:g}).", field=f"{prefix}_min")
    return filters


def fact_choices() -> dict[str, list[str]]:
    return {
        "status": Fact.Status.values,
        "category": Fact.Category.values,
        "kind": Fact.Kind.values,
        "source": Fact.Source.values,
    }


def band_descriptions(filters: dict[str, str]) -> list[str]:
    """The bands in words, as the list's heading says them: "effective confidence 0.3 to under 0.4"."""
    out = []
    for prefix, name in BAND_NAMES.items():
        low, high = filters.get(f"{prefix}_min"), filters.get(f"{prefix}_max")
        if not (low or high):
            continue
        low_text = f"{float(low or 0):g}"
        high_text = "1 (inclusive)" if not high or float(high) >= 1 else f"under {float(high):g}"
        out.append(f"{name.lower()} {low_text} to {high_text}")
    return out


@tenant_view(staff_only=True)
def facts_list(request: HttpRequest) -> HttpResponse:
    """Facts across users, with the facts tab's filters and a user filter: where the bars of the
    overview's confidence and staleness charts lead."""
    filters = fact_filters(request, (*FACT_FILTERS, "user"))
    rows, sample = sel.score_band_rows(request.principal, filters)
    page = paginate_id_list(request, sample["ids"], rows) if sample else paginate(request, rows)
    return render(
        request,
        "dashboard/facts.html",
        {
            "page": page,
            "filters": filters,
            "choices": fact_choices(),
            "sample": sample,
            "bands": band_descriptions(filters),
        },
    )


@tenant_view()
def fact_detail(request: HttpRequest, fact_id) -> HttpResponse:
    fact = sel.fact_with_scores(request.principal, fact_id)
    # Version order: a correction's valid-from may be earlier than the version it corrects.
    chain = sorted(fact_chain(fact), key=lambda f: (f.version, f.created_at))
    if request.is_member:
        # The reason a version was replaced, when a person gave it with a correction (the other
        # reasons are the write path's own words: "key personal.city updated").
        for older, newer in zip(chain, chain[1:], strict=False):
            older.why = older.status_reason if newer.source == Fact.Source.USER_CORRECTION else ""
        return render(
            request,
            "dashboard/member_fact.html",
            {
                "fact": sel.fact_last_change(request.principal, fact),
                "chain": chain,
                "origin": sel.fact_origin(fact),
                "contradiction": sel.open_contradiction_of(request.principal, fact),
                "curve": sel.decay_curve(fact),
            },
        )
    return render(
        request,
        "dashboard/fact_detail.html",
        {
            "fact": fact,
            "chain": chain,
            "contradiction": sel.open_contradiction_of(request.principal, fact),
            "curve": sel.decay_curve(fact),
            "events": list(chain_events(request.principal, chain).select_related("memory_user")[:500]),
            "edges": sel.fact_edges(request.principal, fact),
            "breakdown": scoring.terms(fact),
        },
    )


def _after_action(request: HttpRequest, fact_id, *, error: DomainError | None = None, note: str = "") -> HttpResponse:
    """htmx: the fact's row, re-read with its scores; without JavaScript: back where the form was."""
    if isinstance(error, NotFound):
        raise error  # another tenant's or user's fact: 404, like any read
    if request.htmx and request.is_member:
        fact = sel.fact_last_change(request.principal, sel.fact_with_scores(request.principal, fact_id))
        context = {"fact": fact, "row_error": error.detail if error else "", "row_note": note}
        context["link_off"] = request.POST.get("link_off") == "1"  # the fact's own page: its title is the text
        return render(request, "dashboard/_member_fact_row.html", context)
    if request.htmx:
        fact = sel.fact_with_scores(request.principal, fact_id)
        return render(
            request,
            "dashboard/_fact_row.html",
            {
                "fact": fact,
                "row_error": error.detail if error else "",
                "row_note": note,
                "next": request.POST.get("next", ""),
                "show_user": request.POST.get("row_user") == "1",
            },
        )
    if error:
        messages.error(request, error.detail)
    elif note:
        messages.success(request, note)
    return redirect(safe_next(request, reverse("fact_detail", args=[request.tenant.slug, fact_id])))


@require_POST
@tenant_view(ability=CURATE)
def fact_pin_view(request: HttpRequest, fact_id) -> HttpResponse:
    pinned = request.POST.get("pinned") == "1"
    try:
        fact_pin(principal=request.principal, fact_id=fact_id, pinned=pinned)
    except DomainError as exc:
        return _after_action(request, fact_id, error=exc)
    return _after_action(request, fact_id, note="Pinned." if pinned else "Unpinned.")


@require_POST
@tenant_view(ability=WRITE_MEMORY)
def fact_correct_view(request: HttpRequest, fact_id) -> HttpResponse:
    content = request.POST.get("content", "").strip()
    try:
        new = fact_correct(
            principal=request.principal,
            fact_id=fact_id,
            content=content,
            reason=request.POST.get("reason", "")[:300] or "corrected in the dashboard",
        )
    except DomainError as exc:
        return _after_action(request, fact_id, error=exc)
    # The row now shows the new version (the old one is superseded and linked from its chain).
    return _after_action(request, new.pk, note=f"Corrected: version {new.version}.")


@require_POST
@tenant_view(ability=WRITE_MEMORY)
def fact_forget_view(request: HttpRequest, fact_id) -> HttpResponse:
    try:
        fact_forget(
            principal=request.principal,
            fact_id=fact_id,
            reason=request.POST.get("reason", "")[:300] or "forgotten in the dashboard",
        )
    except DomainError as exc:
        return _after_action(request, fact_id, error=exc)
    return _after_action(request, fact_id, note="Forgotten: no longer served to agents.")


@require_POST
@tenant_view(ability=WRITE_MEMORY)
def fact_restore_view(request: HttpRequest, fact_id) -> HttpResponse:
    """Undo a Forget (the button beside a forgotten fact)."""
    try:
        fact_restore(principal=request.principal, fact_id=fact_id)
    except DomainError as exc:
        return _after_action(request, fact_id, error=exc)
    return _after_action(request, fact_id, note="Restored: assistants use it again.")
