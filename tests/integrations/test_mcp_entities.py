"""The MCP server's entity tools (search_entities, get_entity) over stdio, with the agent key's reach:
another user's or tenant's entity is not found, a bad argument is `invalid`, a merged one names its
survivor."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from memory_admin.models import Entity, MemoryUser
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.entity_curation import entity_merge
from memory_admin.services.facts import fact_write
from memory_admin.services.tenants import tenant_create
from tests.integrations.test_mcp import call, ok, stdio_session

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PAST = datetime(2025, 1, 1, tzinfo=UTC)


def stated(tenant, user_id, content, mentions, relations=()):
    system = Principal.system(tenant.pk)
    user, _ = MemoryUser.objects.get_or_create(tenant=tenant, external_id=user_id)
    fact = fact_write(principal=system, memory_user=user, content=content, source="user_stated", observed_at=PAST)
    fact_entities_link(principal=system, fact=fact.fact, mentions=mentions, relations=relations)


def test_entity_tools_read_the_graph_within_the_keys_reach(make_key):
    tenant, other = tenant_create(slug="mcp-graph"), tenant_create(slug="mcp-graph-other")
    stated(
        tenant,
        "dana",
        "Dana works at Initech.",
        [EntityMention("Dana", "person", "subject"), EntityMention("Initech", "company", "object")],
        [RelationDraft("Dana", "works_at", "Initech")],
    )
    stated(tenant, "dana", "Dana's manager is Bill Lumbergh.", [EntityMention("Bill Lumbergh", "person", "object")])
    stated(tenant, "hal", "Hal's client is Umbrella Corp.", [EntityMention("Umbrella Corp", "company", "object")])
    stated(other, "zed", "Zed works at Initrode.", [EntityMention("Initrode", "company", "object")])
    ids = {e.name: str(e.pk) for e in Entity.objects.all()}
    operator = Principal(tenant_id=tenant.pk, role="operator", actor="staff:otto", actor_type="staff")
    bill = Entity.objects.create(
        tenant=tenant, memory_user=MemoryUser.objects.get(external_id="dana"), name="Bill", type="person",
        aliases=["Bill"], alias_keys=["bill"], first_seen=PAST, last_seen=PAST,
    )  # fmt: skip
    entity_merge(principal=operator, survivor_id=ids["Bill Lumbergh"], loser_id=bill.pk)

    key = make_key(tenant, users=["dana"], agent="dana-agent")

    async def scenario():
        async with stdio_session(key) as mem:
            assert {"search_entities", "get_entity"} <= {t.name for t in (await mem.list_tools()).tools}
            found = await ok(mem, "search_entities", query="initech")
            assert [e["name"] for e in found["items"]] == ["Initech"]
            everything = await ok(mem, "search_entities")
            assert {e["name"] for e in everything["items"]} == {"Dana", "Initech", "Bill Lumbergh"}
            detail = await ok(mem, "get_entity", entity_id=ids["Dana"])
            assert [(r["type"], r["object"]["name"]) for r in detail["relations"]] == [("works_at", "Initech")]
            assert [f["content"] for f in detail["facts"]] == ["Dana works at Initech."]
            merged = await ok(mem, "get_entity", entity_id=str(bill.pk))
            assert merged["merged_into"] == ids["Bill Lumbergh"] and merged["merge_id"]
            for hidden in (ids["Umbrella Corp"], ids["Initrode"], "not-an-id"):
                body, error = await call(mem, "get_entity", entity_id=hidden)
                assert error and body["code"] == "not_found" and "Umbrella" not in str(body)
            body, error = await call(mem, "search_entities", query="a\x00b")
            assert error and body["code"] == "invalid" and body["field"] == "query"  # the argument the caller sent
            body, error = await call(mem, "search_entities", user_id="hal")
            assert error and body["code"] == "not_found"

    asyncio.run(scenario())
