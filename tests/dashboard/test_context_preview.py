"""The context playground shows what the agent API serves (issue 15 item 5): the tokens of every section,
how many facts came in as related memory, and what was left out and why, a collapsed near-duplicate
with the fact whose line holds it."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from memory_admin.selectors.dashboard import SECTION_LABELS

pytestmark = pytest.mark.django_db
ROW = re.compile(
    r'<th scope="row"><i class="swatch s\d+"></i> ([^<]+?)(?: <span[^>]*>[^<]*</span>)?</th>'
    r'<td class="num">(\d+)</td><td class="num">(\d+)(?: <small class="muted">\((\d+) related\)</small>)?'
    r'</td><td class="num">(\d+)</td>'
)


@pytest.fixture
def baker(memory_user, make_fact):
    now = timezone.now()
    for i in range(40):
        make_fact(
            memory_user,
            f"Status update {i}: the quarterly report number {i} is filed",
            valid_from=now - timedelta(hours=2 * i),
        )
    session = now - timedelta(days=100)
    turns = [
        "Ben: I have been baking a lot lately",
        "Alice: What did you bake?",
        "Ben: A sourdough loaf with rye flour",
        "Alice: How long did it take?",
        "Ben: Two days, most of it waiting for the starter",
    ]
    rows = [
        make_fact(memory_user, text, valid_from=session + timedelta(seconds=30 * i)) for i, text in enumerate(turns)
    ]
    holder = make_fact(
        memory_user, "Alice bakes sourdough bread every Sunday morning", valid_from=now - timedelta(days=3)
    )
    copy = make_fact(
        memory_user, "alice bakes sourdough bread, every Sunday morning!", valid_from=now - timedelta(days=2)
    )
    return {"turns": rows, "holder": holder, "copy": copy}


def column(page: str, number: int) -> str:
    return page.split(f'id="budget-{number}"')[1].split("</section>")[0]


def rows(col: str) -> dict[str, tuple[int, int, int, int]]:
    """Section label -> (tokens, included, related, dropped) as the table shows them."""
    return {
        label: (int(tokens), int(included), int(related or 0), int(dropped))
        for label, tokens, included, related, dropped in ROW.findall(col)
    }


def test_the_playground_shows_the_numbers_of_the_api_and_why_facts_were_left_out(operator, api, tenant, baker):
    page = operator.get(
        reverse("playground", args=[tenant.slug]),
        {"user": "alice", "task": "sourdough loaf", "budget_a": "300", "budget_b": "2000"},
    )
    assert page.status_code == 200
    body = page.content.decode()
    for number, budget in ((1, 300), (2, 2000)):
        col = column(body, number)
        served = api.get("users/alice/context", task="sourdough loaf", budget_tokens=budget).json()
        shown = rows(col)
        # Every section, with the tokens, included, related and dropped counts the agent API reports.
        assert shown == {
            SECTION_LABELS[s["name"]]: (s["tokens"], len(s["included"]), len(s["related"]), len(s["dropped"]))
            for s in served["sections"]
        }
        # The total differs from the API's only by the width of the fence's random nonce.
        used = int(re.search(r"(\d+) used", col).group(1))
        assert f"{budget} tokens" in col and sum(t for t, *_ in shown.values()) < used <= budget
        facts = shown["Facts"]
        assert facts[0] > 0
        if budget == 300:
            # At the small budget the turns around the best match came in with it (ranked beside it by the
            # neighbour support, or as related memory), and the page counts related ones as the API does.
            assert sum(turn.content in served["text"] for turn in baker["turns"]) >= 3, served["text"]
            assert (f"({facts[2]} related)" in col) == (facts[2] > 0)
        else:
            assert facts[3] == 1  # the large budget holds everything but the collapsed duplicate
        left_out = html.unescape(col.split("<h3>Left out</h3>")[1].split("</ul>")[0])
        # The near-duplicate is named, with the reason, and links to the fact whose line holds it.
        copy, holder = baker["copy"], baker["holder"]
        duplicates = [d for s in served["sections"] for d in s["dropped"] if d["reason"] == "duplicate"]
        assert len(duplicates) == 1
        collapsed, kept = (copy, holder) if duplicates[0]["id"] == str(copy.pk) else (holder, copy)
        assert duplicates[0]["of"] == str(kept.pk)
        assert f'{collapsed.content}</a> <span class="muted">— same words as a listed fact' in left_out
        assert reverse("fact_detail", args=[tenant.slug, kept.pk]) in col
    small = column(body, 1)
    assert "over the token budget" in small and "over_budget" not in small


def test_the_playground_names_the_entity_line_it_left_out_and_counts_it_as_the_api_does(
    operator, api, tenant, memory_user, baker
):
    """A task that names an entity: at 500 tokens its summary line is over its share and the page says
    which entity was left out and why (by name, not id); at 2,000 tokens the agent reads it, and the page
    counts it as the API does."""
    from memory_admin.selectors.access import Principal
    from memory_admin.services.entities import EntityMention, fact_entities_link

    system = Principal.system(tenant.pk)
    fact = baker["turns"][2]
    fact_entities_link(principal=system, fact=fact, mentions=[EntityMention("Ben Okafor", "person", "subject")])
    task = "What does Ben Okafor bake?"
    page = operator.get(
        reverse("playground", args=[tenant.slug]),
        {"user": "alice", "task": task, "budget_a": "500", "budget_b": "2000"},
    ).content.decode()
    label = SECTION_LABELS["entities"]
    for number, budget in ((1, 500), (2, 2000)):
        col = column(page, number)
        served = api.get("users/alice/context", task=task, budget_tokens=budget).json()
        entities = next(s for s in served["sections"] if s["name"] == "entities")
        assert rows(col)[label] == (entities["tokens"], len(entities["included"]), 0, len(entities["dropped"]))
    small = column(page, 1)
    assert rows(small)[label] == (0, 0, 0, 1)
    assert f"{label}: entity Ben Okafor" in small and "— over the token budget" in small
    large = column(page, 2)
    assert rows(large)[label][1] == 1 and rows(large)[label][0] > 0
    assert "- [person, in 1 facts] Ben Okafor" in html.unescape(large)


LONG_TASK = ("我的猫叫什么名字？它喜欢睡在哪里？" * 200)[:2000]  # ~18 kB escaped: no address carries it


@pytest.fixture
def cat(memory_user, make_fact):
    return make_fact(memory_user, "我的猫叫小米，它喜欢睡在钢琴上。")


def test_a_task_too_long_for_an_address_is_previewed_when_the_form_is_posted(operator, tenant, memory_user, cat):
    """dashboard.js posts a preview form whose address would be too long; both previews answer the POST
    with the block, and the task box keeps the task."""
    page = operator.post(
        reverse("user_context", args=[tenant.slug, memory_user.pk]), {"task": LONG_TASK, "budget": "600"}
    ).content.decode()
    assert 'id="context-text"' in page and "小米" in page
    assert f'value="{LONG_TASK}"' in page
    page = operator.post(
        reverse("playground", args=[tenant.slug]),
        {"user": "alice", "task": LONG_TASK, "budget_a": "300", "budget_b": "2000"},
    ).content.decode()
    assert "小米" in column(page, 1) and "小米" in column(page, 2)


@pytest.mark.parametrize("how", ["get", "post"])
def test_a_task_longer_than_the_api_takes_is_refused_on_the_page_not_cut(operator, tenant, memory_user, cat, how):
    over = LONG_TASK + "猫"
    send = getattr(operator, how)
    for page in (
        send(reverse("user_context", args=[tenant.slug, memory_user.pk]), {"task": over, "budget": "600"}),
        send(reverse("playground", args=[tenant.slug]), {"user": "alice", "task": over, "budget_a": "300"}),
    ):
        text = page.content.decode()
        assert "The task is 2,001 characters; the API takes at most 2,000. Nothing was shown." in text
        assert "小米" not in text and 'id="budget-1"' not in text and 'id="context-text"' not in text


def test_a_posted_preview_needs_the_pages_csrf_token(tenant, memory_user, make_staff, cat):
    from django.test import Client

    signed_in = make_staff(tenant, "operator")
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = signed_in.cookies
    url = reverse("user_context", args=[tenant.slug, memory_user.pk])
    assert strict.post(url, {"task": LONG_TASK, "budget": "600"}).status_code == 403
    form = strict.get(url).content.decode()
    token = re.search(r'data-post-when-long="([^"]+)"', form).group(1)
    answered = strict.post(url, {"task": LONG_TASK, "budget": "600", "csrfmiddlewaretoken": token})
    assert answered.status_code == 200 and "小米" in answered.content.decode()
