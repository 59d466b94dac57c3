"""Where a /search request spends its time outside the search itself.

    python bench/search_overhead.py [--requests 300] [--profile 20]

One memory user with 40 LoCoMo facts in a database of its own (`bench_search_overhead`). Queries are
asked once first, so the query-embedding LRU answers them afterwards: what is left is the request.

1. gunicorn (1 worker, 4 threads, gthread) on 127.0.0.1, one keep-alive client, alternating
   `GET /health/live` (no key, no database: the HTTP and middleware floor) and `GET /search?k=10`:
   client p50 against the server's own figures (Server-Timing: the search, `view_ms` the whole API
   view) — the difference is HTTP, gunicorn and Django's middleware.
2. In this process, the WSGI application called exactly as gunicorn calls it (an environ, a
   start_response): SQL statements per request, Python CPU time per request, and a cProfile of
   `--profile` requests (functions by own time, and the middleware/view split by cumulative time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Client, Server, database_url, migrate, percentile, server_timing, setup_django  # noqa: E402

DATA = Path("/work/shared/eval/locomo-dev")


def texts(n_facts: int) -> tuple[list[str], list[str]]:
    turns = [json.loads(line)["memory_text"] for line in (DATA / "locomo_dev_turns.jsonl").open()]
    questions = [json.loads(line)["question"] for line in (DATA / "locomo_dev_qa.jsonl").open()]
    facts = [t for t in dict.fromkeys(turns) if len(t) > 30][:n_facts]
    return facts, list(dict.fromkeys(questions))


def wsgi_call(application, method: str, path: str, key: str | None, query: dict | None = None, body=None):
    """One request through the WSGI application as gunicorn hands it over; (status, headers, body)."""
    raw = json.dumps(body).encode() if body is not None else b""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": urlencode(query or {}),
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if key:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    captured = {}

    def start_response(status, headers, exc_info=None):
        captured["status"], captured["headers"] = int(status.split()[0]), dict(headers)

    result = application(environ, start_response)
    try:
        payload = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    return captured["status"], captured["headers"], payload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--profile", type=int, default=20)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--no-http", action="store_true", help="only the in-process part")
    args = parser.parse_args()

    facts, questions = texts(40)
    queries = questions[: args.queries]
    url = database_url("bench_search_overhead", fresh=True)
    migrate(url)
    setup_django(url)
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create
    from memory_admin.wsgi import application

    tenant = tenant_create(slug="overhead")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="overhead-bench")
    for text in facts:
        status, _, body = wsgi_call(
            application, "POST", "/api/v1/users/u0/facts", key, body={"content": text, "source": "user_stated"}
        )
        assert status in (200, 201), body
    search_path = "/api/v1/users/u0/search"
    print(f"load average at start: {os.getloadavg()}")

    if not args.no_http:
        http_phase(url, key, queries, search_path, args.requests)
    in_process(application, key, queries, search_path, args)
    return 0


def http_phase(url: str, key: str, queries: list[str], search_path: str, requests: int) -> None:
    with Server(url, workers=1, threads=4) as server:
        client = Client(server.port, key)
        for q in queries:  # every query embedded once: the LRU answers from here on
            client.request("GET", search_path, params={"q": q, "k": 10})
        live, search, view, own = [], [], [], []
        for i in range(requests):
            t0 = time.perf_counter()
            status, _, _ = client.request("GET", "/api/v1/health/live")
            live.append((time.perf_counter() - t0) * 1000)
            assert status == 200
            t0 = time.perf_counter()
            status, body, headers = client.request("GET", search_path, params={"q": queries[i % len(queries)], "k": 10})
            search.append((time.perf_counter() - t0) * 1000)
            assert status == 200, body
            timing = server_timing(headers)
            view.append(timing["view_ms"] - timing.get("embed_ms", 0.0))
            own.append(timing.get("server_ms_excluding_embed", float("nan")))
    p = {name: percentile(values, 50) for name, values in (("live", live), ("search", search), ("view", view))}
    p["own"] = percentile(own, 50)
    print(f"\nHTTP, gunicorn 1x4, {requests} of each, p50 (load average {os.getloadavg()[0]:.1f}):")
    print(f"  GET /health/live (floor: HTTP + middleware)   {p['live']:7.2f} ms")
    print(f"  GET /search k=10, client                      {p['search']:7.2f} ms")
    print(f"    server: API view excluding embedding        {p['view']:7.2f} ms")
    print(f"    server: the search's own (excl. embedding)  {p['own']:7.2f} ms")
    print(f"    outside the view (HTTP, gunicorn, middleware) {p['search'] - p['view']:5.2f} ms")


def round_trips(call, *args) -> int:
    """Statements psycopg sends during call(*args) (Django's health check bypasses the ORM's cursor)."""
    import psycopg

    sent = []
    original = psycopg.Cursor.execute

    def execute(self, query, *a, **kw):
        sent.append(query)
        return original(self, query, *a, **kw)

    psycopg.Cursor.execute = execute
    try:
        call(*args)
    finally:
        psycopg.Cursor.execute = original
    return len(sent)


def in_process(application, key: str, queries: list[str], search_path: str, args) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def one(q: str):
        status, _, payload = wsgi_call(application, "GET", search_path, key, {"q": q, "k": 10})
        assert status == 200, payload

    for q in queries:
        one(q)
    with CaptureQueriesContext(connection) as captured:
        one(queries[0])
    print(f"\nin process, one search request: {len(captured.captured_queries)} SQL statements through the ORM's")
    print(f"cursor, {round_trips(one, queries[0])} round trips to Postgres (a health check's SELECT 1 included)")
    for statement in captured.captured_queries:
        print(f"  {statement['time']}s  {statement['sql'][:100]}")
    cpu, wall = [], []
    for i in range(args.requests):
        c0, w0 = time.process_time(), time.perf_counter()
        one(queries[i % len(queries)])
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
    c0 = time.process_time()
    for _ in range(args.requests):
        wsgi_call(application, "GET", "/api/v1/health/live", None)
    live_cpu = (time.process_time() - c0) * 1000 / args.requests
    print(
        f"search request in process: CPU p50 {percentile(cpu, 50):.2f} ms, wall p50 {percentile(wall, 50):.2f} ms;"
        f" /health/live CPU {live_cpu:.2f} ms a request"
    )
    profiler = cProfile.Profile(time.process_time)  # CPU time: waiting for Postgres is not counted
    profiler.enable()
    for i in range(args.profile):
        one(queries[i % len(queries)])
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(45)
    print(out.getvalue())


if __name__ == "__main__":
    sys.exit(main())
