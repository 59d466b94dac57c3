"""The Python client searches document chunks beside facts and cites them (issue 34): `kinds`, the
chunk's source, file and section, and the context block's documents section, against the real API under
gunicorn. The crawl the server sends at commit is run here, in process (no worker on the test queue)."""

from __future__ import annotations

import pytest
from memory_admin_client import DocumentChunk, Invalid, MemoryAdmin

from memory_admin.models import KnowledgeSource
from tests.knowledge.conftest import crawl_all

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUNBOOK = b"""# Payments runbook

## Rollback

To roll back a payments release, run `payctl rollback --to previous` and watch the error rate.
"""


def test_the_client_finds_and_cites_a_chunk_beside_facts(gunicorn_server, tenant, make_key):
    with MemoryAdmin(gunicorn_server, make_key(tenant)) as mem:
        source = mem.knowledge.upload(RUNBOOK, filename="runbook.md", name="Payments runbook")
        crawl_all(KnowledgeSource.objects.get(pk=source.id))
        mem.facts.add("dana", "Dana is on call for payments", source="user_stated")
        q = "how do I roll back a payments release?"

        result = mem.search("dana", q, k=5)
        assert result.kinds == ["fact", "message", "chunk"]
        hit = next(h for h in result.hits if h.kind == "chunk")
        assert hit.fact is None and isinstance(hit.chunk, DocumentChunk)
        assert "payctl rollback" in hit.chunk.text and hit.chunk.fetched_at is not None
        assert hit.chunk.citation == "Payments runbook, runbook.md \u00a7 Payments runbook > Rollback"
        assert any(h.kind == "fact" and h.fact.content == "Dana is on call for payments" for h in result.hits)

        assert {h.kind for h in mem.search("dana", q, kinds=["fact"]).hits} == {"fact"}
        assert {h.kind for h in mem.search("dana", q, kinds=["chunk"]).hits} == {"chunk"}
        with pytest.raises(Invalid):
            mem.search("dana", q, kinds=[])

        block = mem.context("dana", task=q, budget_tokens=1000)
        documents = next(s for s in block.sections if s.name == "documents")
        assert documents.included == [hit.chunk.id] and documents.contradicts_notebook == []
        assert "[doc 1: Payments runbook; runbook.md; section Payments runbook > Rollback;" in block.text
