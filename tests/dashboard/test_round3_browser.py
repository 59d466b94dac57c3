"""Round 3 of the dashboard in real headless Chromium (issue 31): a review card carries its evidence
and is decided without leaving the queue, a member reads their facts in plain words and undoes a
Forget, pages say what is true (no link a role cannot open, empty charts folded, one account of a
thread's extraction), and the nav folds on a phone. Each test asserts what a person sees."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.models import (
    Agent,
    AuditEvent,
    Contradiction,
    ExtractionBatch,
    Fact,
    Message,
    PiiBlock,
    Thread,
)
from memory_admin.services.facts import content_hash
from tests.dashboard.test_browser import browser, demo, sign_in  # noqa: F401 -- shared fixtures

pytestmark = [pytest.mark.browser]


@pytest.fixture
def evidence(demo):  # noqa: F811
    """The demo's contradiction with evidence: A (tea) drawn from a message of thread chat-1, B
    (coffee) saved by the agent support-bot with no message; the judge's reason in its own words."""
    tenant, alice = demo["tenant"], demo["alice"]
    agent = Agent.objects.create(tenant=tenant, name="support-bot")
    thread = Thread.objects.create(tenant=tenant, memory_user=alice, external_id="chat-1")
    message = Message.objects.create(
        tenant=tenant,
        memory_user=alice,
        thread=thread,
        role="user",
        content="Honestly I only drink tea in the morning, coffee makes me jittery.",
        created_at=timezone.now(),
        status="extracted",
    )
    item = demo["contradiction"]
    Fact.objects.filter(pk=item.fact_a_id).update(message=message)
    Fact.objects.filter(pk=item.fact_b_id).update(created_by="agent:support-bot", agent=agent)
    Contradiction.objects.filter(pk=item.pk).update(reason="same one-valued predicate ('drinks') with different values")
    return {**demo, "thread": thread, "message": message}


def test_an_operator_decides_a_card_with_its_evidence_without_leaving_the_queue(browser, evidence):  # noqa: F811
    page = sign_in(browser, evidence, "otto")
    queue = f"{evidence['url']}/t/acme/review/"
    page.goto(queue)
    card = page.locator(".review-card").first
    text = card.inner_text()
    assert "Alice" in card.locator("h2").inner_text()  # the person, not only the id
    assert "Both say what Alice drinks, with different answers" in text
    assert "one-valued predicate" not in text
    quote = card.locator(".side").nth(0).locator("blockquote")
    assert "I only drink tea in the morning" in quote.inner_text()
    thread_link = card.locator(".side").nth(0).locator("figcaption a")
    assert thread_link.inner_text() == "thread chat-1"
    assert f"/conversations/{evidence['thread'].pk}/#m-{evidence['message'].pk}" in thread_link.get_attribute("href")
    assert "Saved by the agent “support-bot”" in card.locator(".side").nth(1).inner_text()
    assert page.locator("nav.tabs a[aria-current=page]").inner_text() == "Contradictions 1"

    page.keyboard.press("?")
    help_box = page.locator("#review-help")
    assert help_box.is_visible() and "undo your last decision" in help_box.inner_text()
    page.keyboard.press("Escape")
    assert not help_box.is_visible()

    page.keyboard.press("b")
    page.wait_for_selector(".review-card.done")
    done = page.locator(".review-card.done")
    assert "Kept B." in done.inner_text() and "Kept: Alice drinks coffee in the morning" in done.inner_text()
    assert done.locator(".side").count() == 0  # folded to a line, its sides gone
    assert page.url == queue
    assert Contradiction.objects.get(pk=evidence["contradiction"].pk).resolution == "keep_b"

    page.keyboard.press("u")  # undo the last decision
    page.wait_for_selector(".review-card:not(.done) >> text=Reopened")
    assert Contradiction.objects.get(pk=evidence["contradiction"].pk).status == "open"
    page.click(".review-card button[value=keep_a]")
    page.wait_for_selector(".review-card.done >> text=Kept A")
    assert page.url == queue
    item = Contradiction.objects.get(pk=evidence["contradiction"].pk)
    assert (item.status, item.resolution) == ("resolved", "keep_a")
    page.context.close()


