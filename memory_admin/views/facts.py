"""Fact detail and the inline fact actions (pin, correct, forget), partial-page with htmx."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from memory_admin import scoring
from memory_admin.errors import DomainError, NotFound
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import CURATE, WRITE_MEMORY
from memory_admin.selectors.facts import chain_events, fact_chain
from memory_admin.services.facts import fact_correct, fact_forget, fact_pin
from memory_admin.views.base import safe_next, tenant_view


@tenant_view()
def fact_detail(request: HttpRequest, fact_id) -> HttpResponse:
    fact = sel.fact_with_scores(request.principal, fact_id)
    # Version order: a correction's valid-from may be earlier than the version it corrects.
    chain = sorted(fact_chain(fact), key=lambda f: (f.version, f.created_at))
    return render(request, "dashboard/fact_detail.html", {
        "fact": fact,
        "chain": chain,
        "contradiction": sel.open_contradiction_of(request.principal, fact),
        "curve": sel.decay_curve(fact),
        "events": list(chain_events(request.principal, chain).select_related("memory_user")[:500]),
        "edges": sel.fact_edges(request.principal, fact),
        "breakdown": scoring.terms(fact),
    })


def _after_action(request: HttpRequest, fact_id, *, error: DomainError | None = None, note: str = "") -> HttpResponse:
    """htmx: the fact's row, re-read with its scores; without JavaScript: back where the form was."""
    if isinstance(error, NotFound):
        raise error  # another tenant's or user's fact: 404, like any read
    if request.htmx:
        fact = sel.fact_with_scores(request.principal, fact_id)
        return render(request, "dashboard/_fact_row.html", {
            "fact": fact, "row_error": error.detail if error else "", "row_note": note,
            "next": request.POST.get("next", ""),
        })
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
        new = fact_correct(principal=request.principal, fact_id=fact_id, content=content,
                           reason=request.POST.get("reason", "")[:300] or "corrected in the dashboard")
    except DomainError as exc:
        return _after_action(request, fact_id, error=exc)
    # The row now shows the new version (the old one is superseded and linked from its chain).
    return _after_action(request, new.pk, note=f"Corrected: version {new.version}.")


@require_POST
@tenant_view(ability=WRITE_MEMORY)
def fact_forget_view(request: HttpRequest, fact_id) -> HttpResponse:
    try:
        fact_forget(principal=request.principal, fact_id=fact_id,
                    reason=request.POST.get("reason", "")[:300] or "forgotten in the dashboard")
    except DomainError as exc:
        return _after_action(request, fact_id, error=exc)
    return _after_action(request, fact_id, note="Forgotten: no longer served to agents.")
