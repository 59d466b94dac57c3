"""The MCP door as a model and a desktop meet it: a deliberate write is stored or is an error naming its
outcome, compact results, typed items, tool annotations, one rule for forgetting a replaced memory (the
same as REST's), stable codes for every refused argument, and a time limit per call that leaves the other
clients answered. Real `manage.py mcp --transport http` processes on the test database."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import psycopg
import pytest
from django.db import connection
from mcp.shared.exceptions import MCPError

from memory_admin.models import Fact, MemoryUser
from memory_admin.selectors.access import memory_user_for
from memory_admin.services.keys import principal_for_key
from memory_admin.services.tenants import tenant_create
from tests.conftest import Api
from tests.integrations.conftest import ROOT, free_port, server_env, stop, wait_until_up
from tests.integrations.test_mcp import answer, call, http_session, ok

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CALL_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def mcp_url(django_db_setup):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "mcp", "--transport", "http", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=server_env(MCP_CALL_TIMEOUT_SECONDS=str(CALL_TIMEOUT)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/mcp", proc, "manage.py mcp")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


@pytest.fixture
def key(make_key):
    return make_key(tenant_create(slug="doors"))


def session(mcp_url, key):
    return http_session(mcp_url, key)


def test_what_an_agent_deliberately_saves_is_stored(mcp_url, key):
    """Before: add_memory(content=...) answered rejected_low_confidence as a normal result (the default
    source agent_inferred, 0.6, is below the gate, 0.7), and the fact was gone."""

    async def run():
        async with session(mcp_url, key) as mem:
            saved = await ok(mem, "add_memory", user_id="dana", content="Dana takes her coffee black")
            assert saved["outcome"] == "created" and saved["stored"] is True
            batch = await ok(
                mem,
                "add_memories",
                user_id="dana",
                facts=[{"content": "Dana runs on Tuesdays"}, {"content": "Dana reads sci-fi"}],
            )
            assert [r["outcome"] for r in batch["results"]] == ["created", "created"]
            # A guess is still gated, and saying so is an error naming the outcome, not a quiet result.
            guess, error = await call(
                mem, "add_memory", user_id="dana", content="Dana might like jazz", source="agent_inferred"
            )
            assert error and guess["code"] == "rejected_low_confidence" and "gate" in guess["detail"]

    asyncio.run(run())
    stored = Fact.objects.filter(memory_user__external_id="dana", status="active")
    assert {f.content: f.source for f in stored} == {
        "Dana takes her coffee black": "agent_stated",
        "Dana runs on Tuesdays": "agent_stated",
        "Dana reads sci-fi": "agent_stated",
    }
    assert {f.confidence for f in stored} == {0.8}
    assert not Fact.objects.filter(content="Dana might like jazz").exists()


def test_a_fact_the_notebook_overrules_is_an_error_naming_the_outcome(mcp_url, key):
    async def run():
        async with session(mcp_url, key) as mem:
            await ok(mem, "update_notebook", user_id="gus", content="# Gus\n- Gus lives in Lisbon.", version=0)
            overruled, error = await call(mem, "add_memory", user_id="gus", content="Gus lives in Madrid")
            assert error and overruled["code"] == "overruled" and overruled["outcome"] == "overruled"

    asyncio.run(run())


def _text(result) -> str:
    return "".join(block.text for block in result.content if getattr(block, "text", None))


def test_search_results_are_compact_and_full_on_request(mcp_url, key):
    facts = [
        "Ola prefers neovim over VS Code",
        "Ola's editor theme is solarized dark",
        "Ola writes Rust at work",
        "Ola uses tmux with vim keys",
        "Ola switched from Emacs in 2021",
        "Ola types on a split keyboard",
        "Ola keeps her dotfiles on GitHub",
        "Ola likes monospace fonts with ligatures",
    ]

    async def run():
        async with session(mcp_url, key) as mem:
            await ok(mem, "add_memories", user_id="ola", facts=[{"content": f} for f in facts])
            compact = await mem.call_tool("search_memories", {"user_id": "ola", "query": "which editor?", "k": 8})
            full = await mem.call_tool(
                "search_memories", {"user_id": "ola", "query": "which editor?", "k": 8, "full": True}
            )
            return compact, full

    compact, full = asyncio.run(run())
    hits = answer(compact)["hits"]
    assert len(hits) == 8 and set(hits[0]) <= {
        "id",
        "content",
        "score",
        "key",
        "status",
        "contested",
        "valid_from",
        "created_at",
    }
    assert {h["content"] for h in hits} == set(facts)
    assert [h["id"] for h in hits] == [h["fact"]["id"] for h in answer(full)["hits"]]  # the same ranking
    # Before: every hit was the full record and its score components, as indented JSON (the SDK's
    # rendering of a returned dict): the body `full=true` answers, rendered as it was.
    before = len(json.dumps(answer(full), indent=2, ensure_ascii=False)) / 8
    full_now, after = len(_text(full)) / 8, len(_text(compact)) / 8
    content = sum(len(f) for f in facts) / len(facts)
    print(
        f"\nMCP search_memories, 8 hits, characters per hit: {before:.0f} before, {after:.0f} now "
        f"({full_now:.0f} with full=true); content {content:.0f}"
    )
    assert after * 8 < before, (before, after)  # what a model pays for per hit


def test_add_memories_items_have_a_schema_and_tools_carry_annotations(mcp_url, key):
    async def run():
        async with session(mcp_url, key) as mem:
            tools = {t.name: t for t in (await mem.list_tools()).tools}
            unknown, error = await call(
                mem, "add_memories", user_id="pia", facts=[{"content": "Pia likes tea", "colour": "green"}]
            )
            return tools, unknown, error

    tools, unknown, error = asyncio.run(run())
    schema = tools["add_memories"].input_schema
    item = schema["properties"]["facts"]["items"]
    if "$ref" in item:
        item = schema["$defs"][item["$ref"].rsplit("/", 1)[1]]
    assert item["required"] == ["content"] and {"content", "key", "confidence", "source"} <= set(item["properties"])
    assert "agent_stated" in json.dumps(item["properties"]["source"])
    assert error and unknown["code"] == "invalid" and unknown["field"].startswith("facts.0")
    reads = {
        "search_memories",
        "get_context",
        "get_memories",
        "get_memory",
        "get_notebook",
        "get_skill",
        "list_skills",
        "search_entities",
        "get_entity",
    }
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None and hints.read_only_hint is (name in reads), name
        assert hints.destructive_hint is (
            True if name in {"delete_memory", "update_notebook"} else (None if name in reads else False)
        ), name
    assert tools["delete_memory"].annotations.idempotent_hint is True
    assert tools["add_memory"].annotations.idempotent_hint is False


def test_forgetting_a_replaced_id_is_refused_with_the_live_one_on_mcp_and_rest(mcp_url, key):
    """Before: delete_memory (and DELETE /facts/{id}) on the id the agent was shown, after an update,
    evicted only the old version and answered success; the new one stayed served."""

    async def run():
        async with session(mcp_url, key) as mem:
            first = await ok(mem, "add_memory", user_id="ray", content="Ray's editor is vim", key="preference.editor")
            second = await ok(
                mem, "add_memory", user_id="ray", content="Ray's editor is helix", key="preference.editor"
            )
            assert second["outcome"] == "updated"
            refused, error = await call(mem, "delete_memory", memory_id=first["fact"]["id"])
            assert error and refused["code"] == "already_superseded"
            assert refused["current_id"] == second["fact"]["id"]
            gone = await ok(mem, "delete_memory", memory_id=refused["current_id"])
            assert gone["status"] == "evicted"
            return first["fact"]["id"], second["fact"]["id"]

    old_id, new_id = asyncio.run(run())
    assert Fact.objects.get(pk=old_id).status == "superseded"  # history unchanged by the refused call

    rest = Api(key)
    one = rest.post("users/ray/facts", {"content": "Ray lives in Oslo", "key": "home.city"}).json()["fact"]["id"]
    two = rest.post("users/ray/facts", {"content": "Ray lives in Bergen", "key": "home.city"}).json()["fact"]["id"]
    refused = rest.delete(f"facts/{one}")
    assert refused.status_code == 409
    assert refused.json()["code"] == "already_superseded" and refused.json()["current_id"] == two
    assert Fact.objects.get(pk=two).status == "active"


def test_every_refused_argument_has_a_stable_code(mcp_url, key):
    async def run():
        async with session(mcp_url, key) as mem:
            await ok(mem, "add_memory", user_id="sam", content="Sam likes tea")
            answers = {
                "query": await call(mem, "search_memories", user_id="sam", query="tea\x00"),
                "user_id": await call(mem, "get_notebook", user_id="sa\x00m"),
                "messages.0.content": await call(
                    mem, "add_messages", user_id="sam", thread_id="t", messages=[{"role": "user", "content": "a\x00"}]
                ),
                "metadata.note": await call(mem, "add_memory", user_id="sam", content="x", metadata={"note": "\x00"}),
                "k": await call(mem, "search_memories", user_id="sam", query="tea", k=0),
            }
            return answers

    for field, (body, error) in asyncio.run(run()).items():
        assert error and body["code"] == "invalid" and body["field"] == field, (field, body)


def test_the_memory_context_prompt_refuses_a_task_over_the_rest_limit(mcp_url, key):
    """Before: the prompt took a 1 MB task; the REST context refuses more than 2,000 characters."""

    async def run():
        async with session(mcp_url, key) as mem:
            await ok(mem, "add_memory", user_id="tia", content="Tia lives in Kyoto")
            fine = await mem.get_prompt("memory_context", {"user_id": "tia", "task": "t" * 2000})
            with pytest.raises(MCPError) as refused:
                await mem.get_prompt("memory_context", {"user_id": "tia", "task": "t" * 2001})
            return fine, refused.value

    fine, refused = asyncio.run(run())
    assert "Tia lives in Kyoto" in fine.messages[0].content.text
    assert refused.data["code"] == "invalid" and refused.data["field"] == "task" and "2000" in refused.data["detail"]


def test_a_slow_call_is_answered_timeout_and_others_are_served_meanwhile(mcp_url, key):
    """One call held up (here: the user's row locked by another transaction, as a long write holds it)
    is answered `timeout` after MCP_CALL_TIMEOUT_SECONDS, with nothing of it kept; another client's
    tools/list and reads are answered while it waits."""
    principal = principal_for_key(key)
    user = memory_user_for(principal, "uma", create=True)
    db = connection.settings_dict
    locker = psycopg.connect(
        dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"], port=db["PORT"] or None
    )
    try:
        locker.execute(f"SELECT id FROM {MemoryUser._meta.db_table} WHERE id = %s FOR UPDATE", [user.pk])

        async def run():
            async with session(mcp_url, key) as slow, session(mcp_url, key) as other:
                started = time.monotonic()
                slow_call = asyncio.create_task(
                    slow.call_tool("add_memory", {"user_id": "uma", "content": "Uma sails on weekends"})
                )
                await asyncio.sleep(0.5)
                listed_at = time.monotonic()
                tools = (await other.list_tools()).tools
                listed = time.monotonic() - listed_at
                notebook = await ok(other, "get_notebook", user_id="uma")
                result = await slow_call
                return started, listed, tools, notebook, result, time.monotonic() - started

        started, listed, tools, notebook, result, took = asyncio.run(run())
    finally:
        locker.rollback()
        locker.close()
    assert tools and listed < 2.0, listed
    assert notebook["version"] == 0
    body = answer(result)
    assert result.is_error and body["code"] == "timeout" and body["limit"] == CALL_TIMEOUT
    assert CALL_TIMEOUT <= took < CALL_TIMEOUT + 5, took
    time.sleep(1.0)  # the abandoned call had its statement cancelled: nothing of it lands later
    assert not Fact.objects.filter(content="Uma sails on weekends").exists()


def test_the_largest_texts_of_the_worst_screening_shapes_answer_with_a_code_and_others_are_served(mcp_url, key):
    """The screens at their largest sizes through MCP (a 1 MB notebook, an 8 KB memory of the shapes that
    were quadratic before): each call answers, stored or refused with a stable code (the screening
    budget's, or the call's time limit), and another client's tools/list is answered meanwhile. Before,
    a 24 KB notebook froze the whole MCP server for every client."""
    from django.conf import settings

    from tests.security.shapes import shape

    notebook = shape("run/digits").text(settings.MAX_NOTEBOOK_BYTES - 16)
    memory = shape("stretch/ignore+'-'").text(settings.MAX_FACT_BYTES - 16)
    codes = {"instruction_like", "blocked", "screening_budget_exceeded", "timeout", "quarantined"}

    async def run():
        async with session(mcp_url, key) as heavy, session(mcp_url, key) as other:
            started = time.monotonic()
            calls = asyncio.gather(
                heavy.call_tool("update_notebook", {"user_id": "nia", "content": notebook, "version": 0}),
                heavy.call_tool("add_memory", {"user_id": "nia", "content": memory}),
            )
            await asyncio.sleep(0.3)
            listed_at = time.monotonic()
            tools = (await other.list_tools()).tools
            listed = time.monotonic() - listed_at
            results = await calls
            return tools, listed, results, time.monotonic() - started

    tools, listed, results, took = asyncio.run(run())
    assert tools and listed < 5.0, listed
    assert took < 50, took
    for result in results:
        body = answer(result)
        assert isinstance(body, dict)
        if result.is_error:
            assert body["code"] in codes, body


@pytest.fixture
def call_threads(monkeypatch):
    """The server's call threads, three of them for the test."""
    from concurrent.futures import ThreadPoolExecutor

    from memory_admin.mcp_server import door

    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="test-call")
    monkeypatch.setattr(door, "_CALLS", pool)
    yield 3
    pool.shutdown(wait=True)


