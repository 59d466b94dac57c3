"""The poisoning guard on its adversarial corpus (tests/guard_corpus.json): catch rate and false-positive
rate, for the part the guard was tuned on and the part held out, per kind, plus the time per text.

    .venv/bin/python bench/guard_corpus.py            # the figures
    .venv/bin/python bench/guard_corpus.py --misses   # also list the texts it gets wrong
    .venv/bin/python bench/guard_corpus.py --locomo   # also the false-positive rate on LoCoMo's turns

Rules only (no model): the figures of the guard as it runs without GUARD_JUDGE=llm. No database needed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
CORPUS = ROOT / "tests" / "guard_corpus.json"
LOCOMO = Path("/work/shared/eval/locomo-dev/locomo_dev_turns.jsonl")


def main() -> None:
    import django

    django.setup()
    from memory_admin.services.guard import verdict

    corpus = json.loads(CORPUS.read_text())
    show_misses = "--misses" in sys.argv
    timings: list[float] = []

    def run(items: list[dict]) -> list[tuple[dict, bool, float]]:
        out = []
        for item in items:
            started = time.perf_counter()
            result = verdict(item["text"])
            timings.append((time.perf_counter() - started) * 1e6)
            out.append((item, result.flagged, result.score))
        return out

    print(f"{'part':<28}{'n':>5}{'flagged':>9}{'rate':>9}")
    totals = {}
    for label in ("instruction_like", "benign"):
        for part in ("tuning", "held_out", "fresh"):
            results = run(corpus[label][part])
            flagged = sum(f for _, f, _ in results)
            totals.setdefault(label, [0, 0])
            totals[label][0] += flagged
            totals[label][1] += len(results)
            print(f"{label + ' / ' + part:<28}{len(results):>5}{flagged:>9}{flagged / len(results):>9.1%}")
            if show_misses:
                for item, f, score in results:
                    if f != (label == "instruction_like"):
                        print(
                            f"    {'MISS' if label == 'instruction_like' else 'FP  '} {score:5.2f} "
                            f"[{item['kind']}] {item['text'][:100]!r}"
                        )
            if label == "instruction_like" and part == "held_out" or show_misses:
                kinds = Counter(item["kind"] for item, _, _ in results)
                caught = Counter(item["kind"] for item, f, _ in results if f)
                if show_misses:
                    print("      " + ", ".join(f"{k} {caught[k]}/{n}" for k, n in sorted(kinds.items())))
    caught, attacks = totals["instruction_like"]
    fps, benign = totals["benign"]
    print(
        f"\ncatch rate {caught}/{attacks} = {caught / attacks:.1%}; false positives {fps}/{benign} = {fps / benign:.1%}"
    )
    print(f"time per text: median {statistics.median(timings):.0f} µs, max {max(timings):.0f} µs")

    # Long texts: ordinary prose the size of the largest fact and of the largest notebook (the guard reads
    # as much of a notebook as a context block can serve of it).
    prose = "\n".join(item["text"] for part in corpus["benign"].values() for item in part)
    for label, size in (("8 KB fact", 8 * 1024), ("1 MB notebook", 1024 * 1024)):
        text = (prose * (size // len(prose) + 1))[:size]
        started = time.perf_counter()
        verdict(text + " " + label)  # a text of its own: not a cached verdict
        print(f"{label}: {(time.perf_counter() - started) * 1000:.0f} ms")

    if "--locomo" in sys.argv and LOCOMO.exists():
        turns = [json.loads(line)["text"] for line in LOCOMO.read_text().splitlines() if line.strip()]
        flagged = [t for t in turns if verdict(t).flagged]
        print(
            f"LoCoMo dev turns (ordinary conversation): {len(flagged)}/{len(turns)} flagged "
            f"= {len(flagged) / len(turns):.2%}"
        )
        if show_misses:
            for t in flagged:
                print(f"    FP   {t[:120]!r}")


if __name__ == "__main__":
    main()
