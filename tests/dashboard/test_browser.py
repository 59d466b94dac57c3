"""The dashboard in real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright, against
pytest-django's live server: sign-in per role, notebook conflicts across tabs, keyboard review, two
reviewers at once, a correction and its chain, the context preview, and a member's 404.

Screenshots of the main pages go to artifacts/screenshots/ (git-ignored)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from django.utils import timezone

from memory_admin.models import Contradiction, Fact, MemoryUser, Notebook, TenantSettings
from memory_admin.services.facts import content_hash
from memory_admin.services.staff import staff_create
from memory_admin.services.tenants import tenant_create

# Playwright's sync API runs an event loop in this thread; Django refuses ORM calls from a thread with
# a running loop unless told that this is deliberate (the ORM calls here are plain test setup).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("Chromium is not installed (.ci/bootstrap installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def demo(live_server):
    """A tenant with one account per role, two memory users, facts, a notebook and a contradiction."""
    tenant = tenant_create(slug="acme", name="Acme")
    alice = MemoryUser.objects.create(tenant=tenant, external_id="alice", display_name="Alice")
    bob = MemoryUser.objects.create(tenant=tenant, external_id="bob")
    for username, role, user in (
        ("ada", "admin", None),
        ("otto", "operator", None),
        ("olga", "operator", None),
        ("aude", "auditor", None),
        ("alice", "member", "alice"),
    ):
        staff_create(tenant_slug="acme", username=username, role=role, memory_user_external_id=user, password=PASSWORD)

    def fact(user, content, **kw):
        return Fact.objects.create(
            tenant=tenant,
            memory_user=user,
            scope="user",
            content=content,
            content_hash=content_hash(content),
            confidence=kw.pop("confidence", 0.9),
            source="user_stated",
            valid_from=timezone.now(),
            **kw,
        )

    city = fact(alice, "Alice lives in Paris", key="personal.city", category="personal")
    fact(alice, "Alice prefers vim", key="preference.editor", category="preference")
    tea = fact(alice, "Alice drinks tea in the morning", contested=True, confidence=0.8)
    coffee = fact(alice, "Alice drinks coffee in the morning", contested=True, confidence=0.75)
    contradiction = Contradiction.objects.create(
        tenant=tenant,
        memory_user=alice,
        fact_a=tea,
        fact_b=coffee,
        detector="semantic",
        reason="tea vs coffee",
        similarity=0.82,
    )
    bob_fact = fact(bob, "Bob works on billing")
    return {
        "tenant": tenant,
        "alice": alice,
        "bob": bob,
        "city": city,
        "contradiction": contradiction,
        "bob_fact": bob_fact,
        "url": live_server.url,
    }


def sign_in(browser, demo, username):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(demo["url"] + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    return page


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.mark.parametrize(
    ("username", "lands_on", "heading"),
    [
        ("ada", "/t/acme/overview/", "Memory health"),
        ("otto", "/t/acme/overview/", "Memory health"),
        ("aude", "/t/acme/overview/", "Memory health"),
        ("alice", "/notebook/", "My memory"),
    ],
)
def test_sign_in_per_role(browser, demo, username, lands_on, heading):
    page = sign_in(browser, demo, username)
    assert lands_on in page.url
    assert heading in page.inner_text("h1")
    assert page.locator(".role").inner_text().strip().lower() in ("admin", "operator", "auditor", "member")
    if username == "aude":
        assert page.locator("nav.mainnav >> text=PII blocks").count() == 1
    if username == "otto":
        assert page.locator("nav.mainnav >> text=PII blocks").count() == 0
    page.context.close()


def test_notebook_save_and_a_conflicting_save_from_a_second_tab(browser, demo):
    page = sign_in(browser, demo, "otto")
    url = f"{demo['url']}/t/acme/users/{demo['alice'].pk}/notebook/"
    page.goto(url)
    second = page.context.new_page()
    second.goto(url)  # the second tab opened the same version (0)

    page.fill("textarea[name=content]", "# Alice\n\n- Lives in **Berlin** since May")
    page.wait_for_selector("#preview strong:has-text('Berlin')")  # live preview via htmx
    page.click("button[name=save]")
    page.wait_for_selector("text=Saved: version 1")
    shot(page, "notebook")

    second.fill("textarea[name=content]", "# Alice\n\n- Lives in Lyon")
    second.click("button[name=save]")
    second.wait_for_selector("#conflict")
    assert "you saved a newer version first" in second.inner_text("#conflict")  # the same account, two tabs
    assert "Lyon" in second.input_value("textarea[name=content]")  # the draft is kept
    # Side by side, the differing lines opposite each other, with no unified-diff markers.
    changed = second.locator("#conflict-compare tr.sbs-changed td").all_inner_texts()
    assert [re.sub(r"^only (theirs|yours):\s*", "", t) for t in changed] == [
        "- Lives in **Berlin** since May",
        "- Lives in Lyon",
    ]
    assert "@@" not in second.inner_text("#conflict")
    shot(second, "notebook-conflict")
    notebook = Notebook.objects.get(memory_user=demo["alice"])
    assert notebook.version == 1 and "Berlin" in notebook.content
    second.click("#add-their-lines")
    second.wait_for_selector("text=Preview of your draft")
    merged = second.input_value("textarea[name=content]")
    assert "Lives in Lyon" in merged and "Lives in **Berlin** since May" in merged
    second.click("button[name=save]")
    second.wait_for_selector("text=Saved: version 2")
    notebook.refresh_from_db()
    assert "Lyon" in notebook.content and "Berlin" in notebook.content
    page.context.close()


def test_resolving_a_contradiction_with_the_keyboard(browser, demo):
    page = sign_in(browser, demo, "otto")
    page.goto(f"{demo['url']}/t/acme/review/")
    shot(page, "review")
    page.keyboard.press("j")
    page.keyboard.press("a")
    page.wait_for_selector("text=Kept A")
    item = Contradiction.objects.get(pk=demo["contradiction"].pk)
    assert (item.status, item.resolution, item.resolved_by) == ("resolved", "keep_a", "staff:otto")
    page.context.close()


def test_the_same_contradiction_from_two_sessions(browser, demo):
    first = sign_in(browser, demo, "otto")
    second = sign_in(browser, demo, "olga")
    for page in (first, second):
        page.goto(f"{demo['url']}/t/acme/review/")
    first.click("button[value=keep_b]")
    first.wait_for_selector("text=Kept B")
    second.click("button[value=keep_a]")
    second.wait_for_selector("text=Already resolved")
    assert "staff:otto" in second.inner_text(".review-card")
    tea = Fact.objects.get(pk=demo["contradiction"].fact_a_id)
    coffee = Fact.objects.get(pk=demo["contradiction"].fact_b_id)
    assert (tea.status, coffee.status) == ("superseded", "active")
    first.context.close()
    second.context.close()


def test_correcting_a_fact_and_seeing_its_chain(browser, demo):
    page = sign_in(browser, demo, "alice")  # a member corrects what agents believe about her
    page.goto(f"{demo['url']}/t/acme/users/{demo['alice'].pk}/facts/")
    shot(page, "facts")
    row = page.locator(f"#fact-{demo['city'].pk}")
    row.locator("summary:has-text('Correct')").click()
    row.locator("textarea[name=content]").fill("Alice lives in Berlin")
    row.locator("input[name=reason]").fill("moved in May")
    row.locator("button:has-text('Save correction')").click()
    page.wait_for_selector("text=Corrected: version 2")
    page.click("a:has-text('Alice lives in Berlin')")
    page.wait_for_selector("ol.timeline")
    chain = page.inner_text("ol.timeline")
    assert "Alice lives in Paris" in chain and "Alice lives in Berlin" in chain and "moved in May" in chain
    shot(page, "fact-detail")
    page.context.close()


def test_the_context_preview(browser, demo):
    page = sign_in(browser, demo, "otto")
    page.goto(f"{demo['url']}/t/acme/users/{demo['alice'].pk}/context/")
    page.fill("input[name=task]", "set up the editor")
    page.fill("input[name=budget]", "400")
    page.click("button:has-text('Preview')")
    page.wait_for_selector("#context-text")
    assert "vim" in page.inner_text("#context-text")
    assert "task=set+up+the+editor" in page.url  # a short task stays in the address, to share
    shot(page, "context-preview")
    page.context.close()


@pytest.mark.parametrize("where", ["user page", "playground"])
def test_a_task_too_long_for_an_address_is_previewed(browser, demo, where):
    """2,000 characters of Chinese are ~18 kB once escaped in an address, more than the web server reads;
    dashboard.js posts such a form instead, and the preview shows the block."""
    task = ("我该用哪个编辑器？帮我配置开发环境。" * 120)[:2000]
    page = sign_in(browser, demo, "otto")
    if where == "user page":
        page.goto(f"{demo['url']}/t/acme/users/{demo['alice'].pk}/context/")
        page.fill("input[name=budget]", "400")
        button, shown = "Preview", "#context-text"
    else:
        page.goto(f"{demo['url']}/t/acme/playground/")
        page.fill("input[name=user]", "alice")
        button, shown = "Compare", "#budget-2"
    page.fill("input[name=task]", task)
    page.click(f"button:has-text('{button}')")
    page.wait_for_selector(shown)
    assert "Alice prefers vim" in page.text_content(shown)  # the text the agent receives, folded or not
    assert "task=" not in page.url and page.input_value("input[name=task]") == task
    page.context.close()


def test_a_member_cannot_reach_another_users_pages(browser, demo):
    page = sign_in(browser, demo, "alice")
    for path in (
        f"/t/acme/users/{demo['bob'].pk}/facts/",
        f"/t/acme/users/{demo['bob'].pk}/notebook/",
        f"/t/acme/facts/{demo['bob_fact'].pk}/",
    ):
        response = page.goto(demo["url"] + path)
        assert response.status == 404, path
        assert "Bob works on billing" not in page.content()
    page.context.close()


def test_screenshots_of_the_main_pages(browser, demo):
    page = sign_in(browser, demo, "ada")
    for name, path in (
        ("overview", "/t/acme/overview/"),
        ("users", "/t/acme/users/"),
        ("pii", "/t/acme/pii/"),
        ("audit", "/t/acme/audit/"),
        ("settings", "/t/acme/settings/"),
        ("keys", "/t/acme/keys/"),
        ("skills", "/t/acme/skills/"),
    ):
        response = page.goto(demo["url"] + path)
        assert response.status == 200, path
        shot(page, name)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(demo["url"] + "/t/acme/review/")
    shot(page, "review-mobile")
    page.context.close()


def test_the_settings_page_shows_and_keeps_the_agreed_limits(browser, demo):
    """The form's ranges come from the one table of limits: the browser refuses one past the top (the
    server refuses it too, see test_settings_limits), the top itself is saved."""
    page = sign_in(browser, demo, "ada")
    page.goto(demo["url"] + "/t/acme/settings/")
    field = page.locator("#set-min_message_chars")
    assert field.get_attribute("max") == "65536"
    assert "Allowed: 0 to 65536." in page.inner_text("#help-min_message_chars")
    assert "Allowed: 1 to 10080." in page.inner_text("#help-episode_idle_minutes")
    field.fill("65537")
    assert field.evaluate("el => el.validity.rangeOverflow")
    field.fill("65536")
    page.fill("#set-episode_idle_minutes", "10080")
    page.click("button:has-text('Save settings')")
    page.wait_for_selector("text=Settings saved.")
    saved = TenantSettings.objects.get(tenant=demo["tenant"])
    assert (saved.min_message_chars, saved.episode_idle_minutes) == (65536, 10080)
    page.context.close()