def test_a_burst_of_calls_slower_than_the_limit_never_runs_more_than_the_call_threads(call_threads):
    """Before: a call given up at its limit let its thread run on uncounted, so calls slower than the
    limit in a way no cancelled statement stops (a model's answer, screening) each took one thread and
    one database connection more: 160 such calls in 2 s ran 120 threads and Postgres refused clients."""
    import threading

    from mcp.server.mcpserver.exceptions import ToolError

    from memory_admin.mcp_server.door import _READ, MemoryMCPServer

    server = MemoryMCPServer(name="burst", call_timeout=0.2)
    lock, running, most = threading.Lock(), [0], [0]

    @server.tool_of(_READ)
    def slow() -> dict:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.6)  # work a cancelled statement does not stop
        with lock:
            running[0] -= 1
        return {}

    async def one() -> tuple[str, float]:
        started = time.monotonic()
        try:
            await server.call_tool("slow", {})
        except ToolError as exc:
            return json.loads(str(exc).split(": ", 1)[1])["code"], time.monotonic() - started
        return "answered", time.monotonic() - started

    async def burst():
        waves = []
        for _ in range(4):
            waves.append(asyncio.gather(*[one() for _ in range(5)]))
            await asyncio.sleep(0.25)
        return [answer for wave in await asyncio.gather(*waves) for answer in wave]

    answers = asyncio.run(burst())
    assert len(answers) == 20 and {code for code, _ in answers} == {"timeout"}
    assert max(took for _, took in answers) < 1.0  # each client answered at its own limit
    assert most[0] <= call_threads, most[0]


def test_a_call_that_reaches_its_limit_while_committing_answers_what_it_kept(call_threads):
    """Before: a call whose limit fell after its work, while its transaction committed, was answered
    `timeout` ("nothing of it was kept") and what it wrote was kept all the same."""
    from django.db import transaction

    from memory_admin.mcp_server.door import _ADD, MemoryMCPServer
    from memory_admin.models import Tenant

    server = MemoryMCPServer(name="late", call_timeout=0.3)

    @server.tool_of(_ADD)
    def write() -> dict:
        tenant_create(slug="kept-late")
        transaction.on_commit(lambda: time.sleep(0.8))  # the commit's last part outlasts the limit
        return {"written": True}

    result = asyncio.run(server.call_tool("write", {}))
    assert Tenant.objects.filter(slug="kept-late").exists()
    assert not result.is_error and answer(result) == {"written": True}
