"""Entity curation in real headless Chromium (Debian's chromium, Playwright) against the live server:
merge two entities from the entity page (confirm, then undo), decide an entity-merge review item with
htmx and undo it, close a relation and reopen it."""

from __future__ import annotations

import pytest

from memory_admin.models import Entity, EntityMergeReview, FactEntity, MemoryUser, Relation
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_write
from tests.dashboard.test_browser import browser, demo, shot, sign_in  # noqa: F401 -- shared fixtures

pytestmark = [pytest.mark.browser]


@pytest.fixture
def graph(demo):  # noqa: F811
    # A user of its own: the demo's facts are stored without embeddings, which the write path's
    # neighbour lookup does not expect.
    tenant = demo["tenant"]
    carol = MemoryUser.objects.create(tenant=tenant, external_id="carol")
    system = Principal.system(tenant.pk)

    def write(content, mentions, relations=()):
        fact = fact_write(principal=system, memory_user=carol, content=content, source="user_stated").fact
        fact_entities_link(principal=system, fact=fact, mentions=mentions, relations=relations)

    write(
        "Dana works at Initech.",
        [EntityMention("Dana", "person", "subject"), EntityMention("Initech", "company", "object")],
        [RelationDraft("Dana", "works_at", "Initech")],
    )
    write("Robert Dana reviewed the budget.", [EntityMention("Robert Dana", "person", "subject")])
    return {e.name: e for e in Entity.objects.filter(memory_user=carol)}


def test_merge_from_the_entity_page_then_undo(browser, demo, graph):  # noqa: F811
    page = sign_in(browser, demo, "otto")
    page.click("nav.mainnav >> text=Entities")
    assert page.locator("#entity-list >> text=Robert Dana").count() == 1
    page.click("#entity-list >> text=/^Dana$/")
    assert page.inner_text("h1").startswith("Dana")
    option = page.locator("#merge-form select option", has_text="Robert Dana (person)")
    assert "alike" in option.inner_text()  # the candidates say how alike they are
    page.select_option("#merge-form select", value=option.get_attribute("value"))
    page.click("#merge-form button")
    assert "Merge “Robert Dana” into “Dana”?" in page.inner_text("h1")
    shot(page, "entity-merge-confirm")
    page.click("text=Confirm: merge")
    page.wait_for_selector("#merges")
    assert "Merged “Robert Dana” into “Dana”" in page.inner_text(".messages")
    assert page.locator("#mentions >> text=Robert Dana reviewed the budget.").count() == 1
    assert "Robert Dana" in page.inner_text("#aliases")
    shot(page, "entity-merged")

    page.click("#merges >> text=Undo merge")
    page.wait_for_selector("text=Merge undone")
    assert page.locator("#merges").count() == 0
    assert page.locator("#mentions >> text=Robert Dana reviewed the budget.").count() == 0
    robert = graph["Robert Dana"]
    robert.refresh_from_db()
    assert robert.merged_into_id is None
    assert FactEntity.objects.get(entity=robert).fact.content == "Robert Dana reviewed the budget."
    page.click("nav.mainnav >> text=Entities")
    assert page.locator("#entity-list >> text=Robert Dana").count() == 1
    page.context.close()


def test_review_item_merged_with_htmx_and_undone(browser, demo, graph):  # noqa: F811
    item = EntityMergeReview.objects.create(
        tenant=demo["tenant"],
        memory_user=graph["Dana"].memory_user,
        entity=graph["Robert Dana"],
        candidate=graph["Dana"],
        similarity=0.83,
        judge="rules",
        reason="similar names, not clearly one entity",
    )
    page = sign_in(browser, demo, "otto")
    page.goto(demo["url"] + "/t/acme/review/")
    page.click("nav.tabs >> text=Entity merges")
    card = page.locator(f"#er-{item.pk}")
    assert "Robert Dana or Dana?" in card.inner_text()
    url_before = page.url
    card.locator("text=Merge: one entity").click()
    page.wait_for_selector("text=Merged: one entity now.")
    assert page.url == url_before  # swapped in place by htmx, no reload
    assert Entity.objects.get(pk=graph["Robert Dana"].pk).merged_into_id == graph["Dana"].pk
    page.locator(f"#er-{item.pk} >> text=Undo").click()
    page.wait_for_selector("text=Reopened: back in the queue")
    assert page.locator(f"#er-{item.pk} >> text=Keep apart").count() == 1
    assert Entity.objects.get(pk=graph["Robert Dana"].pk).merged_into_id is None
    page.context.close()


def test_close_a_relation_after_confirming_then_reopen(browser, demo, graph):  # noqa: F811
    works = Relation.objects.get(type="works_at")
    page = sign_in(browser, demo, "otto")
    page.goto(f"{demo['url']}/t/acme/entities/{graph['Initech'].pk}/")
    assert page.locator("svg.entity-graph >> text=Dana").count() == 1
    page.click(f"#rel-{works.pk} >> text=Close relation…")
    page.fill(f"#rel-{works.pk} input[name=note]", "left in spring")
    page.click(f"#rel-{works.pk} >> text=Confirm: close")
    page.wait_for_selector("text=Closed by an operator.")
    assert page.locator("#graph-empty").count() == 1
    assert Relation.objects.get(pk=works.pk).valid_to is not None
    page.click(f"#rel-{works.pk} >> text=Reopen (undo close)")
    page.wait_for_selector("text=Relation reopened.")
    assert Relation.objects.get(pk=works.pk).valid_to is None
    page.context.close()
