"""How much the offline extractor (extraction/rules.py, used when no LLM is configured) draws from
conversations, and how right it is (issue 33).

1. The LoCoMo dev conversations (`/work/shared/eval/locomo-dev`), turn by turn as an agent would post them:
   each session one thread, so one extraction batch of its turns, in order, each turn at its session's
   time. Two ways of posting:
   - `named`: every turn as a user message reading "Speaker: text [shares a photo: caption]" (the
     dataset's `memory_text`), as an agent relaying a two-person chat posts it;
   - `plain`: the turn's text alone, the first speaker as the user and the other as the assistant.
   It prints facts per turn and the share of turns with at least one fact, and a few facts drawn.
2. The labelled sentences of tests/extraction/data/labelled_sentences.json (written before tuning; the
   file says how): precision (extracted facts that match an expected fact) and recall (expected facts
   matched by an extracted one); the same for labelled_heldout.json (written after tuning, never tuned on).

The extraction function is called directly (no HTTP, no database): what it returns is what the
pipeline hands to the write path, fact by fact.

    PYTHONPATH=$PWD .venv/bin/python bench/offline_extraction.py
    PYTHONPATH=$PWD .venv/bin/python bench/offline_extraction.py --show 20    # print 20 labelled misses
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")

import django  # noqa: E402

django.setup()

from django.utils import timezone  # noqa: E402

from extraction import rules  # noqa: E402

LOCOMO = Path(os.environ.get("LOCOMO_DEV", "/work/shared/eval/locomo-dev"))
LABELLED = ROOT / "tests" / "extraction" / "data" / "labelled_sentences.json"
HELD_OUT = ROOT / "tests" / "extraction" / "data" / "labelled_heldout.json"


def _extract(messages: list[tuple[int, str, str]], times: dict[int, datetime]) -> list:
    # rules-v1 took no message times; the bench measures it too (the "before" figures).
    if "times" in inspect.signature(rules.extract).parameters:
        return rules.extract(messages, times=times)
    return rules.extract(messages)


def _aware(text: str) -> datetime:
    return timezone.make_aware(datetime.fromisoformat(text), timezone.get_current_timezone())


def locomo(mode: str) -> tuple[int, int, int, list[str], float]:
    """(turns, facts, turns with a fact, every fact's text, seconds) over the dev split."""
    sessions: dict[tuple[str, int], list[dict]] = defaultdict(list)
    first_speaker: dict[str, str] = {}
    with open(LOCOMO / "locomo_dev_turns.jsonl") as f:
        for line in f:
            turn = json.loads(line)
            sessions[(turn["sample_id"], turn["session"])].append(turn)
            first_speaker.setdefault(turn["sample_id"], turn["speaker"])
    turns = facts = with_fact = 0
    texts: list[str] = []
    seconds = 0.0
    for (sample, _), rows in sorted(sessions.items()):
        rows.sort(key=lambda t: t["turn"])
        messages, times = [], {}
        for i, turn in enumerate(rows):
            if mode == "named":
                role, content = "user", turn["memory_text"]
            else:
                role = "user" if turn["speaker"] == first_speaker[sample] else "assistant"
                content = turn["text"]
            messages.append((i, role, content))
            times[i] = _aware(turn["timestamp"])
        started = time.perf_counter()
        found = _extract(messages, times)
        seconds += time.perf_counter() - started
        turns += len(rows)
        facts += len(found)
        with_fact += len({f.message_index for f in found})
        texts += [f.content for f in found]
    return turns, facts, with_fact, texts, seconds


def _matches(fact: str, expected: list[str]) -> bool:
    low = fact.lower()
    return all(any(alt in low for alt in group.split("|")) for group in expected)


def labelled(show: int, path: Path = LABELLED) -> tuple[float, float, int, int, int, int]:
    if not path.exists():
        return 1.0, 1.0, 0, 0, 0, 0
    data = json.loads(path.read_text())["sentences"]
    produced = right = expected = found = 0
    misses: list[str] = []
    for row in data:
        content = f"{row['speaker']}: {row['text']}" if row.get("speaker") else row["text"]
        at = _aware(row.get("at", "2026-11-27T12:00"))
        facts = [f.content for f in _extract([(0, row["role"], content)], {0: at})]
        produced += len(facts)
        right += sum(1 for fact in facts if any(_matches(fact, e) for e in row["expect"]))
        expected += len(row["expect"])
        hit = [e for e in row["expect"] if any(_matches(fact, e) for fact in facts)]
        found += len(hit)
        wrong = [fact for fact in facts if not any(_matches(fact, e) for e in row["expect"])]
        if wrong or len(hit) < len(row["expect"]):
            missed = [e for e in row["expect"] if e not in hit]
            misses.append(f"  {content!r}\n    got {facts}\n    missed {missed}  wrong {wrong}")
    for line in misses[:show]:
        print(line)
    precision = right / produced if produced else 1.0
    recall = found / expected if expected else 1.0
    return precision, recall, produced, right, expected, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--show", type=int, default=0, help="print this many labelled sentences that were wrong")
    parser.add_argument("--sample", type=int, default=12, help="print this many LoCoMo facts (random, seed 33)")
    args = parser.parse_args()
    print(f"extractor {rules.NAME}")
    for mode in ("named", "plain"):
        turns, facts, with_fact, texts, seconds = locomo(mode)
        print(
            f"LoCoMo dev ({mode}): {turns} turns, {facts} facts, {facts / turns:.3f} facts/turn, "
            f"{with_fact / turns:.1%} of turns with >=1 fact, {seconds / turns * 1e3:.2f} ms/turn"
        )
        for text in random.Random(33).sample(texts, min(args.sample, len(texts))) if mode == "named" else []:
            print(f"    {text}")
    for path in (LABELLED, HELD_OUT):
        precision, recall, produced, right, expected, found = labelled(args.show, path)
        print(
            f"labelled ({path.name}): precision {precision:.3f} ({right}/{produced} facts), "
            f"recall {recall:.3f} ({found}/{expected} expected facts)"
        )


if __name__ == "__main__":
    main()
