"""Evidence recall of the context block on an ingested LoCoMo dev database, in process and read only
(issue 33): the same rules as context_locomo.py (`in_block`: a fact the block holds whole, or a
near-duplicate collapsed into one it holds; a cut fact does not count), without a server, so that two
trees can be compared back to back on one database in a few minutes.

The database is one that context_locomo.py or retrieval_locomo.py ingested (tenant `locomo`); fact id ->
dia_ids comes from that run's state file (/tmp/<db>_state.json), and from each fact's `metadata.dia_id`
for a fact the state file does not name. The connection is opened read only
(`default_transaction_read_only`), and blocks are built with `record=False`: nothing is written.

Split (issue 33): tune on conv-26, conv-30, conv-41; hold out conv-42, conv-43. Every figure is reported
for both and pooled, per category and budget, with the monotone checks of context_locomo.py.

    DATABASE_URL=postgresql://postgres:@/postgres?host=/path/to/pgdata \\
        python bench/context_inprocess.py --db r34l_locomo [--split tune] [--tree /work/main]

`--tree` evaluates another checkout's code (e.g. main's) with this script, on the same database;
`--why 2000` then says where the evidence the 2,000-token blocks miss stands (its place in the order the
block offers facts, contested or not, said in a session of the five best or not); `--dump` writes one
JSON line per question and budget.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from context_locomo import FACT_SECTIONS, held  # noqa: E402
from retrieval_locomo import CATEGORIES, load  # noqa: E402

BUDGETS = (500, 1000, 2000, 4000)
SPLITS = {"tune": ("conv-26", "conv-30", "conv-41"), "holdout": ("conv-42", "conv-43")}


def whole(block: dict) -> set[str]:
    """What `held` holds less the fact cut to fill the end of the budget (context_locomo.in_block)."""
    return held(block) - {i for s in block["sections"] if s["name"] in FACT_SECTIONS for i in s["truncated"]}


def read_only_url(db: str) -> str:
    base = os.environ.get("DATABASE_URL")
    if not base:
        raise SystemExit("DATABASE_URL must name the server that holds the ingested database")
    parsed = urllib.parse.urlparse(base)
    query = urllib.parse.parse_qsl(parsed.query) + [("options", "-c default_transaction_read_only=on")]
    return urllib.parse.urlunparse(parsed._replace(path="/" + db, query=urllib.parse.urlencode(query)))


def setup(tree: Path, url: str) -> None:
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "memory_admin.settings"})
    sys.path.insert(0, str(tree))
    import django

    django.setup()


def dia_ids_map(state: Path) -> dict[str, set]:
    from memory_admin.models import Fact

    found: dict[str, set] = collections.defaultdict(set)
    if state.exists():
        for fid, ids in json.loads(state.read_text())["map"].items():
            found[fid].update(ids)
    for fid, metadata in Fact.objects.filter(tenant__slug="locomo").values_list("id", "metadata"):
        if str(fid) not in found and (metadata or {}).get("dia_id"):
            found[str(fid)].add(metadata["dia_id"])
    return found


def evaluate(questions: list[dict], dia_ids_of: dict[str, set], budgets: tuple[int, ...], dump) -> dict:
    from memory_admin.models import MemoryUser, Tenant
    from memory_admin.retrieval.context import context_block
    from memory_admin.selectors.access import Principal

    tenant = Tenant.objects.get(slug="locomo")
    principal = Principal(tenant_id=tenant.pk, role="agent", actor="agent:bench", agent_id=1, api_key_id=1)
    users = {u.external_id: u for u in MemoryUser.objects.filter(tenant=tenant)}
    rows = []
    dips = lost = over = 0
    for q in questions:
        evidence = set(q["evidence"])
        previous, before = -1.0, set()
        for budget in budgets:
            block = context_block(
                principal=principal,
                memory_user=users[q["sample_id"]],
                task=q["question"],
                budget_tokens=budget,
                record=False,
            )
            over += block["tokens"] > budget
            ids = whole(block)
            found = set().union(*(dia_ids_of.get(i, set()) for i in ids)) if ids else set()
            share = len(evidence & found) / len(evidence)
            missing = sorted(evidence - found)
            rows.append((q["sample_id"], q["category"], budget, share, block["tokens"], q["qa_index"], missing))
            dips += share < previous - 1e-12
            previous = share
            now = held(block)
            lost += not before <= now
            before = now
            if dump:
                dump.write(
                    json.dumps(
                        {
                            "sample": q["sample_id"],
                            "qa": q["qa_index"],
                            "category": q["category"],
                            "budget": budget,
                            "recall": share,
                            "missing": missing,
                            "sections": {s["name"]: s["tokens"] for s in block["sections"]},
                            "included": [s["included"] for s in block["sections"] if s["name"] == "facts"],
                        }
                    )
                    + "\n"
                )
    return {"rows": rows, "dips": dips, "lost": lost, "over": over}


POSITIONS = (20, 40, 80, 160)


def _session(dia_id: str) -> str:
    return dia_id.split(":")[0]


def why(questions: list[dict], dia_ids_of: dict[str, set], result: dict, budget: int) -> None:
    """Where the evidence a block of `budget` tokens misses stands: its place in the order the block
    offers facts (`gather_sections`' sequence: the ranking with the related memory of the best), whether
    its fact is contested (staleness then halves it in the ranking, SPEC §7), and whether it was said in a
    session of one of the five best (what related memory and neighbour support can reach)."""
    from memory_admin.models import Fact, MemoryUser, Tenant
    from memory_admin.retrieval.context.gather import gather_sections
    from memory_admin.selectors.access import Principal

    tenant = Tenant.objects.get(slug="locomo")
    principal = Principal(tenant_id=tenant.pk, role="agent", actor="agent:bench", agent_id=1, api_key_id=1)
    users = {u.external_id: u for u in MemoryUser.objects.filter(tenant=tenant)}
    contested = {str(pk) for pk in Fact.objects.filter(tenant=tenant, contested=True).values_list("pk", flat=True)}
    missed = {(r[0], r[5]): r[6] for r in result["rows"] if r[2] == budget and r[6]}
    counts: collections.Counter = collections.Counter()
    for q in questions:
        missing = missed.get((q["sample_id"], q["qa_index"]))
        if not missing:
            continue
        sections, _ = gather_sections(principal, users[q["sample_id"]], q["question"], budget)
        facts = next(s for s in sections if s.name == "facts")
        place: dict[str, tuple[int, bool]] = {}
        best_sessions: set[str] = set()
        for n, item in zip(range(1, 2 * POSITIONS[-1] + 1), facts.sequence, strict=False):
            for dia_id in dia_ids_of.get(str(item.id), ()):
                place.setdefault(dia_id, (n, str(item.id) in contested))
                if n <= 5:
                    best_sessions.add(_session(dia_id))
        for dia_id in missing:
            n, is_contested = place.get(dia_id, (None, False))
            where = next((f"<= {p}" for p in POSITIONS if n is not None and n <= p), f"> {POSITIONS[-1]}")
            counts[f"offered at place {where}"] += 1
            counts["contested" if is_contested else "not contested"] += 1
            counts["said in a session of the 5 best" if _session(dia_id) in best_sessions else "another session"] += 1
            counts["missed"] += 1
    print(f"evidence turns missed at {budget} tokens: {counts.pop('missed', 0)}")
    for name, count in sorted(counts.items()):
        print(f"  {name}: {count}")


def report(result: dict, budgets: tuple[int, ...]) -> None:
    cats = sorted(CATEGORIES)
    print(f"{'split':<9}{'budget':>7}{'tokens':>8}" + "".join(f"{CATEGORIES[c]:>13}" for c in cats) + f"{'pooled':>9}")
    for split, samples in (*SPLITS.items(), ("pooled", None)):
        for budget in budgets:
            rows = [r for r in result["rows"] if r[2] == budget and (samples is None or r[0] in samples)]
            if not rows:
                continue
            per = {c: [r[3] for r in rows if r[1] == c] for c in cats}
            print(
                f"{split:<9}{budget:>7}{statistics.fmean(r[4] for r in rows):>8.0f}"
                + "".join(f"{statistics.fmean(per[c]):>13.3f}" if per[c] else f"{'-':>13}" for c in cats)
                + f"{statistics.fmean(r[3] for r in rows):>9.3f}"
            )
    print(f"blocks over budget: {result['over']}")
    print(f"questions whose recall fell when the budget grew (monotone if 0): {result['dips']}")
    print(f"budget steps after which a fact of the smaller block was missing (contained if 0): {result['lost']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--db", default="bench_locomo_context")
    parser.add_argument("--state", type=Path, help="fact id -> dia_ids (default /tmp/<db>_state.json)")
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="all")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--tree", type=Path, default=HERE.parent, help="the checkout whose code builds the blocks")
    parser.add_argument("--dump", type=Path, help="one JSON line per question and budget (what was missed)")
    parser.add_argument("--why", type=int, help="where the evidence a block of this many tokens misses stands")
    args = parser.parse_args()
    budgets = tuple(sorted(int(b) for b in args.budgets.split(",")))
    setup(args.tree.resolve(), read_only_url(args.db))
    _, questions = load(args.data)
    if args.split != "all":
        questions = [q for q in questions if q["sample_id"] in SPLITS[args.split]]
    dia_ids_of = dia_ids_map(args.state or Path(f"/tmp/{args.db}_state.json"))
    t0 = time.time()
    dump = args.dump.open("w") if args.dump else None
    try:
        result = evaluate(questions, dia_ids_of, budgets, dump)
    finally:
        if dump:
            dump.close()
    print(
        f"tree {args.tree.resolve()}: {len(questions)} questions × {len(budgets)} budgets in {time.time() - t0:.0f} s "
        f"(evidence recall = share of a question's evidence turns whose fact the block holds whole)"
    )
    report(result, budgets)
    if args.why:
        why(questions, dia_ids_of, result, args.why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
