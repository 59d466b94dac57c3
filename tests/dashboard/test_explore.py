"""Exploration pages (issue 11, items 13-15): the conversation browser with provenance both ways,
tenant-wide search with the product's ranking, and the context playground with two budgets."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from memory_admin.models import ExtractionBatch, Fact, Message, Thread


@pytest.fixture
def conversation(tenant, memory_user, make_fact):
    thread = Thread.objects.create(tenant=tenant, memory_user=memory_user, external_id="support-42")
    batch = ExtractionBatch.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        thread=thread,
        status="done",
        extractor="rules-v1",
        message_count=2,
        fact_count=1,
    )
    said = Message.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        thread=thread,
        role="user",
        content="I switched to neovim last week",
        created_at=timezone.now(),
        batch=batch,
        status="extracted",
    )
    Message.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        thread=thread,
        role="assistant",
        content="Noted, I will use neovim keybindings",
        created_at=timezone.now(),
        batch=batch,
        status="extracted",
    )
    fact = make_fact(memory_user, "Alice uses neovim", message=said, batch=batch)
    return {"thread": thread, "batch": batch, "message": said, "fact": fact}


def test_a_conversation_shows_messages_batches_and_the_facts_each_message_produced(operator, tenant, conversation):
    listing = operator.get(reverse("conversations", args=[tenant.slug])).content.decode()
    assert "support-42" in listing and ">2<" in listing  # the thread with its message count
    page = operator.get(reverse("conversation", args=[tenant.slug, conversation["thread"].pk])).content.decode()
    # Each message once, in the thread (not also as a flash notice above the heading).
    assert page.count("I switched to neovim last week") == 1 and 'class="flash' not in page
    message_block = page.split(f'id="m-{conversation["message"].pk}"')[1].split("</li>")[0]
    assert "I switched to neovim last week" in message_block
    assert "Alice uses neovim" in message_block  # message -> facts
    batch_block = page.split(f'id="b-{conversation["batch"].pk}"')[1].split("</article>")[0]
    assert "done" in batch_block and "Alice uses neovim" in batch_block and "rules-v1" in batch_block
    detail = operator.get(reverse("fact_detail", args=[tenant.slug, conversation["fact"].pk])).content.decode()
    target = reverse("conversation", args=[tenant.slug, conversation["thread"].pk])
    assert f"{target}#m-{conversation['message'].pk}" in detail  # fact -> message


def test_the_conversations_page_keeps_the_account_bar_and_the_user_filter(operator, tenant, conversation):
    # The filter was passed to the template as "user", hiding the signed-in account (and Sign out).
    for params in ({}, {"user": "alice"}):
        page = operator.get(reverse("conversations", args=[tenant.slug]), params).content.decode()
        account = page.split('<div class="account">')[1].split("</div>")[0]
        assert "Sign out" in account and "operator" in account
    assert 'name="user" value="alice"' in page and "support-42" in page


def test_members_cannot_open_conversations(member, tenant, conversation):
    assert member.get(reverse("conversations", args=[tenant.slug])).status_code == 403
    assert member.get(reverse("conversation", args=[tenant.slug, conversation["thread"].pk])).status_code == 403


def test_another_tenants_thread_is_a_404(operator, tenant, foreign_user):
    thread = Thread.objects.create(tenant=foreign_user.tenant, memory_user=foreign_user, external_id="secret")
    assert operator.get(reverse("conversation", args=[tenant.slug, thread.pk])).status_code == 404


def test_tenant_search_ranks_facts_of_every_user_and_filters(operator, tenant, memory_user, other_user, make_fact):
    make_fact(memory_user, "Alice maintains the billing service")
    make_fact(other_user, "Bob is on call for billing this week", contested=True)
    make_fact(other_user, "Bob likes hiking")
    url = reverse("search", args=[tenant.slug])
    body = operator.get(url, {"q": "billing service"}).content.decode()
    hits = body.split('id="search-hits"')[1]
    assert "Alice maintains the billing service" in hits and "Bob is on call for billing" in hits
    assert "hiking" not in hits
    contested = operator.get(url, {"q": "billing", "contested": "yes"}).content.decode().split('id="search-hits"')[1]
    assert "Bob is on call" in contested and "Alice maintains" not in contested
    only_bob = operator.get(url, {"q": "billing", "user": "bob"}).content.decode().split('id="search-hits"')[1]
    assert "Alice maintains" not in only_bob and "Bob is on call" in only_bob
    assert Fact.objects.filter(access_count__gt=0).count() == 0  # searching here is not a read


def test_the_playground_compares_two_budgets_and_says_what_was_dropped(operator, tenant, memory_user, make_fact):
    for i in range(12):
        make_fact(memory_user, f"Alice note {i}: " + "she keeps detailed notes about the deploy pipeline " * 3)
    url = reverse("playground", args=[tenant.slug])
    r = operator.get(url, {"user": "alice", "task": "deploy pipeline", "budget_a": "120", "budget_b": "4000"})
    body = r.content.decode()
    assert r.status_code == 200
    small = body.split('id="budget-1"')[1].split("</section>")[0]
    large = body.split('id="budget-2"')[1].split("</section>")[0]
    assert "120 tokens" in small and "4000 tokens" in large
    assert "over the token budget" in small and "over_budget" not in small
    assert "Nothing was left out." in large
    assert 'class="tokenbar"' in small and "Facts" in small
    missing = operator.get(url, {"user": "nobody", "budget_a": "500", "budget_b": "900"}).content.decode()
    assert "No memory user “nobody”" in missing


def test_members_do_not_get_search_or_the_playground(member, tenant):
    assert member.get(reverse("search", args=[tenant.slug]), {"q": "x"}).status_code == 403
    assert member.get(reverse("playground", args=[tenant.slug])).status_code == 403


def test_the_playground_says_in_words_what_was_left_out(operator, tenant, memory_user, make_fact):
    from memory_admin.models import Episode, Notebook, Thread

    Notebook.objects.create(
        tenant=tenant, memory_user=memory_user, content="# Alice\n\n" + "- likes tea\n" * 40, version=3
    )
    thread = Thread.objects.create(tenant=tenant, memory_user=memory_user, external_id="chat-9")
    Episode.objects.create(
        tenant=tenant,
        memory_user=memory_user,
        thread=thread,
        started_at=timezone.now(),
        ended_at=timezone.now(),
        summary="Planned the tea tasting",
        outcome="success",
    )
    make_fact(memory_user, "Alice likes green tea")
    url = reverse("playground", args=[tenant.slug])
    # 70 tokens: the fence and its preamble fit, the notebook's first line does not (the compact block
    # fits a cut notebook from about 90 tokens on), so the whole notebook is left out.
    body = operator.get(url, {"user": "alice", "task": "tea", "budget_a": "70", "budget_b": "4000"}).content.decode()
    left_out = body.split('id="budget-1"')[1].split("</section>")[0].split("Left out")[1]
    assert "User notebook: the whole notebook (version 3)" in left_out
    assert "Recent episodes: episode " in left_out and "Planned the tea tasting" in left_out
    raw_id = f"notebook:{Notebook.objects.get(memory_user=memory_user).pk}"
    assert raw_id not in left_out and "item " not in left_out  # no raw item ids
