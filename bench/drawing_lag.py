"""Does search depend on how far entity drawing has caught up? LoCoMo dev through the real HTTP API.

Every conversation is written turn by turn (retrieval_locomo.py's ingest) with no worker running, so no
fact's entities are drawn: the state right after a burst of writes. Every question of categories 1-4 is
asked through /search; then drawing is drained (`manage.py entities_backfill`, the drawing code the
worker runs) and the questions are asked again. Printed: R@10 per category before and after, and the gap.

`--base DIR` measures another tree (a checkout of an older commit, say) on the same database, in turns
with this one: its R@10 undrawn and drawn, and the search latency of both on a small user (the first
`--small` turns of one conversation, drawn), alternated `--rounds` times, p50 over each tree's searches:
the client's time and the server's (Server-Timing `server_ms_excluding_embed`).

    .venv/bin/python bench/drawing_lag.py [--base /tmp/drawing-base] [--rounds 4]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import PYTHON, ROOT, Client, Server, database_url, django_env, migrate, server_timing, setup_django
from retrieval_locomo import CATEGORIES, bench_keys, evaluate, ingest, ingest_or_reuse, load

SMALL_USER = "small-user"


def r10(per_cat: dict[int, list[dict]]) -> dict[str, float]:
    out = {CATEGORIES[c]: sum(r["R@10"] for r in rows) / len(rows) for c, rows in sorted(per_cat.items())}
    pooled = [r for rows in per_cat.values() for r in rows]
    out["pooled"] = sum(r["R@10"] for r in pooled) / len(pooled)
    return out


def server(url: str, tree: Path) -> Server:
    return Server(url, cwd=tree, PYTHONPATH=str(tree))


def latencies(port: int, key: str, questions: list[str], repeat: int) -> tuple[list[float], list[float]]:
    client = Client(port, key)
    client_ms, server_ms = [], []
    for _ in range(repeat):
        for q in questions:
            t0 = time.perf_counter()
            status, body, headers = client.request("GET", f"/api/v1/users/{SMALL_USER}/search", params={"q": q})
            client_ms.append((time.perf_counter() - t0) * 1000)
            assert status == 200, body
            server_ms.append(server_timing(headers).get("server_ms_excluding_embed", float("nan")))
    return client_ms, server_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--db", default="drawing_lag")
    parser.add_argument("--base", type=Path, help="another tree to measure on the same data, in turns")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--small", type=int, default=40, help="facts of the small user (latency)")
    parser.add_argument("--rounds", type=int, default=4, help="alternated latency rounds per tree")
    args = parser.parse_args()

    turns, questions = load(args.data)
    url = database_url(args.db, fresh=True)
    migrate(url)
    setup_django(url)
    key, admin_key = bench_keys()
    trees = {"this tree": ROOT, **({f"base ({args.base})": args.base.resolve()} if args.base else {})}
    with server(url, ROOT) as srv:
        dia_ids_of = ingest_or_reuse(srv.port, key, admin_key, turns, Path(f"/tmp/{args.db}_state.json"), False)
        first = [t for t in turns if t["sample_id"] == turns[0]["sample_id"]][: args.small]
        ingest(srv.port, key, SMALL_USER, first)
    figures: dict[tuple[str, str], dict[str, float]] = {}
    for name, tree in trees.items():  # nothing drawn yet: no worker ran
        with server(url, tree) as srv:
            figures[name, "undrawn"] = r10(evaluate(srv.port, key, questions, dia_ids_of, args.k)[0])
    t0 = time.time()
    subprocess.run(
        [PYTHON, "manage.py", "entities_backfill", "--no-progress"], cwd=ROOT, env=django_env(url), check=True
    )
    print(f"entities drawn in {time.time() - t0:.0f} s")
    for name, tree in trees.items():
        with server(url, tree) as srv:
            figures[name, "drawn"] = r10(evaluate(srv.port, key, questions, dia_ids_of, args.k)[0])

    columns = [*CATEGORIES.values(), "pooled"]
    print(f"\nR@10, {len(questions)} questions (categories 1-4 with evidence)")
    print(f"{'tree':<40}{'state':<10}" + "".join(f"{c:>13}" for c in columns))
    for name in trees:
        for state in ("undrawn", "drawn"):
            row = figures[name, state]
            print(f"{name:<40}{state:<10}" + "".join(f"{row[c]:>13.3f}" for c in columns))
        gap = figures[name, "drawn"]["pooled"] - figures[name, "undrawn"]["pooled"]
        print(f"{name:<40}{'gap':<10}{'':>{13 * (len(columns) - 1)}}{gap:>13.3f}")

    small_questions = [q["question"] for q in questions if q["sample_id"] == turns[0]["sample_id"]][:50]
    samples: dict[str, tuple[list[float], list[float]]] = collections.defaultdict(lambda: ([], []))
    for round_ in range(args.rounds):
        for name, tree in trees.items() if round_ % 2 == 0 else reversed(trees.items()):
            with server(url, tree) as srv:
                latencies(srv.port, key, small_questions[:10], 1)  # warm-up
                client_ms, server_ms = latencies(srv.port, key, small_questions, 2)
            samples[name][0].extend(client_ms)
            samples[name][1].extend(server_ms)
            print(
                f"round {round_ + 1} {name}: search p50 client {statistics.median(client_ms):.2f} ms, "
                f"server excluding embedding {statistics.median(server_ms):.2f} ms"
            )
    print(f"\nsearch on a user of {args.small} facts (drawn), p50 over {args.rounds} alternated rounds")
    for name, (client_ms, server_ms) in samples.items():
        print(
            f"{name:<40} client {statistics.median(client_ms):.2f} ms, "
            f"server excluding embedding {statistics.median(server_ms):.2f} ms ({len(client_ms)} searches)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
