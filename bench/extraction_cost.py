"""What drawing entities and relations in the extraction call costs (issue 13): LLM calls and tokens per
20-message conversation, before (the extraction prompt as it was before the graph fields, read from
git) and after (today's prompt), through the real pipeline against the fake OpenAI-compatible server
(tests/fake_openai.py, real HTTP).

Each LoCoMo dev conversation is cut into runs of 20 consecutive turns; each run is posted as one thread
(the first speaker as the user, the other as the assistant) and closed, which extracts it (one call)
and builds its episode (one summary call); the write path may add judge/guard calls. Both modes see the
same runs, alternating run by run, each in a tenant of its own.

Tokens are counted with cl100k_base on what crossed the wire: the prompt as the chat format counts it
(3 tokens per message + role + content, + 3 to prime the reply), the completion as the JSON the server
sent. The fake server answers with a reference completion built from LoCoMo's own annotations, so
that it is what a good model would say rather than a guess:
- facts: the conversation's "observation" annotations whose evidence turn lies in the run (the
  statements the dataset's authors drew from those turns), each with category, kind, confidence, key
  null and the index of its evidence message in the prompt;
- after only, the graph: every fact's capitalised names (the speakers as persons; runs of capitalised
  words elsewhere, e.g. "LGBTQ", "Sweden"), listed under the fact's "entities" and once in
  "entities" (the speakers with their first name as alias), and one relation per fact whose subject is
  a speaker and that names another entity: speaker -[the verb after the speaker's name]-> that entity.

    .venv/bin/python bench/extraction_cost.py                 # every run of the dev split
    .venv/bin/python bench/extraction_cost.py --runs 30       # the first 30 runs
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from _harness import ROOT, database_url, migrate, setup_django

sys.path.insert(0, str(ROOT))
from tests.fake_openai import _LINE, FakeOpenAI  # noqa: E402

RUN = 20
# The commit that added the graph fields to the extraction prompt; its parent has the prompt before.
GRAPH_COMMIT = "fadb4cb29b05701289ae926afcc9569865fe9dea"
_NAME = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")
_COMMON = {"The", "A", "An", "She", "He", "They", "Her", "His", "Their", "It", "This", "That", "In", "On", "At"}


def prompt_before() -> str:
    """EXTRACTION_SYSTEM as it was before GRAPH_COMMIT, read from git (measured, not reconstructed)."""
    source = subprocess.run(
        ["git", "show", f"{GRAPH_COMMIT}^:extraction/schemas.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "EXTRACTION_SYSTEM" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("EXTRACTION_SYSTEM not found in the parent of the graph commit")


def load_runs(data: Path) -> list[dict]:
    """Runs of RUN consecutive turns per conversation, with the observations drawn from their turns."""
    records = json.loads((data / "locomo_dev.json").read_text())
    turns = [json.loads(line) for line in (data / "locomo_dev_turns.jsonl").open()]
    by_sample: dict[str, list[dict]] = defaultdict(list)
    for turn in turns:
        by_sample[turn["sample_id"]].append(turn)
    runs = []
    for record in records:
        observed: dict[str, list[tuple[str, str]]] = defaultdict(list)  # dia_id -> [(speaker, statement)]
        for per_session in record["observation"].values():
            for speaker, items in per_session.items():
                for statement, evidence in items:
                    for dia_id in [evidence] if isinstance(evidence, str) else evidence:
                        observed[dia_id].append((speaker, statement))
        sample_turns = by_sample[record["sample_id"]]
        speakers = list(dict.fromkeys(t["speaker"] for t in sample_turns))
        for start in range(0, len(sample_turns), RUN):
            chunk = sample_turns[start : start + RUN]
            runs.append(
                {
                    "sample": record["sample_id"],
                    "thread": f"run-{start // RUN}",
                    "turns": chunk,
                    "user": speakers[0],
                    "speakers": speakers,
                    "observations": [(t["dia_id"], *o) for t in chunk for o in observed.get(t["dia_id"], [])],
                }
            )
    return runs


def names_in(statement: str, speakers: list[str]) -> list[str]:
    found = []
    for match in _NAME.finditer(statement):
        words = match.group(0).split()
        while words and words[0] in _COMMON:
            words = words[1:]
        name = " ".join(words).removesuffix("'s")
        if name and name not in found:
            found.append(name)
    return [next((s for s in speakers if s == n), n) for n in found]


def reference(run: dict, prompt: str, *, graph: bool) -> dict:
    """The completion a good model would give for this run (see the module docstring)."""
    index_of = {}
    text_of = {t["text"].strip(): t["dia_id"] for t in run["turns"]}
    for line in prompt.splitlines():
        m = _LINE.match(line)
        if m and m.group(3).strip() in text_of:
            index_of[text_of[m.group(3).strip()]] = int(m.group(1))
    facts, entities, relations = [], {}, []
    for dia_id, speaker, statement in run["observations"]:
        if dia_id not in index_of:
            continue  # its turn was not extraction input (too short, filtered)
        fact = {
            "content": statement,
            "category": "personal",
            "kind": "fact",
            "confidence": 0.9,
            "key": None,
            "message": index_of[dia_id],
        }
        if graph:
            names = names_in(statement, run["speakers"])
            fact["entities"] = names
            for name in names:
                is_speaker = name in run["speakers"]
                aliases = [name.split()[0]] if is_speaker and " " in name else []
                entities.setdefault(
                    name, {"name": name, "type": "person" if is_speaker else "other", "aliases": aliases}
                )
            others = [n for n in names if n != speaker]
            verb = re.search(rf"{re.escape(speaker)}(?:'s)?\s+(?:is\s+|has\s+|was\s+)?(\w+)", statement)
            if speaker in names and others and verb:
                relations.append(
                    {"subject": speaker, "type": verb.group(1).lower(), "object": others[0], "fact": len(facts)}
                )
        facts.append(fact)
    answer = {"facts": facts, "user_context": []}
    if graph:
        answer |= {"entities": list(entities.values()), "relations": relations}
    return answer


def chat_tokens(count, system: str, user: str) -> int:
    """Prompt tokens as the chat format counts them for cl100k models."""
    return sum(3 + count(role) + count(content) for role, content in (("system", system), ("user", user))) + 3


def run_mode(run: dict, mode: str, ctx: dict) -> dict:
    """Post one run as a thread of its own in the mode's tenant and close it; what it cost."""
    from extraction import pipeline
    from memory_admin.models import MemoryUser, Thread
    from memory_admin.services.extraction import MessageIn, message_post

    fake, principal = ctx["fake"], ctx["principals"][mode]
    pipeline.EXTRACTION_SYSTEM = ctx["prompts"][mode]
    fake.extraction = lambda prompt: reference(run, prompt, graph=mode == "after")
    user, _ = MemoryUser.objects.get_or_create(tenant_id=principal.tenant_id, external_id=run["sample"])
    messages = [
        MessageIn(
            "user" if t["speaker"] == run["user"] else "assistant",
            t["text"],
            datetime.fromisoformat(t["timestamp"]).astimezone(),
        )
        for t in run["turns"]
    ]
    message_post(principal=principal, memory_user=user, thread_id=run["thread"], messages=messages)
    before = len(fake.calls)
    t0 = time.perf_counter()
    pipeline.close_thread(Thread.objects.get(memory_user=user, external_id=run["thread"]).pk)
    elapsed = time.perf_counter() - t0
    calls = fake.calls[before:]
    count = ctx["count"]
    out = {"calls": Counter(c["layer"] for c in calls), "seconds": elapsed}
    for c in calls:
        layer = c["layer"]
        out[f"{layer}_prompt"] = out.get(f"{layer}_prompt", 0) + chat_tokens(count, c["system"], c["prompt"])
        out[f"{layer}_completion"] = out.get(f"{layer}_completion", 0) + count(c.get("completion", ""))
    return out


