"""A search of the default kinds (facts, messages, chunks) asks, inside its candidate statement, whether
the user has an indexed message and whether any active chunk is readable (retrieval/candidates.py
`_present`): a kind found absent has no statement sent. The answer is read in the same statement as the
facts, never kept between requests, so a message or a chunk written a moment before is found."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory_admin.knowledge.digest import digest_document
from memory_admin.models import KnowledgeDocument, KnowledgeSource
from memory_admin.selectors.access import Principal
from memory_admin.services.message_index import messages_index

pytestmark = pytest.mark.django_db


def statements(api, path: str, **params) -> tuple[dict, list[str]]:
    """The body of a GET and the candidate statements it sent (by their first CTE)."""
    with CaptureQueriesContext(connection) as ctx:
        r = api.get(path, **params)
    assert r.status_code == 200, r.content
    firsts = ("WITH search_qv", "WITH message_qv", "WITH chunk_qv")
    sent = [q["sql"].split(" AS ")[0] for q in ctx.captured_queries if q["sql"].startswith(firsts)]
    return r.json(), sent


def candidate_statements(api, user: str, q: str) -> tuple[dict, list[str]]:
    """The body of a default-kinds search and the candidate statements it sent."""
    return statements(api, f"users/{user}/search", q=q, k=5)


def test_a_search_sends_the_message_and_chunk_statements_only_when_there_is_one_to_find(api, tenant):
    r = api.post("users/pia/facts", {"content": "Pia keeps bees behind the orchard", "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    api.get("users/pia/search", q="bees")  # warm: compiled statements, connection settings
    body, sent = candidate_statements(api, "pia", "where are the bees kept")
    assert sent == ["WITH search_qv"]
    assert [h["kind"] for h in body["hits"]] == ["fact"]

    # A message written and indexed since: the next search reads the messages, and finds it.
    r = api.post(
        "users/pia/messages",
        {"thread_id": "t", "messages": [{"role": "user", "content": "The bees swarmed over the orchard wall"}]},
    )
    assert r.status_code == 202, r.content
    assert messages_index() == 1
    body, sent = candidate_statements(api, "pia", "where did the bees swarm")
    assert sent == ["WITH search_qv", "WITH message_qv"]
    assert "message" in {h["kind"] for h in body["hits"]}

    # A document digested since: the chunks are read too, and its chunk found.
    source = KnowledgeSource.objects.create(tenant=tenant, kind="file", name="beekeeping", state="idle")
    document = KnowledgeDocument.objects.create(source=source, tenant=tenant, locator="hives.md")
    digest_document(
        Principal.system(tenant.pk), document, "# Hives\n\nA swarm of bees leaves the hive with the old queen.\n"
    )
    body, sent = candidate_statements(api, "pia", "why do bees swarm from the hive")
    assert sent == ["WITH search_qv", "WITH message_qv", "WITH chunk_qv"]
    assert "chunk" in {h["kind"] for h in body["hits"]}


def test_another_users_message_does_not_make_a_search_read_messages(api):
    for user, content in (("pia", "Pia keeps bees"), ("rex", "Rex keeps goats")):
        r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
        assert r.status_code in (200, 201), r.content
    r = api.post("users/rex/messages", {"thread_id": "t", "messages": [{"role": "user", "content": "Goats bleat"}]})
    assert r.status_code == 202, r.content
    assert messages_index() == 1
    _, sent = candidate_statements(api, "pia", "who keeps animals")
    assert sent == ["WITH search_qv"]
    _, sent = candidate_statements(api, "rex", "who keeps animals")
    assert sent == ["WITH search_qv", "WITH message_qv"]


def context_statements(api, user: str, task: str) -> tuple[dict, list[str]]:
    """The body of a context block and the candidate statements it sent."""
    return statements(api, f"users/{user}/context", task=task)


def test_a_context_block_reads_the_chunks_only_when_there_is_one_to_cite(api, tenant):
    r = api.post("users/pia/facts", {"content": "Pia keeps bees behind the orchard", "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    api.get("users/pia/context", task="bees")  # warm
    body, sent = context_statements(api, "pia", "look after the bees")
    assert sent == ["WITH search_qv"]
    assert "orchard" in body["text"] and "Documents" not in body["text"]

    # A document digested since: the next block reads the chunks and cites it.
    source = KnowledgeSource.objects.create(tenant=tenant, kind="file", name="beekeeping", state="idle")
    document = KnowledgeDocument.objects.create(source=source, tenant=tenant, locator="hives.md")
    digest_document(
        Principal.system(tenant.pk), document, "# Hives\n\nA swarm of bees leaves the hive with the old queen.\n"
    )
    body, sent = context_statements(api, "pia", "why do bees swarm from the hive")
    assert sent == ["WITH search_qv", "WITH chunk_qv"]
    assert "old queen" in body["text"] and "hives.md" in body["text"]


def test_a_search_for_facts_and_chunks_alone_still_skips_an_absent_kind(api):
    r = api.post("users/pia/facts", {"content": "Pia keeps bees behind the orchard", "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    _, sent = statements(api, "users/pia/search", q="where are the bees", kinds="fact,chunk")
    assert sent == ["WITH search_qv"]
