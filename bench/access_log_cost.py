"""What the access log costs the read path: search and context p50 with and without it, same data,
alternated runs.

    python bench/access_log_cost.py --before /work/main [--rounds 3] [--requests 150]

One database of its own (`bench_access_log`), migrated by this tree (the `before` tree ignores the
access-log table and the new key columns), one memory user with 200 LoCoMo dev turns written through
the API. Then, `--rounds` times, a gunicorn (1 worker, 4 threads) from each tree in turn (the order
flipped every round): 20 warm-up requests, then `--requests` searches (k=10) and as many context
blocks (budget 2000), one keep-alive client, LoCoMo questions as queries (the same ones for both
trees). Each read of this tree adds its facts to the access log (written by the background flush);
the figures are client-side p50 per run, and the median of the runs per tree.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import ROOT, Client, Server, database_url, migrate, percentile, setup_django  # noqa: E402

DATA = Path("/work/shared/eval/locomo-dev")


def seed(url: str) -> str:
    """The tenant, its key and the user's facts; returns the raw key."""
    setup_django(url)
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="bench")
    _, raw = api_key_create(tenant_id=tenant.pk, agent_name="bench")
    turns = [json.loads(line) for line in (DATA / "locomo_dev_turns.jsonl").open()]
    facts = [t["memory_text"] for t in turns if t["sample_id"] == "conv-26" and len(t["memory_text"]) > 30][:200]
    with Server(url, workers=1, threads=4, cwd=ROOT, PYTHONPATH=str(ROOT)) as server:
        client = Client(server.port, raw)
        for start in range(0, len(facts), 50):
            batch = [{"content": text, "source": "user_stated"} for text in facts[start : start + 50]]
            status, body, _ = client.request("POST", "/api/v1/users/conv-26/facts/batch", {"facts": batch})
            assert status < 300, body
    return raw


def run(url: str, tree: Path, raw: str, queries: list[str]) -> dict[str, float]:
    with Server(url, workers=1, threads=4, cwd=tree, PYTHONPATH=str(tree)) as server:
        client = Client(server.port, raw)
        for q in queries[:20]:
            client.request("GET", "/api/v1/users/conv-26/search", params={"q": q, "k": 10})
        out = {}
        for route, param, extra in (("search", "q", {"k": 10}), ("context", "task", {"budget_tokens": 2000})):
            times = []
            for q in queries:
                started = time.perf_counter()
                status, _, _ = client.request("GET", f"/api/v1/users/conv-26/{route}", params={param: q, **extra})
                times.append((time.perf_counter() - started) * 1000)
                assert status == 200, status
            out[route] = percentile(times, 50)
        time.sleep(1.5)  # the access-count flush of the last reads runs before the server stops
        return out


def accumulate_cost(reads: int = 20000) -> float:
    """Microseconds of one `record_access` of 10 facts with a key (the accumulator, no statement)."""
    import uuid

    from django.conf import settings

    from memory_admin.selectors.access import Principal
    from memory_admin.services import access_counts

    settings.ACCESS_COUNT_FLUSH_SECONDS = 3600  # accumulate only: the flush is not the request's
    principal = Principal(tenant_id=1, role="agent", actor="agent:bench", api_key_id=1)
    ids = [uuid.uuid4() for _ in range(200)]
    started = time.perf_counter()
    for n in range(reads):
        access_counts.record_access(ids[n % 190 : n % 190 + 10], principal, "search")
    elapsed = (time.perf_counter() - started) / reads * 1e6
    access_counts._pending.clear()
    access_counts._log.clear()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="the tree without the access log")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--only-accumulator", action="store_true", help="print the in-process figure only")
    args = parser.parse_args()
    if args.only_accumulator:
        setup_django(database_url("bench_access_log", fresh=False))
        print(f"in process, what a read adds to the request: {accumulate_cost():.1f} µs per read of 10 facts")
        return
    url = database_url("bench_access_log", fresh=True)
    migrate(url)
    raw = seed(url)
    questions = [json.loads(line)["question"] for line in (DATA / "locomo_dev_qa.jsonl").open()]
    queries = list(dict.fromkeys(questions))[: args.requests]
    trees = {"before": args.before.resolve(), "after": ROOT}
    results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
        for name in order:
            figures = run(url, trees[name], raw, queries)
            results[name].append(figures)
            print(
                f"round {round_ + 1} {name:>6}: search p50 {figures['search']:.1f} ms, "
                f"context p50 {figures['context']:.1f} ms",
                flush=True,
            )
    from memory_admin.models import FactRead

    print(f"access-log rows written by the after runs: {FactRead.objects.count()}")
    print(f"in process, what a read adds to the request: {accumulate_cost():.1f} µs per read of 10 facts")
    for route in ("search", "context"):
        before = statistics.median(r[route] for r in results["before"])
        after = statistics.median(r[route] for r in results["after"])
        print(
            f"{route:>8} p50, median of {args.rounds} runs: before {before:.1f} ms, after {after:.1f} ms "
            f"({(after - before) / before * 100:+.1f} %)"
        )


if __name__ == "__main__":
    main()
