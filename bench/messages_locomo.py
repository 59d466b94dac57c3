"""Retrieval over the conversation path (issue 33), on the LoCoMo development split, through the real API.

What an agent does: each conversation is one memory user of a fresh tenant (in a database of the
benchmark's own); each session is one thread, its turns posted with POST /users/{id}/messages (role
user, content = memory_text, created_at = the turn's time), then the thread is closed. A real Celery
worker and beat (no LLM configured: the offline extractor) extract the facts and index the messages; the
benchmark waits until nothing is pending, then asks every question of categories 1-4 through /search.

A hit counts for a turn when it is that turn's message, or a fact extracted from that turn's message
(`Fact.message`). Printed twice: `kinds=fact` (the facts alone: the path before messages were
searchable) and the default kinds (facts and messages ranked together, deduplicated).

    .venv/bin/python bench/messages_locomo.py [--data /work/shared/eval/locomo-dev] [--k 20] [--reuse]
        [--kinds "fact;fact,message"]

A `--reuse` run reads the facts again, and reads raise their effective confidence: compare two trees on
one database with runs taken back to back.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _harness import PYTHON, ROOT, Client, Server, database_url, django_env, migrate, setup_django
from retrieval_locomo import bench_keys, load, report

KS = (1, 5, 10, 20)


def post_conversation(port: int, key: str, sample: str, turns: list[dict]) -> dict[int, str]:
    """Post one conversation, a thread per session, each closed after its turns: message id -> dia_id."""
    client = Client(port, key)
    by_session: dict[int, list[dict]] = collections.defaultdict(list)
    for turn in turns:
        by_session[turn["session"]].append(turn)
    dia_of: dict[int, str] = {}
    for session, session_turns in sorted(by_session.items()):
        thread = f"{sample}-session-{session}"
        status, body, _ = client.request(
            "POST",
            f"/api/v1/users/{sample}/messages",
            {
                "thread_id": thread,
                "messages": [
                    {"role": "user", "content": t["memory_text"], "created_at": t["timestamp"] + "+00:00"}
                    for t in session_turns
                ],
            },
        )
        assert status == 202, body
        dia_of.update(zip(body["message_ids"], (t["dia_id"] for t in session_turns), strict=True))
        status, body, _ = client.request("POST", f"/api/v1/users/{sample}/threads/{thread}/close", {})
        assert status == 202, body
    return dia_of


class Background:
    """A Celery worker and beat of the benchmark's database, as `manage.py up` runs them."""

    def __init__(self, url: str):
        self.logdir = Path(tempfile.mkdtemp(prefix="messages-locomo-"))
        env = django_env(url)
        for name in ("OPENAI_API_KEY", "LLM_BASE_URL", "LLM_API_KEY"):  # the offline extractor
            env.pop(name, None)
        celery = [PYTHON, "-m", "celery", "-A", "memory_admin"]
        self.procs = [
            subprocess.Popen(
                celery + args,
                cwd=ROOT,
                env=env,
                stdout=(self.logdir / f"{name}.log").open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for name, args in (
                ("worker", ["worker", "--loglevel=WARNING", "--pool=prefork", "--concurrency=2", "--without-mingle"]),
                ("beat", ["beat", "--loglevel=WARNING", "-s", str(self.logdir / "beat-schedule")]),
            )
        ]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def wait_for_worker(limit_s: float = 3600) -> None:
    """Until every message is extracted (or skipped) and indexed, and no batch is pending."""
    from memory_admin.models import ExtractionBatch, Message

    t0 = time.time()
    while time.time() - t0 < limit_s:
        pending = Message.objects.filter(status=Message.Status.PENDING).count()
        unindexed = Message.objects.filter(search_due=True).count()
        batches = ExtractionBatch.objects.exclude(status__in=["done", "failed"]).count()
        if not (pending or unindexed or batches):
            print(f"worker done in {time.time() - t0:.0f} s")
            return
        time.sleep(2)
    raise RuntimeError(f"the worker did not finish: {pending} pending, {unindexed} unindexed, {batches} batches")


def evaluate(
    port: int, key: str, questions: list[dict], dia_of_message: dict[int, str], dia_of_fact: dict, k: int, kinds: str
):
    client = Client(port, key)
    per_cat: dict[int, list[dict]] = collections.defaultdict(list)
    latencies = []
    shown = collections.Counter()
    for q in questions:
        t0 = time.perf_counter()
        status, body, _ = client.request(
            "GET", f"/api/v1/users/{q['sample_id']}/search", params={"q": q["question"], "k": k, "kinds": kinds}
        )
        latencies.append((time.perf_counter() - t0) * 1000)
        assert status == 200, body
        ranked = []
        for h in body["hits"]:
            shown[h["kind"]] += 1
            if h["kind"] == "message":
                ranked.append({dia_of_message.get(h["message"]["id"])})
            else:
                ranked.append({dia_of_fact.get(h["fact"]["id"])})
        evidence = set(q["evidence"])
        row = {}
        for cut in KS:
            found = set().union(*ranked[:cut]) if ranked[:cut] else set()
            row[f"R@{cut}"] = len(evidence & found) / len(evidence)
        row["hit@10"] = float(any(evidence & ids for ids in ranked[:10]))
        first = next((i for i, ids in enumerate(ranked) if evidence & ids), None)
        row["MRR"] = 1.0 / (first + 1) if first is not None else 0.0
        per_cat[q["category"]].append(row)
    return per_cat, latencies, shown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/eval/locomo-dev"))
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--db", default="bench_messages_locomo")
    parser.add_argument("--reuse", action="store_true", help="keep the database of a previous run (skip posting)")
    parser.add_argument(
        "--kinds", default="fact;fact,message", help="the kinds searched, one evaluation each, separated by ';'"
    )
    args = parser.parse_args()

    turns, questions = load(args.data)
    url = database_url(args.db, fresh=not args.reuse)
    state = Path(f"/tmp/{args.db}_state.json")
    if not args.reuse:
        migrate(url)
    setup_django(url)
    from memory_admin.models import Fact

    key, admin_key = bench_keys()
    with Server(url) as server:
        if args.reuse:
            dia_of_message = {int(m): d for m, d in json.loads(state.read_text()).items()}
        else:
            status, body, _ = Client(server.port, admin_key).request("PATCH", "/api/v1/settings", {"fact_cap": 100000})
            assert status == 200, body
            background = Background(url)
            try:
                by_sample: dict[str, list[dict]] = collections.defaultdict(list)
                for turn in turns:
                    by_sample[turn["sample_id"]].append(turn)
                t0 = time.time()
                with ThreadPoolExecutor(len(by_sample)) as pool:
                    maps = list(pool.map(lambda s: post_conversation(server.port, key, s, by_sample[s]), by_sample))
                dia_of_message = {m: d for part in maps for m, d in part.items()}
                print(f"posted {len(turns)} turns of {len(by_sample)} conversations in {time.time() - t0:.0f} s")
                wait_for_worker()
            finally:
                background.stop()
            state.write_text(json.dumps(dia_of_message))
        dia_of_fact = {
            str(fid): dia_of_message.get(mid)
            for fid, mid in Fact.objects.filter(message__isnull=False).values_list("id", "message_id")
        }
        print(f"{len(dia_of_message)} messages, {len(dia_of_fact)} facts extracted from them")
        for kinds in args.kinds.split(";"):
            per_cat, latencies, shown = evaluate(
                server.port, key, questions, dia_of_message, dia_of_fact, args.k, kinds
            )
            print(
                f"\nkinds={kinds}: {len(questions)} questions; search latency p50 "
                f"{sorted(latencies)[len(latencies) // 2]:.1f} ms (including query embedding); hits shown {dict(shown)}"
            )
            report(per_cat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
