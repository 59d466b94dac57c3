"""Where search, entity search and the context block spend their time at 1.1M facts, in process.

    python bench/scale_profile.py --db scale1m_copy [--queries 40] [--explain 5] [--profile 30]

Against a database `bench/scale.py --entities` built (never the original: use a copy, see
bench/README.md). The queries are `scale.py`'s (random words; for the entity phase, one of the user's
entity names plus 1-3 words), their vectors embedded once beforehand, so nothing here times the
embedding. Prints:

1. per kind (search, search naming an entity, context at 2,000 tokens): wall and CPU time p50 of the
   selector in process, and the statements it runs;
2. `EXPLAIN (ANALYZE, BUFFERS)` of the exact statements of `--explain` requests: planning and execution
   time p50 per statement, and the plan nodes that cost most in the first one;
3. a cProfile of `--profile` context blocks (functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import database_url, setup_django  # noqa: E402
from scale import entity_names, vocabulary  # noqa: E402


def requests(n: int, users: int, seed: int) -> dict[str, list[tuple[int, str]]]:
    """(user index, text) per kind, as scale.py asks them."""
    vocab = vocabulary(random.Random(3))
    rng = random.Random(seed)
    out: dict[str, list[tuple[int, str]]] = {"search": [], "search_entity": [], "context": []}
    for _ in range(n):
        out["search"].append((rng.randrange(users), " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 5)))))
        index = rng.randrange(users)
        name, _ = rng.choice(entity_names(index, vocab))
        out["search_entity"].append((index, f"{name} " + " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 3)))))
        out["context"].append((rng.randrange(users), " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 5)))))
    return out


class Recorder:
    """Every statement a request runs, with its parameters as sent (Django's execute wrapper)."""

    def __init__(self):
        self.statements: list[tuple[str, object]] = []

    def __call__(self, execute, sql, params, many, context):
        self.statements.append((sql, params))
        return execute(sql, params, many, context)


def principal_for(tenant_id: int):
    from memory_admin.selectors.access import Principal

    return Principal(tenant_id=tenant_id, role="agent", actor="agent:scale-profile", agent_id=1, api_key_id=1)


def run(kind: str, principal, user, text: str, vector: list[float]):
    from memory_admin.retrieval import fact_search
    from memory_admin.retrieval.context import context_block

    if kind == "context":
        from memory_admin.embeddings import embed_query

        embed_query(text)  # the LRU holds it: the block's own call is free
        return context_block(principal=principal, memory_user=user, task=text, budget_tokens=2000, record=False)
    return fact_search(principal=principal, memory_user=user, query=text, k=10, query_vector=vector, record=False)


def explain(sql: str, params) -> tuple[float, float, dict]:
    from memory_admin.db.cursors import vector_cursor

    with vector_cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = plan[0] if isinstance(plan, list) else json.loads(plan)[0]
    return plan["Planning Time"], plan["Execution Time"], plan["Plan"]


def heavy_nodes(node: dict, out: list, depth: int = 0) -> list:
    total = node.get("Actual Total Time", 0.0) * node.get("Actual Loops", 1)
    out.append((total, depth, node["Node Type"], node.get("Index Name") or node.get("Relation Name") or "", node))
    for child in node.get("Plans", []):
        heavy_nodes(child, out, depth + 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--explain", type=int, default=5)
    parser.add_argument("--profile", type=int, default=30)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--sort", default="tottime", help="the cProfile's order: tottime (own time) or cumulative")
    args = parser.parse_args()
    setup_django(database_url(args.db, fresh=False))
    from django.db import connection

    from memory_admin.embeddings import embed_query
    from memory_admin.models import MemoryUser, Tenant

    tenant = Tenant.objects.get(slug="scale")
    principal = principal_for(tenant.pk)
    users = MemoryUser.objects.filter(tenant=tenant).count()
    asked = requests(args.queries, users, args.seed)
    by_ext = {
        u.external_id: u
        for u in MemoryUser.objects.filter(external_id__in=[f"user-{i}" for k in asked.values() for i, _ in k])
    }
    vectors = {t: embed_query(t) for k in asked.values() for _, t in k}
    # Warm: every statement shape compiled and the plan caches of the relations loaded.
    for kind, items in asked.items():
        for index, text in items[:3]:
            run(kind, principal, by_ext[f"user-{index}"], text, vectors[text])

    for kind, items in asked.items():
        walls, cpus, counts = [], [], []
        for index, text in items:
            rec = Recorder()
            c0, w0 = time.process_time(), time.perf_counter()
            with connection.execute_wrapper(rec):
                run(kind, principal, by_ext[f"user-{index}"], text, vectors[text])
            walls.append((time.perf_counter() - w0) * 1000)
            cpus.append((time.process_time() - c0) * 1000)
            counts.append(len(rec.statements))
        print(
            f"{kind:14s} n={len(items)}  wall p50 {statistics.median(walls):6.2f} ms"
            f"  CPU p50 {statistics.median(cpus):6.2f} ms"
            f" (this process: Python + client)  statements {statistics.median(counts):.0f}",
            flush=True,
        )

    print("\nEXPLAIN (ANALYZE, BUFFERS) of the exact statements, p50 over requests (planning / execution ms):")
    for kind, items in asked.items():
        per_statement: dict[int, list[tuple[float, float]]] = {}
        first_plans = {}
        for index, text in items[: args.explain]:
            rec = Recorder()
            with connection.execute_wrapper(rec):
                run(kind, principal, by_ext[f"user-{index}"], text, vectors[text])
            for i, (sql, params) in enumerate(
                s for s in rec.statements if s[0].lstrip().upper().startswith(("WITH", "SELECT", "("))
            ):
                planning, execution, plan = explain(sql, params)
                per_statement.setdefault(i, []).append((planning, execution))
                first_plans.setdefault(i, (sql, plan))
        for i, values in per_statement.items():
            sql, plan = first_plans[i]
            print(
                f"  {kind:14s} #{i}  planning {statistics.median(v[0] for v in values):6.2f}"
                f"  execution {statistics.median(v[1] for v in values):6.2f}   {' '.join(sql.split())[:90]}"
            )
            for total, _depth, node_type, name, node in sorted(heavy_nodes(plan, []), key=lambda x: -x[0])[:6]:
                rows = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
                hit = node.get("Shared Hit Blocks", 0)
                print(
                    f"      {total:7.2f} ms  {node_type} {name}  rows {rows:.0f}"
                    f"  loops {node.get('Actual Loops', 1)}  buffers {hit}"
                )

    if args.profile:
        profile = cProfile.Profile()
        items = asked["context"][: args.profile]
        for index, text in items:
            profile.enable()
            run("context", principal, by_ext[f"user-{index}"], text, vectors[text])
            profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(args.sort).print_stats(25)
        print(f"\ncProfile of {len(items)} context blocks, by {args.sort}:")
        print("\n".join(out.getvalue().splitlines()[:45]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
