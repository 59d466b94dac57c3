"""The keys page and the access log in real headless Chromium: what an admin sees when they create a
key (shown once, copied with one click), pause and resume it, are refused a key for a user who does not
exist, and follow a key to what it read."""

from __future__ import annotations

import pytest
from django.test import Client

from memory_admin.models import ApiKey, FactRead
from memory_admin.services.keys import api_key_create
from tests.conftest import Api
from tests.dashboard.test_browser import SHOTS, browser, demo, shot, sign_in  # noqa: F401 -- shared fixtures

pytestmark = [pytest.mark.browser]


def test_an_admin_creates_copies_pauses_and_resumes_a_key(browser, demo):  # noqa: F811
    page = sign_in(browser, demo, "ada")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=demo["url"])
    page.goto(f"{demo['url']}/t/acme/keys/")
    page.fill("input[name=agent]", "support-bot")
    page.fill("input[name=users]", "alice, user-999")
    page.click("button:has-text('Create key')")
    assert "No memory user with the id user-999" in page.inner_text("[role=alert]")
    assert page.input_value("input[name=users]") == "alice, user-999"  # what was typed is kept
    assert not ApiKey.objects.filter(agent__name="support-bot").exists()

    page.fill("input[name=users]", "alice")
    page.check("input[name=read_only]")
    page.fill("input[name=expires]", "2099-12-31")
    page.click("button:has-text('Create key')")
    raw = page.inner_text("#new-key").strip()
    page.click("button:has-text('Copy key')")
    page.wait_for_selector("text=Copied to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == raw
    assert "This key is read-only." in page.inner_text(".created-key")
    shot(page, "keys-new-key")

    key = ApiKey.objects.get(agent__name="support-bot")
    row = page.locator(f"tr[data-key='{key.prefix}']")
    assert "read-only" in row.inner_text() and "2099-12-31" in row.inner_text()
    row.locator("button:has-text('Pause')").click()
    page.wait_for_load_state("networkidle")
    row = page.locator(f"tr[data-key='{key.prefix}']")
    assert "paused since" in row.locator(".key-state").inner_text()
    assert Api(raw, Client()).get("users/alice/search", q="vim").json()["code"] == "key_paused"
    row.locator("button:has-text('Resume')").click()
    page.wait_for_load_state("networkidle")
    assert page.locator(f"tr[data-key='{key.prefix}'] .key-state").inner_text().strip() == "active"
    assert Api(raw, Client()).get("users/alice/search", q="vim").status_code == 200
    page.context.close()


def test_an_auditor_follows_a_key_to_what_it_read(browser, demo):  # noqa: F811
    key, raw = api_key_create(tenant_id=demo["tenant"].pk, agent_name="reader-bot")
    reader = Api(raw, Client())
    assert reader.get("users/alice/search", q="Alice lives in Paris").status_code == 200
    assert reader.get("users/bob/context", task="billing").status_code == 200
    assert FactRead.objects.filter(api_key=key).exists()

    page = sign_in(browser, demo, "aude")
    page.goto(f"{demo['url']}/t/acme/keys/")
    page.click(f"a[aria-label='What key {key.prefix} read']")
    page.wait_for_load_state("networkidle")
    assert "by key" in page.inner_text(".access-scope") and "reader-bot" in page.inner_text(".access-scope")
    rows = page.locator("table.access-log tbody tr").all_inner_texts()
    assert any("Alice lives in Paris" in r and "search hit" in r and "Alice" in r for r in rows)
    assert any("Bob works on billing" in r and "context block" in r for r in rows)
    shot(page, "access-log-by-key")
    page.locator("main").screenshot(path=str(SHOTS / "access-log-card.png"))

    page.click("table.access-log a.read-user:has-text('Alice')")  # the user's column: every read of her memories
    page.wait_for_load_state("networkidle")
    assert "Alice’s memories" in page.inner_text(".access-scope")
    assert "Bob works on billing" not in page.inner_text("table.access-log")
    page.context.close()
