"""`memory-admin-mcp`: the memory-admin MCP server for a desktop host that starts its servers over stdio.

A thin relay, not a server: each JSON-RPC message the host writes to stdin is posted to the memory-admin
MCP server's streamable HTTP endpoint with the agent key, and each answer is written back to stdout, one
message a line. The desktop needs only this distribution (httpx); the server, its database and its
models stay where they run.

    MEMORY_ADMIN_MCP_URL   the endpoint (default http://127.0.0.1:8765/mcp)
    MEMORY_ADMIN_API_KEY   the agent key (required; it is sent as a bearer token, never logged)

Requests are relayed concurrently (a slow tool call does not hold up a ping or a list); a server that
cannot be reached, or refuses the key, is answered as a JSON-RPC error to the request that met it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

import httpx

DEFAULT_URL = "http://127.0.0.1:8765/mcp"
USER_AGENT = "memory-admin-mcp/0.1.0"
# JSON-RPC error codes of the relay itself (the server's own errors pass through unchanged).
UNREACHABLE = -32001
REFUSED = -32002


class Relay:
    """Posts messages to the endpoint and writes the answers to `out`, one JSON message a line."""

    def __init__(self, url: str, key: str, out: TextIO, *, timeout: float = 300.0, workers: int = 8):
        self.url = url
        self.out = out
        self.http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=10.0),
            headers={
                "Authorization": f"Bearer {key}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
            },
        )
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="relay")
        self.write_lock = threading.Lock()
        self.session_id: str | None = None  # set by a server that keeps sessions (MCP_STATELESS=0)
        self.protocol_version: str | None = None

    def write(self, message: Any) -> None:
        line = json.dumps(message, separators=(",", ":"))  # ASCII: safe whatever the console encoding
        with self.write_lock:
            self.out.write(line + "\n")
            self.out.flush()

    def submit(self, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.write({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            return
        if isinstance(message, dict) and message.get("method") == "initialize":
            self.relay(message)  # the session's first exchange: everything else waits for its answer
        else:
            self.pool.submit(self.relay, message)

    def relay(self, message: Any) -> None:
        request_id = message.get("id") if isinstance(message, dict) and "method" in message else None
        headers = {}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.protocol_version:
            headers["MCP-Protocol-Version"] = self.protocol_version
        try:
            response = self.http.post(self.url, content=json.dumps(message), headers=headers)
        except httpx.HTTPError as exc:
            self.fail(
                request_id, UNREACHABLE, f"memory-admin MCP server unreachable at {self.url}: {type(exc).__name__}"
            )
            return
        if response.headers.get("mcp-session-id"):
            self.session_id = response.headers["mcp-session-id"]
        if response.status_code in (202, 204):
            return
        if response.status_code >= 400 and not _is_jsonrpc(response):
            self.fail(request_id, REFUSED, _refusal(response), {"status": response.status_code})
            return
        for answer in _answers(response):
            if isinstance(answer, dict) and isinstance(answer.get("result"), dict):
                version = answer["result"].get("protocolVersion")
                if version and message.get("method") == "initialize":
                    self.protocol_version = version
            self.write(answer)

    def fail(self, request_id: Any, code: int, text: str, data: dict[str, Any] | None = None) -> None:
        print(f"memory-admin-mcp: {text}", file=sys.stderr, flush=True)
        if request_id is not None:  # a notification gets no answer, even an error
            error = {"code": code, "message": text, **({"data": data} if data else {})}
            self.write({"jsonrpc": "2.0", "id": request_id, "error": error})

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.session_id:
            try:
                self.http.delete(self.url, headers={"Mcp-Session-Id": self.session_id})
            except httpx.HTTPError:
                pass
        self.http.close()


def _is_jsonrpc(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0"


def _refusal(response: httpx.Response) -> str:
    if response.status_code == 401:
        return "memory-admin refused the key (401): set MEMORY_ADMIN_API_KEY to a live agent key"
    try:
        body = response.json()
        detail = body.get("error_description") or body.get("detail") or body.get("error") or ""
    except ValueError:
        detail = ""
    return f"memory-admin MCP server answered {response.status_code}" + (f": {detail}" if detail else "")


def _answers(response: httpx.Response) -> list[Any]:
    """The JSON-RPC messages of an answer: a JSON body (one message or a batch), or server-sent events."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        messages, data = [], []
        for line in response.text.splitlines() + [""]:
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                messages.append(json.loads("\n".join(data)))
                data = []
        return messages
    if not response.content:
        return []
    body = response.json()
    return body if isinstance(body, list) else [body]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="memory-admin-mcp", description="Relay MCP over stdio to a memory-admin MCP server over HTTP."
    )
    parser.add_argument("--url", default=os.environ.get("MEMORY_ADMIN_MCP_URL", DEFAULT_URL))
    args = parser.parse_args(argv)
    key = os.environ.get("MEMORY_ADMIN_API_KEY", "")
    if not key:
        print("memory-admin-mcp: MEMORY_ADMIN_API_KEY is not set (an agent key from the server).", file=sys.stderr)
        return 2
    relay = Relay(args.url, key, sys.stdout)
    try:
        for line in sys.stdin:
            if line.strip():
                relay.submit(line)
    except KeyboardInterrupt:
        pass
    finally:
        relay.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
