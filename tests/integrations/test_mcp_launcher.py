"""The desktop door: `memory-admin-mcp` (the client distribution's stdio launcher) installed into a fresh
virtualenv holding only the client, started by the MCP SDK's own stdio client from a desktop-style
config, relaying to a live `manage.py mcp --transport http` on the test database."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from memory_admin.models import Fact
from memory_admin.services.tenants import tenant_create
from tests.integrations.conftest import ROOT, free_port, server_env, stop, wait_until_up
from tests.integrations.test_mcp import TOOLS, answer, call, ok

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SECRET = "ghp_" + "Q7w8E9r0T1" * 4


@pytest.fixture(scope="module")
def mcp_http(django_db_setup):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "mcp", "--transport", "http", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/mcp", proc, "manage.py mcp")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory):
    """A virtualenv with `pip install ./clients/python` and nothing else (as a desktop would hold)."""
    root = tmp_path_factory.mktemp("desktop")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    source = shutil.copytree(
        ROOT / "clients" / "python",
        root / "client-src",
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    return venv


def desktop_config(venv, url: str, key: str) -> dict:
    """The config the client README shows, filled in."""
    text = json.dumps(
        {
            "mcpServers": {
                "memory-admin": {
                    "command": str(venv / "bin" / "memory-admin-mcp"),
                    "env": {"MEMORY_ADMIN_MCP_URL": url, "MEMORY_ADMIN_API_KEY": key},
                }
            }
        }
    )
    return json.loads(text)["mcpServers"]["memory-admin"]


def launched(server: dict) -> Client:
    env = {"PATH": "/usr/bin:/bin", **server["env"]}  # nothing of this test's environment leaks in
    return Client(StdioServerParameters(command=server["command"], args=server.get("args", []), env=env))


def test_the_venv_holds_the_client_and_not_the_server_stack(client_venv):
    listed = subprocess.run(
        [str(client_venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = {p["name"].lower() for p in json.loads(listed)}
    assert "memory-admin-client" in names and "httpx" in names
    assert not names & {"django", "mcp", "psycopg", "celery", "torch", "pgserver", "django-ninja"}, names


def test_a_desktop_session_through_the_launcher(client_venv, mcp_http, make_key):
    key = make_key(tenant_create(slug="desktop"))
    server = desktop_config(client_venv, mcp_http, key)

    async def run():
        async with launched(server) as mem:
            assert TOOLS <= {tool.name for tool in (await mem.list_tools()).tools}
            saved = await ok(mem, "add_memory", user_id="vic", content="Vic prefers neovim over VS Code")
            assert saved["outcome"] == "created"
            hits = (await ok(mem, "search_memories", user_id="vic", query="which editor?"))["hits"]
            assert hits[0]["id"] == saved["fact"]["id"]
            blocked, error = await call(mem, "add_memory", user_id="vic", content=f"Vic's token is {SECRET}")
            assert error and blocked["code"] == "blocked" and blocked["block_id"]
            # Several calls at once: the launcher relays them concurrently and answers each its own.
            many = await asyncio.gather(*(mem.call_tool("get_notebook", {"user_id": "vic"}) for _ in range(5)))
            assert all(answer(r)["user_id"] == "vic" for r in many)
            prompt = await mem.get_prompt("memory_context", {"user_id": "vic", "task": "set up my editor"})
            assert "neovim" in prompt.messages[0].content.text

    asyncio.run(run())
    assert Fact.objects.filter(content="Vic prefers neovim over VS Code", status="active").count() == 1
    assert not Fact.objects.filter(content__contains=SECRET[4:]).exists()


def _refusal(server: dict) -> MCPError:
    """The protocol error a host meets when it connects (the SDK raises it inside a task group)."""

    async def connect():
        async with launched(server) as mem:
            await mem.list_tools()

    try:
        asyncio.run(connect())
    except BaseException as exc:  # noqa: BLE001 - an ExceptionGroup around the MCPError
        pending = [exc]
        while pending:
            error = pending.pop()
            if isinstance(error, MCPError):
                return error
            pending.extend(getattr(error, "exceptions", ()))
            pending.extend(e for e in (error.__cause__, error.__context__) if e is not None)
        raise
    raise AssertionError("the session opened")


def test_the_launcher_reports_a_bad_key_and_an_unreachable_server(client_venv, mcp_http):
    assert "401" in _refusal(desktop_config(client_venv, mcp_http, "mem_not-a-real-key")).message
    assert "unreachable" in _refusal(desktop_config(client_venv, "http://127.0.0.1:9/mcp", "mem_x")).message
    no_key = subprocess.run(
        [str(client_venv / "bin" / "memory-admin-mcp")],
        input="",
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert no_key.returncode == 2 and "MEMORY_ADMIN_API_KEY" in no_key.stderr and no_key.stdout == ""