def test_a_member_forgets_a_fact_then_restores_it(browser, demo):  # noqa: F811
    alice = demo["alice"]
    Fact.objects.filter(pk=demo["city"].pk).update(access_count=3, last_accessed_at=timezone.now() - timedelta(days=2))
    cleared = "Alice used to commute by train"
    Fact.objects.create(
        tenant=demo["tenant"],
        memory_user=alice,
        scope="user",
        content=cleared,
        content_hash=content_hash(cleared),
        confidence=0.6,
        source="agent_inferred",
        valid_from=timezone.now() - timedelta(days=400),
        status="evicted",
        status_reason="over the cap",
    )
    page = sign_in(browser, demo, "alice")
    page.click("nav.mainnav >> text=What agents believe about me")
    row = page.locator("li.mfact", has_text="Alice lives in Paris")
    body = page.inner_text("main")
    read_on = (timezone.localdate() - timedelta(days=2)).strftime("%-d %b %Y")
    assert f"Assistants read this 3 times, last on {read_on}." in row.inner_text()
    assert "You said it" in row.inner_text()
    for engineering in ("personal.city", "preference.editor", "0.9", "exp(", "user_stated", "Staleness"):
        assert engineering not in body, engineering

    row.locator("button:has-text('Forget')").click()
    page.wait_for_selector("li.mfact.forgotten >> text=Forgotten by you")
    assert Fact.objects.get(pk=demo["city"].pk).status == "evicted"

    page.click("nav.tabs >> text=Everything")
    forgotten = page.locator("li.mfact", has_text="Alice lives in Paris")
    removed = page.locator("li.mfact", has_text=cleared)
    assert "forgotten" in forgotten.get_attribute("class") and "Forgotten by you" in forgotten.inner_text()
    assert "removed" in removed.get_attribute("class") and "No longer used" in removed.inner_text()
    assert removed.locator("button").count() == 0  # only your own Forget is undone here

    page.click("nav.tabs >> text=Forgotten by you")
    assert page.locator("li.mfact").count() == 1
    page.click("li.mfact >> button:has-text('Undo: restore it')")
    page.wait_for_selector("text=Restored: assistants use it again.")
    assert Fact.objects.get(pk=demo["city"].pk).status == "active"
    page.reload()
    assert "You have not forgotten anything." in page.inner_text("#member-facts")

    page.goto(f"{demo['url']}/t/acme/facts/{demo['city'].pk}/")
    body = page.inner_text("main")
    assert "Alice lives in Paris" in page.inner_text("h1")
    assert f"Assistants read this 3 times, last on {read_on}." in body
    for engineering in ("exp(", "0.4 ×", "personal.city", "SUPERSEDES", "fact.", "staff:", "Confidence"):
        assert engineering not in body, engineering
    page.context.close()


def test_the_overview_links_only_pages_the_operator_can_open_and_folds_empty_charts(browser, demo):  # noqa: F811
    PiiBlock.objects.create(
        tenant=demo["tenant"],
        memory_user=demo["alice"],
        actor="agent:bot",
        route="fact",
        action="blocked",
        kinds=["email"],
        redacted_preview="mail me at [email]",
        fingerprint="fp-1",
    )
    page = sign_in(browser, demo, "otto")
    page.goto(f"{demo['url']}/t/acme/overview/")
    hrefs = set(page.eval_on_selector_all("main a[href]", "els => els.map(e => e.getAttribute('href'))"))
    assert not [h for h in hrefs if "/pii/" in h]
    for href in sorted(hrefs):
        if href.startswith("/"):
            assert page.request.get(demo["url"] + href).status != 403, href
    folded = page.inner_text("#empty-charts")
    assert folded.startswith("Nothing yet in the last 14 days:") and "model calls" in folded
    assert page.locator("svg.chart text.empty").count() == 0  # no empty chart card is drawn
    assert page.locator("section:has(h2:has-text('PII / secret blocks per day'))").count() == 1
    health = page.inner_text("#extraction-health")
    assert "healthy" not in health and "no batch has run" in health
    page.context.close()


