"""Sign-in, sign-out and choosing a tenant."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from memory_admin.models import Membership
from memory_admin.selectors.staff import memberships_of


def landing_url(membership: Membership) -> str:
    """Members land on their own notebook; everyone else on the tenant overview."""
    if membership.role == Membership.Role.MEMBER:
        return reverse("user_notebook", args=[membership.tenant.slug, membership.memory_user_id])
    return reverse("overview", args=[membership.tenant.slug])


@login_required
def home(request: HttpRequest) -> HttpResponse:
    memberships = memberships_of(request.user)
    chosen = request.session.get("tenant")
    for membership in memberships:
        if membership.tenant.slug == chosen:
            return redirect(landing_url(membership))
    if len(memberships) == 1:
        return redirect(landing_url(memberships[0]))
    return render(request, "dashboard/tenants.html", {"memberships": memberships})


@login_required
def tenant_home(request: HttpRequest, slug: str) -> HttpResponse:
    for membership in memberships_of(request.user):
        if membership.tenant.slug == slug:
            # Remembered so that "/" brings a multi-tenant account back to where it was.
            request.session["tenant"] = slug
            return redirect(landing_url(membership))
    return render(request, "dashboard/error.html",
                  {"title": "Not found", "detail": "No tenant with that name is visible to you."}, status=404)
