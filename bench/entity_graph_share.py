"""How much of the entity graph the offline drawing makes real: the share of entities with a type (not
`other`) and the share that take part in at least one relation, on the LoCoMo dev conversations.

Each turn's memory text is drawn as a stored fact's would be (services.entity_draw.draw: names, types,
relations; no model, no database); an entity is a folded name within one conversation (one memory
user), typed if any mention of it is typed, related if any relation names it. Run it against two trees
to compare (before/after):

    .venv/bin/python bench/entity_graph_share.py [--data /work/shared/eval/locomo-dev]     # this tree
    cd /work/main && .venv/bin/python /path/to/this/bench/entity_graph_share.py --tree /work/main

(run from the measured tree's directory: an editable install resolves `extraction` by the working
directory otherwise). Measured (LoCoMo dev, 2,760 turns, pooled): before typed 0.03, related 0.11
(331 entities, 27 relations); after typed 0.20, related 0.16 (245 entities, 30 relations).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, default=ROOT, help="the source tree to measure")
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--show", type=int, default=0, help="print this many entities of each conversation")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    import django

    django.setup()
    from memory_admin.models.entities import fold_name
    from memory_admin.services.entity_draw import draw

    turns = [json.loads(line) for line in (args.data / "locomo_dev_turns.jsonl").open()]
    by_sample: dict[str, list[str]] = collections.defaultdict(list)
    for turn in turns:
        by_sample[turn["sample_id"]].append(turn["memory_text"])
    started = time.perf_counter()
    totals = collections.Counter()
    types_seen: collections.Counter = collections.Counter()
    relation_types: collections.Counter = collections.Counter()
    print(f"tree: {args.tree}")
    print(f"{'conversation':<14}{'turns':>7}{'entities':>10}{'typed':>8}{'related':>9}{'relations':>11}")
    for sample, texts in sorted(by_sample.items()):
        kinds: dict[str, str] = {}
        related: set[str] = set()
        edges: set[tuple[str, str, str]] = set()
        for text in texts:
            mentions, relations = draw(text)
            for m in mentions:
                key = fold_name(m.name)
                if kinds.get(key, "other") == "other":
                    kinds[key] = m.type
            for r in relations:
                s, o = fold_name(r.subject), fold_name(r.object)
                if s in kinds and o in kinds and s != o:
                    related.update((s, o))
                    edges.add((s, r.type, o))
                    relation_types[r.type] += 1
        typed = sum(1 for t in kinds.values() if t != "other")
        types_seen.update(kinds.values())
        totals.update(entities=len(kinds), typed=typed, related=len(related), relations=len(edges), turns=len(texts))
        n = max(len(kinds), 1)
        print(f"{sample:<14}{len(texts):>7}{len(kinds):>10}{typed / n:>8.2f}{len(related) / n:>9.2f}{len(edges):>11}")
        if args.show:
            print("   ", ", ".join(f"{k}:{t}" for k, t in list(kinds.items())[: args.show]))
    n = max(totals["entities"], 1)
    print(
        f"{'pooled':<14}{totals['turns']:>7}{totals['entities']:>10}{totals['typed'] / n:>8.2f}"
        f"{totals['related'] / n:>9.2f}{totals['relations']:>11}"
    )
    print("types:", dict(types_seen.most_common()))
    print("relation types:", dict(relation_types.most_common(12)))
    print(f"drawn in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