def summarise(results: list[dict], label: str) -> dict:
    layers = sorted({layer for r in results for layer in r["calls"]})
    calls = {layer: statistics.mean(r["calls"].get(layer, 0) for r in results) for layer in layers}
    row = {"calls": calls, "calls_total": sum(calls.values())}
    for part in ("prompt", "completion"):
        row[f"extraction_{part}"] = statistics.mean(r.get(f"extraction_{part}", 0) for r in results)
        row[f"all_{part}"] = statistics.mean(sum(r.get(f"{la}_{part}", 0) for la in layers) for r in results)
    row["extraction_total"] = row["extraction_prompt"] + row["extraction_completion"]
    row["all_total"] = row["all_prompt"] + row["all_completion"]
    print(
        f"{label:<7} calls/run {row['calls_total']:.2f} ({', '.join(f'{k} {v:.2f}' for k, v in calls.items())})   "
        f"extraction tokens: prompt {row['extraction_prompt']:.0f} + completion {row['extraction_completion']:.0f}"
        f" = {row['extraction_total']:.0f}   all calls: {row['all_total']:.0f}",
        flush=True,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--runs", type=int, default=0, help="the first N runs only (0: all)")
    parser.add_argument("--db", default="bench_extraction_cost")
    args = parser.parse_args()

    fake = FakeOpenAI().start()
    os.environ.update(OPENAI_API_KEY="sk-bench-not-a-real-key", OPENAI_BASE_URL=fake.base_url)
    url = database_url(args.db, fresh=True)
    migrate(url)
    setup_django(url)
    from extraction import schemas
    from memory_admin import celery as celery_module
    from memory_admin.selectors.access import Principal
    from memory_admin.services.tenants import tenant_create
    from memory_admin.tokens import count_tokens

    celery_module.dispatch = lambda *a, **k: None  # no worker: close_thread extracts inline
    prompts = {"before": prompt_before(), "after": schemas.EXTRACTION_SYSTEM}
    ctx = {
        "fake": fake,
        "count": count_tokens,
        "prompts": prompts,
        "principals": {m: Principal.system(tenant_create(slug=f"cost-{m}").pk) for m in prompts},
    }
    print(
        f"system prompt tokens: before {count_tokens(prompts['before'])}, after {count_tokens(prompts['after'])}",
        flush=True,
    )
    runs = load_runs(args.data)
    runs = runs[: args.runs] if args.runs else runs
    results: dict[str, list[dict]] = {"before": [], "after": []}
    for number, run in enumerate(runs):
        order = ("before", "after") if number % 2 == 0 else ("after", "before")
        for mode in order:
            results[mode].append(run_mode(run, mode, ctx))
    fake.stop()
    print(f"{len(runs)} runs of up to {RUN} messages (LoCoMo dev), per run:")
    rows = {mode: summarise(results[mode], mode) for mode in ("before", "after")}
    b, a = rows["before"], rows["after"]
    print(
        f"calls: {b['calls_total']:.2f} -> {a['calls_total']:.2f} per run; "
        f"extraction tokens +{100 * (a['extraction_total'] / b['extraction_total'] - 1):.1f} % "
        f"(prompt +{100 * (a['extraction_prompt'] / b['extraction_prompt'] - 1):.1f} %, "
        f"completion +{100 * (a['extraction_completion'] / b['extraction_completion'] - 1):.1f} %); "
        f"all calls' tokens +{100 * (a['all_total'] / b['all_total'] - 1):.1f} %",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
