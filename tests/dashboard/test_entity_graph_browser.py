"""The demo's entity graph in real headless Chromium: after `seed_demo`, a person's entity page draws
their relations (where they live, what they use, what they work on) with typed neighbours, and its
merge candidates come likeliest first. The screenshot is docs/entity-graph.png's source."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from memory_admin.models import Entity
from tests.dashboard.test_browser import SHOTS, browser, shot  # noqa: F401 -- shared fixtures

pytestmark = [pytest.mark.browser]


def test_a_seeded_person_has_a_graph_of_typed_neighbours(browser, live_server):  # noqa: F811
    call_command("seed_demo", tenant="graphdemo", users=2, seed=5)
    person = (
        Entity.objects.filter(tenant__slug="graphdemo", type="person", relations_out__isnull=False)
        .order_by("name")
        .first()
    )
    assert person is not None
    page = browser.new_context(viewport={"width": 1100, "height": 800}).new_page()
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", "demo-password")  # the seed's accounts
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    page.goto(f"{live_server.url}/t/graphdemo/entities/{person.pk}/")
    assert page.locator("svg.entity-graph").count() == 1
    labels = set(page.locator("svg.entity-graph .edge text").all_text_contents())
    assert {"lives in", "uses"} <= labels
    legend = page.inner_text("section[aria-labelledby=graph-h]")
    assert "place" in legend and "tool" in legend
    shot(page, "entity-graph")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("section[aria-labelledby=graph-h]").screenshot(path=str(SHOTS / "entity-graph-card.png"))
    page.context.close()
