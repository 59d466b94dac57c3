"""The dashboard's middleware (sessions, sign-in, messages, htmx) is skipped by agent API requests, which
authenticate by bearer key (issue 9 §2: less work per search). What must not change for anyone: the
dashboard still signs in, keeps its session, refuses a form without its CSRF token and shows its messages;
every response, API or not, keeps its security headers; a session cookie gives no access to the API."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from memory_admin.services.staff import staff_create

pytestmark = pytest.mark.django_db

PASSWORD = "a long and unusual passphrase 7"


def test_an_api_request_sets_no_cookie_and_keeps_the_security_headers(api):
    r = api.get("users/nobody/search", q="tea")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    assert not r.cookies  # no session, no CSRF cookie
    assert r["X-Frame-Options"] == "DENY" and "default-src 'self'" in r["Content-Security-Policy"]
    assert r["X-Content-Type-Options"] == "nosniff"


def test_a_signed_in_session_is_no_key_for_the_api(tenant):
    membership, _ = staff_create(tenant_slug=tenant.slug, username="dana", role="admin", password=PASSWORD)
    client = Client()
    client.force_login(membership.user)
    assert client.get(f"/t/{tenant.slug}/facts/").status_code == 200  # the dashboard knows the session
    r = client.get("/api/v1/users/anyone/search", {"q": "tea"})
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"


def test_the_dashboard_signs_in_and_checks_csrf_as_before(tenant):
    staff_create(tenant_slug=tenant.slug, username="erin", role="operator", password=PASSWORD)
    client = Client(enforce_csrf_checks=True)
    page = client.get(reverse("login"))
    assert page.status_code == 200 and page["X-Frame-Options"] == "DENY"
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    # Without the token: refused, nobody signed in.
    refused = Client(enforce_csrf_checks=True).post(reverse("login"), {"username": "erin", "password": PASSWORD})
    assert refused.status_code == 403
    signed_in = client.post(reverse("login"), {"username": "erin", "password": PASSWORD, "csrfmiddlewaretoken": token})
    assert signed_in.status_code == 302 and "sessionid" in signed_in.cookies
    home = client.get(f"/t/{tenant.slug}/facts/")
    assert home.status_code == 200 and "erin" in home.content.decode()


def test_the_api_docs_page_still_renders_without_the_dashboards_middleware():
    r = Client().get("/api/v1/docs")
    assert r.status_code == 200 and "swagger" in r.content.decode().lower()
    assert Client().get("/api/v1/openapi.json").json()["info"]["title"] == "memory-admin agent API"
