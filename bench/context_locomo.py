"""The context block on the LoCoMo development split, through the real HTTP API (issue 15).

Ingests exactly as bench/retrieval_locomo.py does (its code, imported): each conversation one memory
user, each turn one fact. Then every question of categories 1-4 is the `task` of
`GET /users/{id}/context` at each budget, and the benchmark reports, per budget:

- tokens used (mean) and the fill: tokens / budget (every LoCoMo user holds far more than 4,000 tokens
  of memory, so the block can always be filled);
- evidence recall in the block per category: the share of a question's evidence turns that are inside
  the block, i.e. written into a fact the block included (fact id -> dia_ids from the write responses,
  as retrieval_locomo maps them), a collapsed near-duplicate counted with the line that holds it, the
  fact cut to fill the end of the budget (`truncated`) not counted;
- the time to build the block: the server's own time (Server-Timing), median, with and without the
  query embedding;
- monotonicity: questions whose recall at a larger budget is below their recall at a smaller one, and
  budget steps after which a fact the smaller block held is missing from the larger one.

    python bench/context_locomo.py                 # ingest (about 5 minutes) + evaluate
    python bench/context_locomo.py --reuse         # evaluate again on the last ingest
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

from _harness import Client, Server, database_url, migrate, server_timing, setup_django
from retrieval_locomo import CATEGORIES, bench_keys, ingest_or_reuse, load

BUDGETS = (250, 500, 1000, 2000, 4000)
FACT_SECTIONS = ("pinned", "facts")


def held(body: dict) -> set[str]:
    """The facts the block holds: included ones, and near-duplicates collapsed into one of them."""
    ids = set()
    for section in body["sections"]:
        if section["name"] in FACT_SECTIONS:
            ids.update(section["included"])
            ids.update(d["id"] for d in section["dropped"] if d["reason"] == "duplicate")
    return ids


def in_block(body: dict, dia_ids_of: dict[str, set]) -> set[str]:
    """The dia_ids whose fact the block holds whole: a fact cut to fill the end of the budget
    (`truncated`) does not count, as its cut text may have lost the answer."""
    ids = held(body) - {i for s in body["sections"] if s["name"] in FACT_SECTIONS for i in s["truncated"]}
    return set().union(*(dia_ids_of.get(i, set()) for i in ids)) if ids else set()


Recall = dict[int, dict[int, list[float]]]  # budget -> category -> per-question recall
PerBudget = dict[int, list]


def evaluate(
    port: int, key: str, questions: list[dict], dia_ids_of: dict[str, set], budgets: tuple[int, ...]
) -> tuple[Recall, PerBudget, PerBudget, PerBudget, int, int]:
    client = Client(port, key)
    recall: dict[int, dict[int, list[float]]] = {b: collections.defaultdict(list) for b in budgets}
    tokens: dict[int, list[int]] = collections.defaultdict(list)
    build: dict[int, list[float]] = collections.defaultdict(list)
    build_excl: dict[int, list[float]] = collections.defaultdict(list)
    dips = lost = 0
    for q in questions:
        evidence = set(q["evidence"])
        previous, before = -1.0, set()
        for budget in budgets:
            status, body, headers = client.request(
                "GET",
                f"/api/v1/users/{q['sample_id']}/context",
                params={"task": q["question"], "budget_tokens": budget},
            )
            assert status == 200, body
            assert body["tokens"] <= budget, (budget, body["tokens"])
            share = len(evidence & in_block(body, dia_ids_of)) / len(evidence)
            recall[budget][q["category"]].append(share)
            tokens[budget].append(body["tokens"])
            timing = server_timing(headers)
            build[budget].append(timing.get("total_ms", 0.0))
            build_excl[budget].append(timing.get("server_ms_excluding_embed", 0.0))
            dips += share < previous
            previous = share
            now = held(body)
            if not before <= now:
                lost += 1
                print(
                    f"containment lost: {q['sample_id']} question {q['qa_index']} at {budget} tokens", file=sys.stderr
                )
            before = now
    return recall, tokens, build, build_excl, dips, lost


def report(
    recall: Recall,
    tokens: PerBudget,
    build: PerBudget,
    build_excl: PerBudget,
    dips: int,
    lost: int,
    budgets: tuple[int, ...],
) -> None:
    cats = sorted(CATEGORIES)
    header = (
        f"{'budget':>7}{'tokens':>8}{'fill':>7}"
        + "".join(f"{CATEGORIES[c]:>13}" for c in cats)
        + f"{'pooled':>9}{'build p50':>11}{'excl.emb':>10}"
    )
    print(header)
    for budget in budgets:
        pooled = [x for c in cats for x in recall[budget][c]]
        mean_tokens = statistics.fmean(tokens[budget])
        print(
            f"{budget:>7}{mean_tokens:>8.0f}{mean_tokens / budget:>7.1%}"
            + "".join(f"{statistics.fmean(recall[budget][c]):>13.3f}" for c in cats)
            + f"{statistics.fmean(pooled):>9.3f}{statistics.median(build[budget]):>9.1f}ms"
            + f"{statistics.median(build_excl[budget]):>8.1f}ms"
        )
    n = {c: len(recall[budgets[0]][c]) for c in cats}
    print(
        "questions per category: " + ", ".join(f"{CATEGORIES[c]} {n[c]}" for c in cats) + f"; pooled {sum(n.values())}"
    )
    print(f"questions whose recall fell when the budget grew (monotone if 0): {dips}")
    print(f"budget steps after which a fact of the smaller block was missing (contained if 0): {lost}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--db", default="bench_locomo_context")
    parser.add_argument("--reuse", action="store_true", help="keep the database of a previous run (skip ingest)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    args = parser.parse_args()
    budgets = tuple(sorted(int(b) for b in args.budgets.split(",")))

    turns, questions = load(args.data)
    url = database_url(args.db, fresh=not args.reuse)
    state = Path(f"/tmp/{args.db}_state.json")
    if not args.reuse:
        migrate(url)
    setup_django(url)
    key, admin_key = bench_keys()
    with Server(url) as server:
        dia_ids_of = ingest_or_reuse(server.port, key, admin_key, turns, state, args.reuse)
        t0 = time.time()
        results = evaluate(server.port, key, questions, dia_ids_of, budgets)
    print(
        f"{len(questions)} questions × {len(budgets)} budgets in {time.time() - t0:.0f} s "
        f"(categories 1-4 with evidence; evidence recall = share of a question's evidence turns in the block)"
    )
    report(*results, budgets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
