"""The lifecycle page and the team notebook in headless Chromium: the GC button's confirmation and
htmx swap under the page's Content-Security-Policy, and the team notebook's live preview and save."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.models import AuditEvent, Fact, Notebook
from tests.dashboard.test_browser import browser, demo, shot, sign_in  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser]


def test_run_gc_now_from_the_nav_with_confirmation(browser, demo):  # noqa: F811
    Fact.objects.filter(pk=demo["bob_fact"].pk).update(hard_expires_at=timezone.now() - timedelta(days=1))
    page = sign_in(browser, demo, "ada")
    page.click("nav.mainnav >> text=Lifecycle")
    page.wait_for_selector("#rule-hard_ttl")
    assert page.inner_text("#rule-hard_ttl td.num") == "1"
    assert "Bob works on billing" in page.inner_text("#sample")
    dialogs = []
    page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    page.click("button:has-text('Run GC now')")
    page.wait_for_selector("#gc-result")
    assert "GC ran: 1 fact changed" in page.inner_text("#gc-result")
    assert dialogs and "1 fact will be evicted" in dialogs[0]
    assert page.url.endswith("/t/acme/lifecycle/")  # swapped in place by htmx
    shot(page, "lifecycle")
    assert Fact.objects.get(pk=demo["bob_fact"].pk).status == "evicted"
    assert AuditEvent.objects.filter(action="lifecycle.gc", actor="staff:ada").count() == 1
    page.context.close()


def test_team_notebook_live_preview_and_save(browser, demo):  # noqa: F811
    page = sign_in(browser, demo, "otto")
    page.click("nav.mainnav >> text=Team notebook")
    page.fill("textarea[name=content]", "# Acme\n\n- Standups at **09:30** CET")
    page.wait_for_selector("#preview strong:has-text('09:30')")
    page.click("button[name=save]")
    page.wait_for_selector("text=Saved: version 1")
    assert Notebook.objects.get(tenant=demo["tenant"], memory_user__isnull=True).version == 1
    page.context.close()
    member = sign_in(browser, demo, "alice")
    member.click("nav.mainnav >> text=Team notebook")
    member.wait_for_selector("#preview strong:has-text('09:30')")
    assert member.locator("#notebook-form").count() == 0
    member.context.close()