def test_a_thread_gives_one_account_of_its_extraction_with_the_facts_under_each_message(browser, demo):  # noqa: F811
    tenant, alice = demo["tenant"], demo["alice"]
    thread = Thread.objects.create(tenant=tenant, memory_user=alice, external_id="chat-9")
    said = Message.objects.create(
        tenant=tenant,
        memory_user=alice,
        thread=thread,
        role="user",
        content="I moved to Paris last spring",
        created_at=timezone.now() - timedelta(minutes=5),
        status="extracted",
    )
    Message.objects.create(
        tenant=tenant, memory_user=alice, thread=thread, role="user", content="thanks!", created_at=timezone.now()
    )
    batch = ExtractionBatch.objects.create(
        tenant=tenant, memory_user=alice, thread=thread, status="done", extractor="rules-v1", message_count=1
    )
    Message.objects.filter(pk=said.pk).update(batch=batch)
    Fact.objects.filter(pk=demo["city"].pk).update(message=said, batch=batch)
    page = sign_in(browser, demo, "otto")
    page.goto(f"{demo['url']}/t/acme/conversations/{thread.pk}/")
    assert page.inner_text("#extraction-state") == (
        "Extraction: 1 of 2 messages extracted, 1 waiting; 1 fact drawn from this thread."
    )
    first = page.locator(f"#m-{said.pk}")
    assert "1 fact drawn" in first.inner_text() and "Alice lives in Paris" in first.locator("ul.drawn").inner_text()
    assert "No extraction yet" not in page.inner_text("main")
    page.context.close()


def test_lifecycle_and_as_of_speak_in_words(browser, demo):  # noqa: F811
    page = sign_in(browser, demo, "otto")
    page.goto(f"{demo['url']}/t/acme/lifecycle/")
    assert re.search(r"Computed \d{4}-\d\d-\d\d \d\d:\d\d\.", page.inner_text("main"))
    page.goto(f"{demo['url']}/t/acme/users/{demo['alice'].pk}/asof/?date={timezone.localdate().isoformat()}")
    table = page.inner_text("main table")
    assert "stated by the user" in table and "user_stated" not in table
    page.context.close()


def test_on_a_phone_the_nav_is_a_menu_beside_the_current_page(browser, demo):  # noqa: F811
    page = sign_in(browser, demo, "aude")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{demo['url']}/t/acme/audit/")
    nav = page.locator("nav.mainnav")
    assert nav.bounding_box()["height"] <= 60
    assert page.locator(".navcurrent").inner_text() == "Audit log" and page.locator(".navcurrent").is_visible()
    assert not page.locator("nav.mainnav >> text=Settings").is_visible()
    page.click(".navtoggle")
    assert page.locator(".navtoggle").get_attribute("aria-expanded") == "true"
    for group in ("MEMORY", "CURATION", "OVERSIGHT"):
        assert page.locator(".navgroup-name", has_text=re.compile(group, re.IGNORECASE)).is_visible()
    assert page.locator("nav.mainnav a[aria-current=page]").inner_text() == "Audit log"
    page.click("nav.mainnav >> text=PII blocks")
    page.wait_for_url("**/pii/")
    assert page.locator(".navcurrent").inner_text() == "PII blocks"
    page.context.close()


def test_an_operator_never_sees_a_pii_link(browser, demo):  # noqa: F811
    AuditEvent.objects.create(
        tenant=demo["tenant"], actor_type="staff", actor="staff:otto", action="fact.pin", outcome="updated"
    )
    page = sign_in(browser, demo, "otto")
    for path in ("/t/acme/overview/", "/t/acme/audit/", "/t/acme/review/"):
        page.goto(demo["url"] + path)
        assert page.locator("a[href*='/pii/']").count() == 0, path
    page.context.close()
