"""LoCoMo dev recall of `fact_search`, in process, on a tuning and a hold-out split of the conversations.

Reads a database ingested by retrieval_locomo.py (`--db`; its fact -> dia_id map, `/tmp/<db>_state.json`)
and asks every question of categories 1-4 through `fact_search(..., record=False)`, so nothing is written.
A hit counts for each dia_id written into its fact, as retrieval_locomo.py counts it. R@10 (and R@20) per
category, for the conversations ranking is tuned on (TUNE), those held out (HOLD_OUT) and all of them;
the temporal questions are also split by whether they name a time (retrieval_locomo.NAMES_A_TIME).
`--out` writes one JSON line per question (the ranks of its evidence among the k best), so that two
trees can be compared question by question:

    DATABASE_URL=postgresql://postgres:@/postgres?host=/path/to/pgdata \\
        PYTHONPATH=$PWD python bench/retrieval_split.py --db r34l_locomo --out /tmp/after.jsonl
    PYTHONPATH=$OTHER python bench/retrieval_split.py --db r34l_locomo --out /tmp/before.jsonl  # another tree

`--sentence-mix A` asks what a vector per sentence would add (a probe; the product stores one vector per
fact): every fact of two sentences or more gets each sentence embedded alone (with the fact's speaker
label), and after the candidate statement each such fact's cosine to the query becomes
(1 - A) x its own + A x its best sentence's, before ranking. Nothing is written.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import sys
import time
from pathlib import Path

from _harness import database_url, setup_django
from retrieval_locomo import CATEGORIES, load, names_a_time

TUNE = ("conv-26", "conv-30", "conv-41")
HOLD_OUT = ("conv-42", "conv-43")
CUTS = (10, 20)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
MAX_SENTENCES = 16


def recall_rows(questions: list[dict], ranked_of: dict[int, list[set]]) -> list[dict]:
    """Per question: its category, split and R@cut for CUTS, from the dia_ids of its ranked hits."""
    rows = []
    for i, q in enumerate(questions):
        ranked = ranked_of[i]
        evidence = set(q["evidence"])
        row = {"i": i, "sample": q["sample_id"], "category": q["category"], "timed": names_a_time(q["question"])}
        for cut in CUTS:
            found = set().union(*ranked[:cut]) if ranked[:cut] else set()
            row[f"R@{cut}"] = len(evidence & found) / len(evidence)
        row["ranks"] = {e: next((r for r, ids in enumerate(ranked) if e in ids), None) for e in sorted(evidence)}
        rows.append(row)
    return rows


def report(rows: list[dict], cut: int = 10) -> dict[str, dict[str, float]]:
    """R@cut per category (and the temporal split, and pooled) for TUNE, HOLD_OUT and all; printed and returned."""
    groups = {"tune": TUNE, "hold-out": HOLD_OUT, "all": TUNE + HOLD_OUT}
    table: dict[str, dict[str, float]] = collections.defaultdict(dict)
    names = {**{str(c): f"{c} {n}" for c, n in CATEGORIES.items()}, "2t": "2 timed", "2u": "2 untimed", "p": "pooled"}
    for group, samples in groups.items():
        mine = [r for r in rows if r["sample"] in samples]
        by = collections.defaultdict(list)
        for r in mine:
            by[str(r["category"])].append(r)
            if r["category"] == 2:
                by["2t" if r["timed"] else "2u"].append(r)
            by["p"].append(r)
        for key, name in names.items():
            if by[key]:
                table[name][group] = statistics.fmean(r[f"R@{cut}"] for r in by[key])
                table[name][f"n {group}"] = len(by[key])
    print(f"R@{cut:<14}" + "".join(f"{g:>16}" for g in groups))
    for name, values in table.items():
        cells = "".join(f"{values.get(g, float('nan')):>10.3f} ({values.get('n ' + g, 0):>3})" for g in groups)
        print(f"{name:<16}{cells}")
    return table


def ceiling(rows: list[dict], depths: tuple[int, ...] = (10, 20, 30, 50)) -> None:
    """What R@10 would be if the d best were re-ordered perfectly (every evidence turn among them moved into
    the ten best): how much a re-ranking of the same list can still gain, per category and pooled."""
    print("R@10 with the d best perfectly re-ordered (all questions)")
    for depth in depths:
        by = collections.defaultdict(list)
        for r in rows:
            found = sum(1 for rank in r["ranks"].values() if rank is not None and rank < depth)
            value = min(found, 10) / len(r["ranks"])
            by[f"{r['category']} {CATEGORIES[r['category']]}"].append(value)
            by["pooled"].append(value)
        print(f"  d={depth:<3}" + "".join(f"  {name} {statistics.fmean(v):.3f}" for name, v in sorted(by.items())))


def sentence_vectors() -> dict:
    """fact id -> one row per sentence (each embedded alone, under the fact's speaker label), for the active
    facts of two sentences or more."""
    import numpy as np

    from memory_admin.embedding import embed
    from memory_admin.models import Fact
    from memory_admin.speakers import SPEAKER_LINE

    texts, owners = [], []
    for fact_id, content in Fact.objects.filter(status="active").values_list("id", "content"):
        label = SPEAKER_LINE.match(content)
        head = label.group(0) if label else ""
        sentences = [s for s in SENTENCE_END.split(content[len(head) :]) if s.strip()]
        if len(sentences) > 1:
            texts += [head + s for s in sentences[:MAX_SENTENCES]]
            owners += [fact_id] * len(sentences[:MAX_SENTENCES])
    rows: dict = {}
    for fact_id, vector in zip(owners, np.asarray(embed(texts), dtype=np.float32), strict=True):
        rows.setdefault(fact_id, []).append(vector)
    return {fact_id: np.stack(vectors) for fact_id, vectors in rows.items()}


def mix_in_sentences(share: float) -> None:
    """Re-score the vector component as `--sentence-mix` describes, by wrapping the search's candidates."""
    import numpy as np

    from memory_admin.retrieval import search

    vectors = sentence_vectors()
    print(f"--sentence-mix {share}: {len(vectors)} facts of two sentences or more", file=sys.stderr)
    candidates = search.candidates

    def mixed(*args, vector=None, **kwargs):
        weights, rows, present = candidates(*args, vector=vector, **kwargs)
        if vector is None:
            return weights, rows, present
        query = np.asarray(vector, dtype=np.float32)
        out = []
        for row in rows:
            sentences = vectors.get(row.id)
            if sentences is not None and row.distance is not None:
                cosine = (1 - share) * (1.0 - row.distance) + share * float((sentences @ query).max())
                row = row._replace(distance=1.0 - cosine)
            out.append(row)
        return weights, out, present

    search.candidates = mixed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--db", default="bench_locomo")
    parser.add_argument("--k", type=int, default=50, help="hits asked for (the ranks of the evidence up to k)")
    parser.add_argument("--out", type=Path, help="one JSON line per question")
    parser.add_argument("--sentence-mix", type=float, help="probe: the share of the best sentence's cosine")
    args = parser.parse_args()
    _, questions = load(args.data)
    dia_ids_of = {f: set(ids) for f, ids in json.loads(Path(f"/tmp/{args.db}_state.json").read_text())["map"].items()}
    setup_django(database_url(args.db, fresh=False))
    if args.sentence_mix is not None:
        mix_in_sentences(args.sentence_mix)
    from memory_admin.models import MemoryUser, Tenant
    from memory_admin.retrieval import fact_search
    from memory_admin.selectors.access import Principal

    tenant = Tenant.objects.get(slug="locomo")
    principal = Principal(tenant_id=tenant.pk, role="agent", actor="agent:split", agent_id=1, api_key_id=1)
    users = {u.external_id: u for u in MemoryUser.objects.filter(tenant=tenant)}
    ranked_of: dict[int, list[set]] = {}
    server_ms = []
    for i, q in enumerate(questions):
        result = fact_search(
            principal=principal, memory_user=users[q["sample_id"]], query=q["question"], k=args.k, record=False
        )
        server_ms.append(result.timings["server_ms_excluding_embed"])
        ranked_of[i] = [
            dia_ids_of.get(str(h.fact.pk), set()) | {(h.fact.metadata or {}).get("dia_id")} for h in result.hits
        ]
    rows = recall_rows(questions, ranked_of)
    print(f"{len(questions)} questions; server time excluding the embedding p50 {statistics.median(server_ms):.1f} ms")
    for cut in CUTS:
        report(rows, cut)
    ceiling(rows, tuple(d for d in (10, 20, 30, 50) if d <= args.k))
    if args.out:
        with args.out.open("w") as out:
            for row in rows:
                out.write(json.dumps({**row, "q": questions[row["i"]]["question"]}) + "\n")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    code = main()
    print(f"{time.time() - t0:.0f} s", file=sys.stderr)
    sys.exit(code)
