"""`/api/v1/docs` in real Chromium with every address but the server's cut off: the API reference
must render its operations from the vendored Swagger UI, asking nothing of any other host."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest
from django.test import Client

from tests.dashboard.test_browser import browser  # noqa: F401 -- the shared Chromium fixture

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def test_the_docs_page_keeps_the_sites_content_security_policy_and_names_no_other_host(db):
    page = Client().get("/api/v1/docs")
    html = page.content.decode()
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert "/static/vendor/swagger-ui-5.32.0/swagger-ui-bundle.js" in html
    assert "http://" not in html and "https://" not in html and "//cdn" not in html


@pytest.mark.browser
def test_the_docs_page_renders_every_operation_with_the_network_cut_off(browser, live_server):  # noqa: F811
    served_by = urlsplit(live_server.url).netloc
    elsewhere: list[str] = []

    def only_the_server(route):
        if urlsplit(route.request.url).netloc == served_by:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    context = browser.new_context()
    context.route("**/*", only_the_server)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(live_server.url + "/api/v1/docs")
    page.wait_for_selector(".opblock", timeout=20_000)

    operations = Client().get("/api/v1/openapi.json").json()["paths"]
    count = sum(len([m for m in ops if m in {"get", "post", "put", "patch", "delete"}]) for ops in operations.values())
    assert page.locator(".opblock").count() == count
    assert "memory-admin agent API" in page.locator(".info .title").inner_text()
    page.locator(".opblock-summary-path", has_text="/api/v1/users/{user_id}/search").first.wait_for()
    assert elsewhere == [] and errors == []
    context.close()
