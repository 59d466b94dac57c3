"""A real OpenAI-compatible HTTP server for tests (http.server on 127.0.0.1, in a thread).

It answers POST /v1/chat/completions like the real API (JSON body, `choices`, `usage`), from a
responder that reads the transcript, or from fixtures set by the test. A test can script failures
per call: "500", "429", "stall" (longer than any client timeout), "slow:<seconds>", "badjson",
"badschema". It counts calls, so tests can assert exactly how many the pipeline made.

Hostile modes, for tests that what a provider says is never stored or logged:
- "401key": 401 whose error message quotes the API key the client sent (as some providers do);
- "400prompt": 400 whose error message quotes the request's prompt;
- "schema_secret": 200, an answer whose envelope breaks the schema with a value quoting `fake.planted`
  (a secret the test chose), so pydantic's message would quote it;
- "schema_quote": 200, an answer whose envelope breaks the schema by echoing the prompt back;
- "usage_negative" / "usage_huge": the normal answer, with negative / absurdly large usage counts.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_LINE = re.compile(r"^\[(\d+)\] (\w+) \([^)]*\): (.*)$")


def default_extraction(prompt: str) -> dict[str, Any]:
    """Every user line that says "I ..." becomes one fact about the user (deterministic)."""
    facts = []
    for line in prompt.splitlines():
        m = _LINE.match(line)
        if not m or m.group(2) != "user":
            continue
        text = m.group(3).strip()
        if not text.lower().startswith(("i ", "i'm ", "my ")):
            continue
        facts.append(
            {
                "content": "The user said: " + text.rstrip(".") + ".",
                "category": "other",
                "kind": "fact",
                "confidence": 0.9,
                "key": None,
                "message": int(m.group(1)),
            }
        )
    return {"facts": facts, "user_context": []}


def default_summary(prompt: str) -> dict[str, Any]:
    return {"summary": f"A conversation of {len(prompt.splitlines())} lines.", "outcome": "success"}


def default_judge(prompt: str) -> dict[str, Any]:
    return {"contradictory": False, "reason": "the fake judge never objects"}


def default_guard(prompt: str) -> dict[str, Any]:
    return {"instruction_like": False, "reason": "the fake guard never objects"}


class FakeOpenAI:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.script: list[str] = []
        self.layer_script: dict[str, list[str]] = {}
        self.extraction: Callable[[str], dict[str, Any]] = default_extraction
        self.summary: Callable[[str], dict[str, Any]] = default_summary
        self.judge: Callable[[str], dict[str, Any]] = default_judge
        self.guard: Callable[[str], dict[str, Any]] = default_guard
        self.stall_seconds = 30.0
        # A secret the hostile modes quote ("schema_secret").
        self.planted = "sk-proj-" + "Pl4ntedS3cretValue0123456789abcd"
        # Persistent failures for prompts containing a substring: {substring: [modes, cycled]}.
        self.matching: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # --- control -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.script.clear()
            self.layer_script.clear()
            self.matching.clear()
        self.extraction = default_extraction
        self.summary = default_summary
        self.judge = default_judge
        self.guard = default_guard

    def fail_next(self, *modes: str, layer: str | None = None) -> None:
        """The next calls fail with `modes` in turn; with `layer`, only the next calls of that layer
        (extraction, judge, guard, summary), whatever other calls come first."""
        with self._lock:
            (self.layer_script.setdefault(layer, []) if layer else self.script).extend(modes)

    def fail_matching(self, substring: str, *modes: str) -> None:
        """Every call whose prompt contains `substring` fails with the given modes in turn (cycled)."""
        with self._lock:
            self.matching[substring] = list(modes)

    def count(self, layer: str | None = None) -> int:
        with self._lock:
            return sum(1 for c in self.calls if layer is None or c["layer"] == layer)

    # --- serving -------------------------------------------------------------------------------

    def _next_mode(self, prompt: str, layer: str) -> str:
        with self._lock:
            for substring, modes in self.matching.items():
                if substring in prompt:
                    mode = modes.pop(0)
                    modes.append(mode)
                    return mode
            if self.layer_script.get(layer):
                return self.layer_script[layer].pop(0)
            return self.script.pop(0) if self.script else "ok"

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): exactly what a stalled server sees

            def _embeddings(self, body: dict) -> None:
                """Deterministic unit vectors of the asked size: each word (lower-cased) adds its own
                hash-seeded direction, so texts sharing words are near and the same text gets the same vector."""
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with fake._lock:
                    fake.calls.extend({"layer": "embeddings", "prompt": t, "at": time.time()} for t in texts)
                data = []
                for i, text in enumerate(texts):
                    vector = [0.0] * int(body.get("dimensions") or 1536)
                    for word in re.findall(r"\w+", text.lower()):
                        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
                        for j in range(8):
                            vector[(seed >> (j * 7)) % len(vector)] += 1.0 if (seed >> (56 + j)) & 1 else -1.0
                    norm = sum(x * x for x in vector) ** 0.5 or 1.0
                    data.append({"object": "embedding", "index": i, "embedding": [x / norm for x in vector]})
                usage = {"prompt_tokens": 1, "total_tokens": 1}
                self._send(200, {"object": "list", "data": data, "model": body.get("model"), "usage": usage})

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/v1/embeddings":
                    self._embeddings(body)
                    return
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": "not found"}})
                    return
                system = body["messages"][0]["content"]
                prompt = body["messages"][-1]["content"]
                layer = (
                    "summary"
                    if system.startswith("You summarise")
                    else "judge"
                    if system.startswith("You judge")
                    else "guard"
                    if system.startswith("You screen")
                    else "extraction"
                )
                mode = fake._next_mode(prompt, layer)
                record = {
                    "layer": layer,
                    "mode": mode,
                    "prompt": prompt,
                    "system": system,
                    "model": body.get("model"),
                    "at": time.time(),
                }
                with fake._lock:
                    fake.calls.append(record)
                if mode == "500":
                    self._send(500, {"error": {"message": "upstream exploded", "type": "server_error"}})
                    return
                if mode == "429":
                    self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": "0"})
                    return
                if mode == "401key":
                    key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    message = f"Incorrect API key provided: {key}. You can find your API key at the dashboard."
                    self._send(401, {"error": {"message": message, "type": "invalid_request_error"}})
                    return
                if mode == "400prompt":
                    message = f"Invalid request: the message {prompt!r} is not allowed."
                    self._send(400, {"error": {"message": message, "type": "invalid_request_error"}})
                    return
                if mode == "stall":
                    time.sleep(fake.stall_seconds)
                if mode.startswith("slow:"):
                    time.sleep(float(mode.split(":", 1)[1]))
                if mode == "badjson":
                    content = '{"facts": [ {"content": "unterminated'
                elif mode == "badschema":
                    content = json.dumps({"facts": "not a list"})
                elif mode == "schema_secret":
                    content = json.dumps({"facts": f"token {fake.planted}", "summary": [fake.planted]})
                elif mode == "schema_quote":
                    content = json.dumps({"facts": {"quoted": prompt}, "summary": {"quoted": prompt}})
                else:
                    if layer == "judge":
                        answer = fake.judge(prompt)
                    elif layer == "guard":
                        answer = fake.guard(prompt)
                    else:
                        answer = fake.summary(prompt) if layer == "summary" else fake.extraction(prompt)
                    content = json.dumps(answer)
                record["completion"] = content  # what the client receives (benchmarks count its tokens)
                usage = {
                    "prompt_tokens": len(prompt) // 4 + 50,
                    "completion_tokens": len(content) // 4,
                    "total_tokens": len(prompt) // 4 + 50 + len(content) // 4,
                }
                if mode == "usage_negative":
                    usage = {"prompt_tokens": -7, "completion_tokens": -1000, "total_tokens": -1007}
                elif mode == "usage_huge":
                    usage = {"prompt_tokens": 10**15, "completion_tokens": 2**63, "total_tokens": 10**19}
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(fake.calls)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model"),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                        "usage": usage,
                    },
                )

        return Handler
