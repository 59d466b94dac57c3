"""Sign-in, sign-out and choosing a tenant."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from memory_admin.models import Membership
from memory_admin.selectors.staff import memberships_of
from memory_admin.services.throttle import client_address, login_failed, login_retry_after


class SignInView(LoginView):
    """Django's sign-in, throttled: after LOGIN_FAILURE_LIMIT failures in the window, for the account
    or from the address, every attempt answers 429 with Retry-After and no password is checked."""

    template_name = "dashboard/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        wait = login_retry_after(request.POST.get("username", ""), client_address(request))
        if not wait:
            return super().post(request, *args, **kwargs)
        # An unbound form: rendering a bound one would validate it, i.e. check the password.
        context = self.get_context_data(form=self.get_form_class()(request), rate_limited=wait)
        response = self.render_to_response(context, status=429)
        response["Retry-After"] = str(wait)
        return response

    def form_invalid(self, form) -> HttpResponse:
        login_failed(self.request.POST.get("username", ""), client_address(self.request))
        return super().form_invalid(form)


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
