"""Sign-in, sign-out and choosing a tenant."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from memory_admin.models import Membership
from memory_admin.selectors.staff import memberships_of
from memory_admin.services.throttle import (
    KNOWN_DEVICE_COOKIE,
    KNOWN_DEVICE_DAYS,
    client_address,
    known_device,
    known_device_token,
    login_failed,
    login_retry_after,
)


class SignInView(LoginView):
    """Django's sign-in, throttled so that guessing is slowed but nobody can lock the owner out
    (services.throttle): an address, or an (account, address) pair, past its failures answers 429 with
    Retry-After and no password is checked; the account's own failures only cut what a new address
    may try; a browser that signed in before (a known-device cookie) has a count of its own."""

    template_name = "dashboard/login.html"
    redirect_authenticated_user = True

    def _device(self) -> str | None:
        return known_device(self.request.POST.get("username", ""), self.request.COOKIES.get(KNOWN_DEVICE_COOKIE))

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        username = request.POST.get("username", "")
        wait = login_retry_after(username, client_address(request), device=self._device())
        if not wait:
            return super().post(request, *args, **kwargs)
        # An unbound form: rendering a bound one would validate it, i.e. check the password.
        context = self.get_context_data(form=self.get_form_class()(request), rate_limited=wait)
        response = self.render_to_response(context, status=429)
        response["Retry-After"] = str(wait)
        return response

    def form_invalid(self, form) -> HttpResponse:
        login_failed(self.request.POST.get("username", ""), client_address(self.request), device=self._device())
        return super().form_invalid(form)

    def form_valid(self, form) -> HttpResponse:
        response = super().form_valid(form)
        response.set_cookie(
            KNOWN_DEVICE_COOKIE,
            known_device_token(form.get_user().get_username()),
            max_age=KNOWN_DEVICE_DAYS * 86400,
            secure=settings.SESSION_COOKIE_SECURE,
            httponly=True,
            samesite="Lax",
        )
        return response


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
    return render(
        request,
        "dashboard/error.html",
        {"title": "Not found", "detail": "No tenant with that name is visible to you."},
        status=404,
    )
