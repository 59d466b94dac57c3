"""Clicking through the overview's confidence and staleness bars in real headless Chromium, with the
keyboard: Tab to a bar, Enter, and the list that opens counts and shows the facts the bar counted."""

from __future__ import annotations

import re

import pytest

from memory_admin.models import Fact
from tests.dashboard.test_browser import browser, demo, shot, sign_in  # noqa: F401 -- shared fixtures

pytestmark = [pytest.mark.browser]


def _tab_to(page, selector: str, limit: int = 300) -> None:
    """Press Tab until the element matching `selector` has the focus (as a keyboard user would)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate(f"document.activeElement && document.activeElement.matches({selector!r})"):
            return
    raise AssertionError(f"{selector} never got the focus with Tab")


@pytest.mark.parametrize(
    ("chart", "prefix"), [("Effective confidence distribution", "conf"), ("Staleness distribution", "stale")]
)
def test_a_bar_opens_the_facts_it_counts_by_keyboard(browser, demo, chart, prefix):  # noqa: F811
    Fact.objects.filter(pk=demo["city"].pk).update(pinned=True, confidence=0.35)  # no decay: stays in 0.3
    page = sign_in(browser, demo, "otto")
    page.goto(demo["url"] + "/t/acme/overview/")
    bars = page.locator(f'svg[aria-label="{chart}"] a')
    assert bars.count() >= 1
    # The bar holding Alice's city (confidence 0.3 band), or the first bar of the staleness chart.
    bar = page.locator(f'svg[aria-label="{chart}"] a[aria-label^="0.3:"]') if prefix == "conf" else bars.first
    label = bar.get_attribute("aria-label")
    band, value = label.split(": ")
    href = bar.get_attribute("href")
    assert f"{prefix}_min={band}" in href
    _tab_to(page, f'svg[aria-label="{chart}"] a[aria-label="{label}"]')
    page.keyboard.press("Enter")
    page.wait_for_selector("#facts-list")
    assert "/t/acme/facts/" in page.url and page.inner_text("h1") == "Facts across users"
    summary = page.inner_text("#band-summary")
    assert re.match(rf"{value} facts? with ", summary), summary
    listed = page.locator("#facts-list td.content > a").all_inner_texts()
    assert len(listed) == int(value)
    if prefix == "conf":
        assert "Alice lives in Paris" in listed and "effective confidence 0.3 to under 0.4" in summary
        # The filter form shows the band, and a person can widen it and filter again.
        assert page.input_value("input[name=conf_min]") == "0.3"
        page.fill("input[name=conf_max]", "1")
        page.click("form.filters button")
        page.wait_for_selector("#band-summary")
        assert "effective confidence 0.3 to 1 (inclusive)" in page.inner_text("#band-summary")
        assert len(page.locator("#facts-list td.content > a").all_inner_texts()) == 5
    shot(page, f"facts-band-{prefix}")
    page.context.close()
