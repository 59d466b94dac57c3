"""Dump what retrieval answers on the LoCoMo dev questions (every search's ranked ids and scores, every
context block's text and sections), so that two versions of the code can be compared byte for byte.

Runs in-process on a database ingested by retrieval_locomo.py (`--db`), reads only (no access is
recorded, so the database stays as it was), and writes one JSON line per question and budget. The
block's nonce is drawn per response; it is written as NONCE. Timings are left out.

    python bench/retrieval_dump.py --db bench_locomo --out /tmp/after.jsonl
    PYTHONPATH=$OTHER python $OTHER/bench/retrieval_dump.py --db bench_locomo --out /tmp/before.jsonl
    cmp /tmp/before.jsonl /tmp/after.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from _harness import database_url, setup_django
from retrieval_locomo import load

BUDGETS = (500, 2000)
_NONCE = re.compile(r"(<<<(?:END_)?MEMORY_DATA )[0-9a-f]{16}(>>>)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--db", default="bench_locomo")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--questions", default="", help="only these questions, by position (e.g. 3,17,40)")
    args = parser.parse_args()
    budgets = tuple(int(b) for b in args.budgets.split(","))
    _, questions = load(args.data)
    if args.questions:
        questions = [questions[int(i)] for i in args.questions.split(",")]
    setup_django(database_url(args.db, fresh=False))
    from memory_admin.models import MemoryUser, Tenant
    from memory_admin.selectors.access import Principal

    try:
        from memory_admin.retrieval import fact_search
        from memory_admin.retrieval.context import context_block
    except ImportError:  # a checkout from before retrieval/ (the "before" side of a comparison)
        from memory_admin.selectors.search import fact_search
        from memory_admin.services.context import context_block

    tenant = Tenant.objects.get(slug="locomo")
    principal = Principal(tenant_id=tenant.pk, role="agent", actor="agent:dump", agent_id=1, api_key_id=1)
    users = {u.external_id: u for u in MemoryUser.objects.filter(tenant=tenant)}
    with args.out.open("w") as out:
        for q in questions:
            user = users[q["sample_id"]]
            result = fact_search(principal=principal, memory_user=user, query=q["question"], k=args.k, record=False)
            hits = [[str(h.fact.pk), h.components()] for h in result.hits]
            out.write(json.dumps({"q": q["question"], "search": hits, "candidates": result.candidates}) + "\n")
            for budget in budgets:
                block = context_block(
                    principal=principal, memory_user=user, task=q["question"], budget_tokens=budget, record=False
                )
                block.pop("timings")
                block["text"] = _NONCE.sub(r"\1NONCE\2", block["text"])
                out.write(json.dumps({"q": q["question"], "budget": budget, "block": block}) + "\n")
    print(f"{len(questions)} questions, budgets {budgets}: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
