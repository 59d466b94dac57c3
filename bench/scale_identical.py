"""Same answers before and after a performance change: search, entity search and context blocks.

    python bench/scale_identical.py --db scale1m_copy [--before-ref 6cec884] [--queries 100]

Loads the "before" versions of `selectors/search.py` and `services/context.py` from git (`--before-ref`)
as modules of their own (the before context imports the before search), next to this tree's, and asks
both the same `scale.py` requests (searches, searches naming an entity, context blocks at several
budgets) inside ONE transaction, so `now()` and the data are the same for both, alternating before and
after request by request. Compared:

- search: the same hits in the same order, every score component within 1e-12;
- context: byte-identical blocks (both versions draw the same fence nonces) and identical
  section lists (tokens, included, related, truncated, dropped with reasons).

Also prints, per version and kind, the wall time p50, the Python CPU time (this thread) and the
Postgres backend's CPU time (from /proc, same machine) per request: load-independent figures, taken
alternately in one process on one connection.

Nothing is written (reads are not recorded; the transaction is rolled back). Exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import ROOT, database_url, setup_django  # noqa: E402
from scale import entity_names, vocabulary  # noqa: E402

BUDGETS = (500, 2000, 4000)


def load_before(ref: str):
    """The search and context modules of `ref`, as `before_search` and `before_context`."""
    modules = {}
    for name, path in (
        ("before_search", "memory_admin/selectors/search.py"),
        ("before_context", "memory_admin/services/context.py"),
    ):
        source = subprocess.run(
            ["git", "show", f"{ref}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        source = source.replace("memory_admin.selectors.search import", "before_search import")
        spec = importlib.util.spec_from_loader(name, loader=None)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        exec(compile(source, f"{ref}:{path}", "exec"), module.__dict__)  # noqa: S102 - this repository's own code
        modules[name] = module
    return modules["before_search"], modules["before_context"]


def asked(n: int, users: int, seed: int) -> list[tuple[str, int, str]]:
    vocab = vocabulary(random.Random(3))
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        out.append(("search", rng.randrange(users), " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 5)))))
        index = rng.randrange(users)
        name, _ = rng.choice(entity_names(index, vocab))
        out.append(("search_entity", index, f"{name} " + " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 3)))))
        out.append(("context", rng.randrange(users), " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 5)))))
    return out


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) the Postgres backend `pid` has used (same machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def search_answer(module, principal, user, text, vector):
    result = module.fact_search(
        principal=principal, memory_user=user, query=text, k=10, query_vector=vector, record=False
    )
    fields = [f for f in result.hits[0].__dataclass_fields__ if f != "fact"] if result.hits else []
    return result.candidates, [(str(h.fact.pk), {f: getattr(h, f) for f in fields}) for h in result.hits]


SERVER_MS: dict[str, list[float]] = {"before": [], "after": []}


def context_answer(module, principal, user, text, budget, label="", fresh=False):
    # The fence's nonce is random, and the block's token count depends on how it tokenises: both versions
    # draw the same sequence of nonces.
    draws = random.Random(f"{user.pk}:{text}:{budget}")
    secrets.token_hex = lambda n=32: draws.getrandbits(8 * n).to_bytes(n, "big").hex()
    if fresh:
        from memory_admin.embedding import query_cache

        query_cache.clear()  # the block embeds its task, as a new task over HTTP does
    block = module.context_block(principal=principal, memory_user=user, task=text, budget_tokens=budget, record=False)
    if label:
        SERVER_MS[label].append(block["timings"]["server_ms_excluding_embed"])
    return block["text"], block["tokens"], block["sections"], block["warnings"], block["notebook_truncated"]


def describe(x, y) -> str:
    """Where two context answers differ first."""
    if x[0] != y[0]:
        at = next(i for i, (p, q) in enumerate(zip(x[0] + "\0", y[0] + "\1", strict=False)) if p != q)
        return f"text differs at {at}: {x[0][at - 40 : at + 40]!r} / {y[0][at - 40 : at + 40]!r}"
    for a, b in zip(x[2], y[2], strict=False):
        for key in a:
            if a[key] != b.get(key):
                return f"section {a['name']} {key}: {str(a[key])[:300]} / {str(b.get(key))[:300]}"
    names = [a["name"] for a in x[2]], [b["name"] for b in y[2]]
    return f"tokens {x[1]}/{y[1]}, warnings {x[3]}/{y[3]}, sections {names[0]}/{names[1]}"


def same_search(a, b) -> str | None:
    if a[0] != b[0]:
        return f"candidates {a[0]} != {b[0]}"
    if [h[0] for h in a[1]] != [h[0] for h in b[1]]:
        return "different hits or order"
    for (_, x), (_, y) in zip(a[1], b[1], strict=True):
        for name, value in x.items():
            other = y.get(name)
            if isinstance(value, float):
                if other is None or abs(value - other) > 1e-12:
                    return f"{name} {value!r} != {other!r}"
            elif value != other:
                return f"{name} {value!r} != {other!r}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--before-ref", default="6cec884")
    parser.add_argument("--queries", type=int, default=100, help="of each kind")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument(
        "--fresh-embedding",
        action="store_true",
        help="clear the query-embedding LRU before each block, so that every block embeds its task",
    )
    args = parser.parse_args()
    setup_django(database_url(args.db, fresh=False))
    from django.db import transaction

    from memory_admin import retrieval as after_search
    from memory_admin.embedding import embed_query
    from memory_admin.models import MemoryUser, Tenant
    from memory_admin.retrieval import context as after_context
    from memory_admin.selectors.access import Principal

    before_search, before_context = load_before(args.before_ref)
    tenant = Tenant.objects.get(slug="scale")
    principal = Principal(tenant_id=tenant.pk, role="agent", actor="agent:scale-identical", agent_id=1, api_key_id=1)
    requests = asked(args.queries, MemoryUser.objects.filter(tenant=tenant).count(), args.seed)
    users = {
        u.external_id: u
        for u in MemoryUser.objects.filter(tenant=tenant, external_id__in={f"user-{i}" for _, i, _ in requests})
    }
    vectors = {text: embed_query(text) for _, _, text in requests}
    counts = {"search": 0, "search_entity": 0, "context": 0}
    differences = []
    spent: dict[tuple[str, str], list[tuple[float, float, float]]] = {}  # (version, kind): (wall, python, backend)
    from django.db import connection

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        for n, (kind, index, text) in enumerate(requests):
            user = users[f"user-{index}"]
            # Alternate which version goes first, so that neither always meets the warmer cache.
            order = (("before", before_search, before_context), ("after", after_search, after_context))
            order = order if n % 2 == 0 else order[::-1]
            answers = {}
            for label, search_module, context_module in order:
                t0, c0, b0 = time.perf_counter(), time.thread_time(), backend_cpu(pid)
                if kind == "context":
                    answers[label] = [
                        context_answer(context_module, principal, user, text, b, label, args.fresh_embedding)
                        for b in BUDGETS
                    ]
                else:
                    answers[label] = search_answer(search_module, principal, user, text, vectors[text])
                spent.setdefault((label, kind), []).append(
                    (time.perf_counter() - t0, time.thread_time() - c0, backend_cpu(pid) - b0)
                )
            if kind == "context":
                problem = None
                for budget, x, y in zip(BUDGETS, answers["before"], answers["after"], strict=True):
                    if x != y:
                        problem = f"budget {budget}: {describe(x, y)}"
                        break
            else:
                problem = same_search(answers["before"], answers["after"])
            counts[kind] += 1
            if kind == "context" and any(x["name"] == "entities" for x in answers["after"][-1][2]):
                counts["with_entities"] = counts.get("with_entities", 0) + 1
            if problem:
                differences.append((kind, index, text, problem))
        transaction.set_rollback(True)
    print(
        f"{counts['search']} searches, {counts['search_entity']} searches naming an entity, {counts['context']} tasks"
        f" x budgets {BUDGETS} ({counts.get('with_entities', 0)} naming an entity);"
        f" before {args.before_ref} vs this tree, one transaction"
    )
    print(
        "per request, ms (context: the three budgets together): wall p50 / Python CPU mean / Postgres backend CPU mean"
    )
    for kind in ("search", "search_entity", "context"):
        cells = []
        for label in ("before", "after"):
            rows = spent[(label, kind)]
            wall = statistics.median(r[0] for r in rows) * 1000
            python = statistics.fmean(r[1] for r in rows) * 1000
            backend = statistics.fmean(r[2] for r in rows) * 1000
            cells.append(f"{label} {wall:6.2f} / {python:5.2f} / {backend:5.2f}")
        print(f"  {kind:14s} " + "   ".join(cells))
    print(
        "context block, its own server_ms_excluding_embed p50 (one block): "
        + ", ".join(f"{label} {statistics.median(values):.2f} ms" for label, values in SERVER_MS.items())
    )
    for kind, index, text, problem in differences[:20]:
        print(f"DIFFERENT {kind} user-{index} {text!r}: {problem}")
    print("identical" if not differences else f"{len(differences)} different")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
