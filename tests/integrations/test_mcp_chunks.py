"""MCP's search_memories finds document chunks (issue 34) beside memories and cites them: source, file or
URL, section; `kinds` narrows the search. Through the SDK's client and a real `manage.py mcp` process."""

from __future__ import annotations

import asyncio

import pytest

from memory_admin.knowledge.services import source_create
from memory_admin.selectors.access import Principal, memory_user_for
from memory_admin.services.facts import fact_write
from memory_admin.services.keys import principal_for_key
from memory_admin.services.tenants import tenant_create
from tests.integrations.test_mcp import call, ok, stdio_session
from tests.knowledge.conftest import crawl_all

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUNBOOK = b"""# Payments runbook

## Rollback

To roll back a payments release, run `payctl rollback --to previous` and watch the error rate.
"""


def test_search_memories_finds_and_cites_a_document_chunk(make_key):
    tenant = tenant_create(slug="mcp-docs")
    key = make_key(tenant)
    source = source_create(
        Principal.system(tenant.pk),
        kind="file",
        name="Payments runbook",
        location="runbook.md",
        upload=RUNBOOK,
        upload_type="text/markdown",
        dispatch=False,
    )
    crawl_all(source)
    agent = principal_for_key(key)
    dana = memory_user_for(agent, "dana", create=True)
    fact_write(principal=agent, memory_user=dana, content="Dana is on call for payments", source="user_stated")

    async def run():
        async with stdio_session(key) as mem:
            q = "how do I roll back a payments release?"
            hits = (await ok(mem, "search_memories", user_id="dana", query=q))["hits"]
            chunk = next(h for h in hits if h.get("kind") == "chunk")
            assert "payctl rollback" in chunk["content"] and chunk["source"] == "Payments runbook"
            assert chunk["file"] == "runbook.md" and chunk["section"] == "Payments runbook > Rollback"
            assert "url" not in chunk and chunk["fetched_at"]
            assert any(h.get("kind") is None and "on call" in h["content"] for h in hits)  # the memory too
            only = (await ok(mem, "search_memories", user_id="dana", query=q, kinds=["fact"]))["hits"]
            assert only and all(h.get("kind") is None for h in only)
            full = (await ok(mem, "search_memories", user_id="dana", query=q, kinds=["chunk"], full=True))["hits"]
            assert full[0]["kind"] == "chunk" and full[0]["chunk"]["section"] == "Payments runbook > Rollback"
            body, error = await call(mem, "search_memories", user_id="dana", query=q, kinds=[])
            assert error and (body["code"], body["field"]) == ("invalid", "kinds")

    asyncio.run(run())
