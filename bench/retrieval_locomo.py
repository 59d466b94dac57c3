"""Retrieval quality on the LoCoMo development split, through the real HTTP API.

Each conversation becomes one memory user of a fresh tenant (in a database of the benchmark's own);
each turn is written with POST /users/{id}/facts (content = memory_text, observed_at = the turn's time,
metadata = {"dia_id": ...}); then every question of categories 1-4 is asked through /search and the
evidence turns are looked for in the ranked list. The temporal questions (category 2) are also reported
split in two, "2 timed" (the question names a time, `NAMES_A_TIME`) and "2 untimed"; the split is not
counted again in "pooled".

The write path deduplicates and merges: a turn merged into (or deduplicated against) an existing fact
is represented by that fact, so the benchmark maps a fact to every dia_id written into it. The counts
of each outcome are printed, so nothing is hidden.

    .venv/bin/python bench/retrieval_locomo.py [--data /work/shared/eval/locomo-dev] [--k 20]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _harness import PYTHON, ROOT, Client, Server, database_url, django_env, migrate, setup_django

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10, 20)

# The rule that splits the temporal questions into those that name a time and those that do not (fixed
# before any tuning, independent of the product's parser, memory_admin/retrieval/timeq.py): a question
# names a time when it holds a month's name (capitalised: "May", "March", "Jan"), a year from 1900 to
# 2099, a weekday's name, a season ("summer", "winter", "spring", "autumn", "fall" after in/last/this/
# next/the), a word of relative time ("yesterday", "today", "tonight", "recently", "ago"), "last/this/
# next/past" + day/week/weekend/month/year, or "<unit> before/after" ("the week before the race").
_MONTH_NAMES = (
    r"January|February|March|April|May|June|July|August|September|October|November|December"
    r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec"
)
NAMES_A_TIME = re.compile(
    rf"\b(?:{_MONTH_NAMES})\b|(?<!\d)(?:19|20)\d\d(?!\d)"
    r"|(?i:\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|summer|winter|spring|autumn"
    r"|yesterday|today|tonight|recently|ago)\b"
    r"|\b(?:in|last|this|next|the)\s+fall\b"
    r"|\b(?:last|this|next|past)\s+(?:day|week|weekend|month|year)s?\b"
    r"|\b(?:day|week|weekend|month|year)s?\s+(?:before|after)\b)"
)


def names_a_time(question: str) -> bool:
    return bool(NAMES_A_TIME.search(question))


def load(data: Path):
    turns = [json.loads(line) for line in (data / "locomo_dev_turns.jsonl").open()]
    questions = [json.loads(line) for line in (data / "locomo_dev_qa.jsonl").open()]
    questions = [q for q in questions if q["category"] in CATEGORIES and q.get("evidence")]
    return turns, questions


def ingest(port: int, key: str, sample: str, turns: list[dict]) -> tuple[collections.Counter, dict[str, set]]:
    """Write one conversation's turns in order (one user's writes are serialised by the server anyway)."""
    client = Client(port, key)
    outcomes: collections.Counter = collections.Counter()
    dia_ids_of: dict[str, set] = collections.defaultdict(set)
    for turn in turns:
        status, body, _ = client.request(
            "POST",
            f"/api/v1/users/{sample}/facts",
            {
                "content": turn["memory_text"],
                "source": "user_stated",
                "kind": "fact",
                "observed_at": turn["timestamp"] + "+00:00",
                "metadata": {"dia_id": turn["dia_id"]},
            },
        )
        if status >= 400:
            outcomes[f"http_{status}:{body.get('code')}"] += 1
            continue
        outcomes[body["outcome"]] += 1
        if body.get("fact"):
            dia_ids_of[body["fact"]["id"]].add(turn["dia_id"])
    return outcomes, dia_ids_of


def evaluate(port: int, key: str, questions: list[dict], dia_ids_of: dict[str, set], k: int):
    client = Client(port, key)
    per_cat: dict[int, list[dict]] = collections.defaultdict(list)
    latencies = []
    for q in questions:
        t0 = time.perf_counter()
        status, body, _ = client.request(
            "GET", f"/api/v1/users/{q['sample_id']}/search", params={"q": q["question"], "k": k}
        )
        latencies.append((time.perf_counter() - t0) * 1000)
        assert status == 200, body
        ranked = [dia_ids_of.get(h["fact"]["id"], set()) | {h["fact"]["metadata"].get("dia_id")} for h in body["hits"]]
        evidence = set(q["evidence"])
        row = {}
        for cut in KS:
            found = set().union(*ranked[:cut]) if ranked[:cut] else set()
            row[f"R@{cut}"] = len(evidence & found) / len(evidence)
        row["hit@10"] = float(any(evidence & ids for ids in ranked[:10]))
        first = next((i for i, ids in enumerate(ranked) if evidence & ids), None)
        row["MRR"] = 1.0 / (first + 1) if first is not None else 0.0
        per_cat[q["category"]].append(row)
        if q["category"] == 2:  # the temporal split (NAMES_A_TIME)
            per_cat["2 timed" if names_a_time(q["question"]) else "2 untimed"].append(row)
    return per_cat, latencies


def report(per_cat: dict[int, list[dict]]) -> None:
    columns = [f"R@{k}" for k in KS] + ["hit@10", "MRR"]
    print(f"{'category':<16}{'n':>5}" + "".join(f"{c:>9}" for c in columns))
    pooled: list[dict] = []
    for cat in sorted(per_cat, key=str):
        rows = per_cat[cat]
        name = f"{cat} {CATEGORIES[cat]}" if cat in CATEGORIES else f"{cat} (split)"
        pooled += rows if cat in CATEGORIES else []
        print(f"{name:<16}{len(rows):>5}" + "".join(f"{sum(r[c] for r in rows) / len(rows):>9.3f}" for c in columns))
    print(
        f"{'pooled':<16}{len(pooled):>5}" + "".join(f"{sum(r[c] for r in pooled) / len(pooled):>9.3f}" for c in columns)
    )


def bench_keys() -> tuple[str, str]:
    """A fresh tenant with an agent key and an admin key (Django must be set up)."""
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="locomo")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="locomo-bench")
    _, admin_key = api_key_create(tenant_id=tenant.pk, agent_name="locomo-admin", is_admin=True)
    return key, admin_key


def ingest_or_reuse(port: int, key: str, admin_key: str, turns: list[dict], state: Path, reuse: bool) -> dict[str, set]:
    """Every conversation ingested through the API (or the saved map of a previous run): fact id -> dia_ids."""
    by_sample: dict[str, list[dict]] = collections.defaultdict(list)
    for turn in turns:
        by_sample[turn["sample_id"]].append(turn)
    if reuse:
        saved = json.loads(state.read_text())
        print(f"reusing ingest; write outcomes: {saved['outcomes']}")
        return {f: set(ids) for f, ids in saved["map"].items()}
    # A conversation has hundreds of turns: lift the per-user cap of active facts (default 100)
    # so the benchmark measures retrieval, not eviction.
    status, body, _ = Client(port, admin_key).request("PATCH", "/api/v1/settings", {"fact_cap": 100000})
    assert status == 200, body
    t0 = time.time()
    with ThreadPoolExecutor(len(by_sample)) as pool:
        results = list(pool.map(lambda s: ingest(port, key, s, by_sample[s]), by_sample))
    outcomes = sum((r[0] for r in results), collections.Counter())
    dia_ids_of = {fid: ids for r in results for fid, ids in r[1].items()}
    state.write_text(json.dumps({"outcomes": outcomes, "map": {f: sorted(i) for f, i in dia_ids_of.items()}}))
    print(
        f"ingested {len(turns)} turns of {len(by_sample)} conversations in {time.time() - t0:.0f} s; "
        f"write outcomes: {dict(outcomes)}"
    )
    merged = sum(len(ids) - 1 for ids in dia_ids_of.values() if len(ids) > 1)
    print(f"turns folded into another turn's fact (merged/deduplicated): {merged}")
    return dia_ids_of


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--db", default="bench_locomo")
    parser.add_argument("--reuse", action="store_true", help="keep the database of a previous run (skip ingest)")
    parser.add_argument("--no-entities", action="store_true", help="do not draw entities (search without them)")
    args = parser.parse_args()

    turns, questions = load(args.data)
    url = database_url(args.db, fresh=not args.reuse)
    state = Path(f"/tmp/{args.db}_state.json")
    if not args.reuse:
        migrate(url)
    setup_django(url)
    key, admin_key = bench_keys()
    with Server(url) as server:
        dia_ids_of = ingest_or_reuse(server.port, key, admin_key, turns, state, args.reuse)
        if not args.reuse and not args.no_entities:
            # Before: no worker ran, so no fact has entities yet (the write path's tasks wait in the broker).
            before, _ = evaluate(server.port, key, questions, dia_ids_of, args.k)
            print("before entities are drawn:")
            report(before)
        if not args.no_entities:
            # What the write path's task does for each fact, for all of them at once (the same code).
            t0 = time.time()
            subprocess.run(
                [PYTHON, "manage.py", "entities_backfill", "--no-progress"], cwd=ROOT, env=django_env(url), check=True
            )
            print(f"entities drawn in {time.time() - t0:.0f} s")
        per_cat, latencies = evaluate(server.port, key, questions, dia_ids_of, args.k)
    print(
        f"{len(questions)} questions (categories 1-4 with evidence); search latency p50 "
        f"{sorted(latencies)[len(latencies) // 2]:.1f} ms (including query embedding)"
    )
    report(per_cat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
