"""The context block's guarantees hold with documents in it (issue 34): never over budget, the fence
intact, and monotone in the budget: whatever a block holds at one budget (facts and document chunks), a
larger budget holds too; documents stay within their share."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_admin.knowledge.digest import digest_document
from memory_admin.models import KnowledgeDocument, KnowledgeSource, MemoryUser, Notebook
from memory_admin.selectors.access import Principal
from tests.retrieval.test_context_monotone_in_budget import VOCABULARY, context, fact_row, held

pytestmark = pytest.mark.django_db
_users = itertools.count(1)
STOPWORDS = {"the", "a", "of", "to"}  # of VOCABULARY: no lexeme, so only meaning could bring a chunk in


def documents(tenant) -> None:
    """Three documents of several sections, once per test (the database outlives hypothesis' examples)."""
    if KnowledgeSource.objects.filter(tenant=tenant, name="mono-docs").exists():
        return
    source = KnowledgeSource.objects.create(tenant=tenant, kind="file", name="mono-docs", state="idle")
    for d in range(3):
        document = KnowledgeDocument.objects.create(source=source, tenant=tenant, locator=f"doc-{d}.md")
        sections = []
        for s in range(3):
            words = " ".join(VOCABULARY[(d * 7 + s * 3 + i) % len(VOCABULARY)] for i in range(40 + 30 * s))
            sections.append(f"## Part {s}\n\nThe {VOCABULARY[d + s]} {words}.\n")
        digest_document(Principal.system(tenant.pk), document, f"# Doc {d}\n\n" + "\n".join(sections))


def held_documents(body) -> set[str]:
    docs = next((s for s in body["sections"] if s["name"] == "documents"), None)
    return set(docs["included"]) if docs else set()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    facts=st.lists(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=30).map(" ".join), max_size=20),
    budgets=st.lists(st.integers(1, 1500), min_size=2, max_size=4, unique=True),
    data=st.data(),
)
def test_a_larger_budget_holds_every_fact_and_chunk_a_smaller_one_held(api, tenant, facts, budgets, data):
    documents(tenant)
    user = MemoryUser.objects.create(tenant=tenant, external_id=f"mono-docs-{next(_users)}")
    now = timezone.now()
    for hours, content in enumerate(facts):
        fact_row(user, content, valid_from=now - timedelta(hours=hours * 5))
    if data.draw(st.booleans()):
        Notebook.objects.create(tenant=tenant, memory_user=user, content="Prefers the ferry. " * 5, version=1)
    task = data.draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=5).map(" ".join))
    before_facts: set[str] = set()
    before_docs: set[str] = set()
    saw_documents = False
    for budget in sorted(budgets):
        body = context(api, user, task, budget)  # never over budget, counted as a whole (context())
        text = body["text"]
        if text:
            assert text.startswith("<<<MEMORY_DATA ") and text.rstrip().endswith(">>>")
            assert text.count("<<<") == 2  # only the fence: no content opens or closes one
        now_facts, now_docs = held(body), held_documents(body)
        assert before_facts <= now_facts, (budget, before_facts - now_facts)
        assert before_docs <= now_docs, (budget, before_docs - now_docs)
        before_facts, before_docs = now_facts, now_docs
        docs = next((s for s in body["sections"] if s["name"] == "documents"), None)
        if docs is not None and docs["included"]:
            saw_documents = True
            assert docs["tokens"] <= int(budget * 0.25)
            assert len(docs["truncated"]) <= 1
    if max(budgets) >= 400 and set(task.split()) - STOPWORDS:
        assert saw_documents  # the task's words are the documents' words: some chunk goes in
