"""The static engine (EMBEDDER=static) against the ONNX engine, offline: build, speed, memory, the write
path's thresholds, dense recall.

    python bench/static_embedder.py [--build] [--requests 300]

- build (with --build): the static table distilled into a fresh temporary directory, wall time.
- query embedding: each engine loaded in a process pinned to one core (one intra-op thread), LoCoMo
  questions embedded one by one: p50/p95, load time, RSS after loading (engines alternate, one
  subprocess each, so neither inherits the other's pages).
- thresholds: over LoCoMo dev turns (each conversation in order), how many turns have an earlier turn of
  their conversation at cosine >= 0.95 (the tenant's default near-duplicate threshold) and what share of
  all pairs of turns reach 0.70 (the default contradiction-candidate threshold), per engine; and the
  static cosines that would select as many as the ONNX engine does at 0.95 / 0.70.
- dense recall: every question of categories 1-4 against its conversation's turns by cosine alone
  (no BM25, no write path), R@10 per category: the vector signal the hybrid ranking gets.

No database and no server: bench/retrieval_locomo.py with EMBEDDER=static measures through /search.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = Path("/work/shared/eval/locomo-dev")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}

_ONE_CORE = """
import json, os, sys, time
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
os.environ["EMBED_THREADS"] = "1"
import django
django.setup()
from memory_admin.embeddings import make_embedder
texts = json.loads(sys.stdin.read())
t0 = time.perf_counter()
engine = make_embedder(sys.argv[1])
engine.embed(["warm up"])
load = time.perf_counter() - t0
for text in texts[:20]:
    engine.embed([text])
times = []
for text in texts[20:]:
    t = time.perf_counter()
    engine.embed([text])
    times.append((time.perf_counter() - t) * 1000)
rss = [int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmRSS")][0]
print(json.dumps({"times": times, "load": load, "rss": rss, "torch": "torch" in sys.modules}))
"""


def load_data():
    turns = [json.loads(line) for line in (DATA / "locomo_dev_turns.jsonl").open()]
    questions = [json.loads(line) for line in (DATA / "locomo_dev_qa.jsonl").open()]
    return turns, [q for q in questions if q["category"] in CATEGORIES and q.get("evidence")]


def one_core(engine: str, texts: list[str]) -> dict:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "memory_admin.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _ONE_CORE, engine], input=json.dumps(texts), env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def pair_stats(vectors: np.ndarray, turns: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(each turn's best cosine to an earlier turn of its conversation, every pair's cosine)."""
    by_sample = collections.defaultdict(list)
    for i, turn in enumerate(turns):
        by_sample[turn["sample_id"]].append(i)
    best, pairs = [], []
    for idx in by_sample.values():
        sims = vectors[idx] @ vectors[idx].T
        best += [sims[j, :j].max() for j in range(1, len(idx))]
        pairs.append(sims[np.triu_indices(len(idx), 1)])
    return np.array(best), np.concatenate(pairs)


def dense_recall(turn_vectors, question_vectors, turns, questions) -> dict[int, float]:
    by_sample = collections.defaultdict(list)
    for i, turn in enumerate(turns):
        by_sample[turn["sample_id"]].append(i)
    per_cat = collections.defaultdict(list)
    for qi, q in enumerate(questions):
        idx = by_sample[q["sample_id"]]
        top = np.argsort(-(turn_vectors[idx] @ question_vectors[qi]))[:10]
        found = {turns[idx[j]]["dia_id"] for j in top}
        per_cat[q["category"]].append(len(found & set(q["evidence"])) / len(q["evidence"]))
    return per_cat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="time a fresh build of the static table")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="alternating one-core rounds per engine")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from memory_admin import static_model
    from memory_admin.embeddings import make_embedder

    print(f"load average at start: {os.getloadavg()}")
    if args.build:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            static_model.build(Path(tmp))
            print(f"static table build: {time.perf_counter() - t0:.1f} s wall (load {os.getloadavg()[0]:.1f})")

    turns, questions = load_data()
    texts = list(dict.fromkeys(q["question"] for q in questions))[: 20 + args.requests]
    runs = collections.defaultdict(list)
    for _ in range(args.rounds):
        for engine in ("onnx", "static"):
            runs[engine].append(one_core(engine, texts))
    print(f"\nquery embedding, one core, {args.requests} questions, {args.rounds} alternating rounds")
    for engine, rounds in runs.items():
        times = sorted(t for r in rounds for t in r["times"])
        p50s = ", ".join(f"{np.percentile(r['times'], 50):.3f}" for r in rounds)
        print(
            f"  {engine:<7} p50 {np.percentile(times, 50):8.3f} ms (rounds {p50s})"
            f"  p95 {np.percentile(times, 95):8.3f} ms"
            f"  load {np.median([r['load'] for r in rounds]):.2f} s  RSS {np.median([r['rss'] for r in rounds]):.0f} MB"
            f"  torch loaded: {rounds[0]['torch']}"
        )

    turn_texts, question_texts = [t["memory_text"] for t in turns], [q["question"] for q in questions]
    vectors = {}
    for engine in ("onnx", "static"):
        embedder = make_embedder(engine)
        vectors[engine] = (np.array(embedder.embed(turn_texts)), np.array(embedder.embed(question_texts)))
    best_onnx, pairs_onnx = pair_stats(vectors["onnx"][0], turns)
    print(f"\nwrite-path thresholds over {len(turns)} LoCoMo turns (5 conversations)")
    for engine in ("onnx", "static"):
        best, pairs = pair_stats(vectors[engine][0], turns)
        print(
            f"  {engine:<7} turns with an earlier turn >= 0.95: {int((best >= 0.95).sum()):5d}   pairs >= 0.70: "
            f"{(pairs >= 0.70).mean():7.2%}   median pair cosine {np.median(pairs):.3f}"
        )
    best_static, pairs_static = pair_stats(vectors["static"][0], turns)
    same_dups = np.sort(best_static)[::-1][int((best_onnx >= 0.95).sum())]
    same_pairs = np.quantile(pairs_static, 1 - (pairs_onnx >= 0.70).mean())
    print(
        f"  static cosines selecting as many as onnx does: near-duplicate {same_dups:.3f},"
        f" contradiction {same_pairs:.3f}"
    )
    cosines = (vectors["onnx"][0] * vectors["static"][0]).sum(axis=1)
    print(f"  cosine static vs onnx, same turn: mean {cosines.mean():.3f}, min {cosines.min():.3f}")

    print("\ndense R@10 (cosine only, questions against their conversation's turns)")
    print(f"  {'engine':<8}" + "".join(f"{name:>13}" for name in CATEGORIES.values()) + f"{'pooled':>9}")
    for engine in ("onnx", "static"):
        per_cat = dense_recall(*vectors[engine], turns, questions)
        pooled = np.mean([x for rows in per_cat.values() for x in rows])
        print(f"  {engine:<8}" + "".join(f"{np.mean(per_cat[c]):>13.3f}" for c in CATEGORIES) + f"{pooled:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
