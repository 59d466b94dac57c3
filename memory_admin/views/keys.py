"""Pausing and resuming an agent's key from the Agents & keys page, and reading its form's expiry."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from memory_admin.errors import DomainError, Invalid, NotFound
from memory_admin.selectors.access import ADMIN
from memory_admin.services.keys import api_key_pause
from memory_admin.views.base import tenant_view

_ACTIONS = {"pause": True, "resume": False}


def expiry_from_form(text: str) -> datetime | None:
    """The form's "expires on" day (YYYY-MM-DD) as the end of that day, UTC; None when left empty."""
    text = text.strip()
    if not text:
        return None
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise Invalid("Give the expiry as a day, YYYY-MM-DD.", code="invalid_expiry", field="expires") from None
    if day.year > 9000:
        raise Invalid("Give an expiry before the year 9000.", code="invalid_expiry", field="expires")
    return datetime.combine(day, time.max, tzinfo=UTC)


@require_POST
@tenant_view(ability=ADMIN)
def key_pause_view(request: HttpRequest, key_id: int, action: str) -> HttpResponse:
    if action not in _ACTIONS:
        raise Http404("No such key action.")
    try:
        key = api_key_pause(principal=request.principal, key_id=key_id, paused=_ACTIONS[action])
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    except DomainError as exc:
        messages.error(request, exc.detail)
    else:
        if key.paused_at is not None:
            messages.success(request, f"Key {key.prefix}… paused: its requests get 403 key_paused until you resume it.")
        else:
            messages.success(request, f"Key {key.prefix}… resumed: it works again.")
    return redirect("keys", request.tenant.slug)
