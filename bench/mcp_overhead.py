"""What the MCP door adds to a search: one `search_memories` tool call over MCP streamable http against the
same search over REST (`GET /users/{id}/search`), on one memory user with 200 facts.

Both servers are real processes on 127.0.0.1 on a database of their own (`bench_mcp`): gunicorn (one
worker) and `manage.py mcp --transport http`. Calls alternate REST, MCP, REST, MCP … from one client so
both see the same machine noise; every query is asked once on each before timing (the query-embedding
cache is then warm on both sides, so the difference is the door, not the model). Two MCP figures:
a raw JSON-RPC `tools/call` over a keep-alive connection (what the server adds), and the SDK's own
client (`mcp.Client`, what an agent using the SDK sees, client included).

    .venv/bin/python bench/mcp_overhead.py [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (  # noqa: E402
    PYTHON,
    ROOT,
    Client,
    Server,
    database_url,
    django_env,
    free_port,
    migrate,
    percentile,
    setup_django,
)

QUERIES = [
    "which editor does the user prefer?",
    "where does the user live?",
    "what does the user eat?",
    "which programming languages does the user know?",
    "when is the user's next trip?",
    "what music does the user like?",
    "who does the user work for?",
    "what sport does the user play?",
    "what is the user allergic to?",
    "which books has the user read?",
]
TOPICS = ["editor", "city", "food", "language", "trip", "music", "employer", "sport", "allergy", "book"]


def facts() -> list[dict]:
    out = []
    for i in range(200):
        topic = TOPICS[i % len(TOPICS)]
        out.append(
            {
                "content": f"Note {i} about the user's {topic}: detail number {i * 7919 % 1000} of {topic}",
                "source": "user_stated",
                "key": f"{topic}.{i}",
            }
        )
    return out


class McpHttp:
    """Raw JSON-RPC over one keep-alive connection (the server is stateless, JSON responses)."""

    def __init__(self, port: int, key: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        }
        self.n = 0
        # A session when the server keeps them (MCP_STATELESS=0); a stateless server ignores this.
        init = self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"},
                },
            }
        )
        if init[1]:
            self.headers["Mcp-Session-Id"] = init[1]
            self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message: dict) -> tuple[bytes, str | None]:
        self.conn.request("POST", "/mcp", body=json.dumps(message), headers=self.headers)
        response = self.conn.getresponse()
        raw = response.read()
        if response.status not in (200, 202):
            raise RuntimeError(f"MCP answered {response.status}: {raw[:300]!r}")
        return raw, response.getheader("Mcp-Session-Id")

    def call(self, tool: str, arguments: dict) -> dict:
        self.n += 1
        raw, _ = self.post(
            {"jsonrpc": "2.0", "id": self.n, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        )
        result = json.loads(raw)["result"]
        if result.get("isError"):
            raise RuntimeError(result["content"][0]["text"][:300])
        return result


def start_mcp(url: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "manage.py", "mcp", "--transport", "http", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=django_env(url),
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/mcp")
            conn.getresponse().read()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("manage.py mcp exited at start") from None
            time.sleep(0.5)
    raise RuntimeError("manage.py mcp did not start within 120 s")


def summary(name: str, ms: list[float]) -> str:
    return (
        f"{name:<28} p50 {percentile(ms, 50):7.2f} ms   p90 {percentile(ms, 90):7.2f} ms   "
        f"mean {statistics.fmean(ms):7.2f} ms"
    )


async def sdk_client_times(port: int, key: str, n: int) -> list[float]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    times = []
    async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client:
        for q in QUERIES:
            await client.call_tool("search_memories", {"user_id": "bench-user", "query": q})
        for i in range(n):
            t0 = time.perf_counter()
            result = await client.call_tool("search_memories", {"user_id": "bench-user", "query": QUERIES[i % 10]})
            times.append((time.perf_counter() - t0) * 1000)
            assert not result.is_error
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()

    url = database_url("bench_mcp", fresh=True)
    migrate(url)
    setup_django(url)
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="bench-mcp")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="bench")
    with Server(url, workers=1, threads=4) as server:
        rest = Client(server.port, key)
        for start in (0, 100):
            status, body, _ = rest.request(
                "POST", "/api/v1/users/bench-user/facts/batch", {"facts": facts()[start : start + 100]}
            )
            assert status == 200, body
        mcp_proc, mcp_port = start_mcp(url)
        try:
            mcp = McpHttp(mcp_port, key)
            for q in QUERIES:  # warm both sides: connections, query-embedding cache
                rest.request("GET", "/api/v1/users/bench-user/search", params={"q": q, "k": 10})
                mcp.call("search_memories", {"user_id": "bench-user", "query": q, "k": 10})
            rest_ms, mcp_ms = [], []
            for i in range(args.requests):
                q = QUERIES[i % len(QUERIES)]
                t0 = time.perf_counter()
                status, body, _ = rest.request("GET", "/api/v1/users/bench-user/search", params={"q": q, "k": 10})
                rest_ms.append((time.perf_counter() - t0) * 1000)
                assert status == 200 and body["hits"], body
                t0 = time.perf_counter()
                result = mcp.call("search_memories", {"user_id": "bench-user", "query": q, "k": 10})
                mcp_ms.append((time.perf_counter() - t0) * 1000)
                assert result["structuredContent"]["hits"]
            sdk_ms = asyncio.run(sdk_client_times(mcp_port, key, args.requests))
        finally:
            mcp_proc.send_signal(signal.SIGTERM)
            mcp_proc.wait(timeout=30)

    print(f"search, 200 facts, k=10, {args.requests} calls each, alternating")
    print(summary("REST GET /search", rest_ms))
    print(summary("MCP tools/call (raw)", mcp_ms))
    print(summary("MCP via mcp.Client (SDK)", sdk_ms))
    paired = [m - r for m, r in zip(mcp_ms, rest_ms, strict=True)]
    print(
        f"added by the MCP door: p50 {percentile(mcp_ms, 50) - percentile(rest_ms, 50):+.2f} ms "
        f"(median of paired differences {statistics.median(paired):+.2f} ms); "
        f"SDK client: p50 {percentile(sdk_ms, 50) - percentile(rest_ms, 50):+.2f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
