"""How many relations a real corpus nobody here wrote states, by the drawing document chunks get
(knowledge/entities.py): the READMEs the installed packages carry in their metadata (bench/knowledge_ingest.py's
corpus), cut into chunks as ingestion cuts them, each read by `chunk_draw`, the drawing's own rule (two
proper names of the text, not the document's "I", fit to reach an agent, a type that passes
`relation_type`). No database: what is counted is what the drawing would store, before two chunks' equal edges fold
into one.

    .venv/bin/python bench/knowledge_relations.py               # the 100 longest READMEs
    .venv/bin/python bench/knowledge_relations.py --limit 300 --sample 20
    .venv/bin/python bench/knowledge_relations.py --files /usr/lib/python3.11/LICENSE.txt   # any prose

Prints chunks, relations, relations per 100 chunks, the types, and a seeded random sample of relations with
the sentence they came from, for a person to judge (precision is not computed: nobody labelled them).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--sample", type=int, default=10)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--files", nargs="*", help="read these text files instead of the READMEs")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    import django

    django.setup()  # no database is opened

    from knowledge_ingest import corpus

    from memory_admin.knowledge.chunking import chunk_text
    from memory_admin.knowledge.conf import CHUNK_TOKENS
    from memory_admin.knowledge.entities import chunk_draw

    chunks = 0
    found: list[tuple[str, str, str, str, str]] = []  # package, subject, type, object, chunk text
    started = time.perf_counter()
    docs = [(p, "text", Path(p).read_text(errors="replace")) for p in args.files] if args.files else None
    for package, _kind, text in docs or corpus(args.limit):
        for chunk in chunk_text(text, max_tokens=CHUNK_TOKENS()):
            chunks += 1
            for subject, kind, object_ in chunk_draw(chunk.text)[1]:
                found.append((package, subject, kind, object_, chunk.text))
    seconds = time.perf_counter() - started
    print(f"documents: {len(docs) if docs else args.limit}, chunks: {chunks}, relations: {len(found)}")
    print(f"relations per 100 chunks: {100 * len(found) / max(chunks, 1):.2f}  ({seconds:.1f} s to draw)")
    print("types:", dict(Counter(kind for _, _, kind, _, _ in found).most_common()))
    rng = random.Random(args.seed)
    for package, subject, kind, object_, text in rng.sample(found, min(args.sample, len(found))):
        at = max(text.casefold().find(subject), 0)
        print(f"\n[{package}] {subject} -[{kind}]-> {object_}\n    …{text[max(at - 80, 0) : at + 160]!r}")


if __name__ == "__main__":
    main()
