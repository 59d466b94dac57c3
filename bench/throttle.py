"""What the API rate limit costs: the counting statement alone, and GET requests through gunicorn with
the throttle off and on (the counting upsert is the only difference).

    .venv/bin/python bench/throttle.py                # about a minute
    .venv/bin/python bench/throttle.py --requests 400 # quicker
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from _harness import Client, Server, database_url, migrate, percentile, setup_django


def statement_cost(n: int, threads: int) -> tuple[float, float]:
    """Median µs of one counting upsert: one thread, then `threads` threads on the same bucket."""
    from django.db import connection

    from memory_admin.services.throttle import _hit

    def run(count: int) -> list[float]:
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            _hit("bench:statement", 60)
            out.append((time.perf_counter() - t0) * 1e6)
        connection.close()
        return out

    single = run(n)
    with ThreadPoolExecutor(threads) as pool:
        contended = [x for part in pool.map(run, [n // threads] * threads) for x in part]
    return statistics.median(single), statistics.median(contended)


def drive(port: int, key: str, clients: int, requests: int) -> tuple[float, float, float]:
    def worker(_):
        client, out = Client(port, key), []
        for _ in range(requests // clients):
            t0 = time.perf_counter()
            status, _, _ = client.request("GET", "/api/v1/skills")
            assert status == 200, status
            out.append((time.perf_counter() - t0) * 1000)
        return out

    t0 = time.time()
    with ThreadPoolExecutor(clients) as pool:
        lat = [x for part in pool.map(worker, range(clients)) for x in part]
    return percentile(lat, 50), percentile(lat, 95), len(lat) / (time.time() - t0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1600)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    url = database_url("bench_throttle", fresh=True)
    migrate(url)
    setup_django(url)
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="throttle")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="throttle-bench")

    single, contended = statement_cost(2000, args.clients)
    print(
        f"counting upsert alone: median {single:.0f} µs (1 thread), {contended:.0f} µs ({args.clients} threads, "
        f"same key)",
        flush=True,
    )
    results: dict[str, list[tuple[float, float, float]]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for mode, limit in (("off", "0"), ("on", "1000000000")):
            with Server(url, API_RATE_LIMIT=limit) as server:
                drive(server.port, key, args.clients, 200)  # warm up
                results[mode].append(drive(server.port, key, args.clients, args.requests))
    for mode, runs in results.items():
        p50 = statistics.median(r[0] for r in runs)
        p95 = statistics.median(r[1] for r in runs)
        rps = statistics.median(r[2] for r in runs)
        print(
            f"GET /skills, throttle {mode:>3}: p50 {p50:5.2f} ms  p95 {p95:5.2f} ms  {rps:6.0f} req/s "
            f"({args.clients} clients, {args.requests} requests, median of {args.rounds} rounds)",
            flush=True,
        )


if __name__ == "__main__":
    main()
