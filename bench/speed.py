"""Hot-path figures per embedding engine: query embedding on one core, search, writes, memory, start-up.

    python bench/speed.py                      # torch (before) and onnx (after), side by side
    python bench/speed.py --engines onnx --requests 300

For each engine (EMBEDDER=torch, EMBEDDER=onnx), in separate processes:

- query embedding: the engine loaded in a process pinned to one core (one intra-op thread), 300 LoCoMo
  questions embedded one by one; load time and RSS after loading.
- a fresh database `bench_speed_<engine>`, gunicorn (2 workers × 8 threads) on 127.0.0.1: time from
  starting gunicorn to the first /search answer (model loading included), then from one keep-alive
  client: add one fact (POST /facts, every gate on) p50, search k=10 p50 (client, server excluding
  embedding from Server-Timing, and the server's embedding time), POST /facts/batch facts/s (batches of
  50, every gate on), and single writes/s from 4 concurrent clients; RSS/PSS of each web worker after.

Texts are LoCoMo dev turns (facts) and questions (queries), read at run time from
/work/shared/eval/locomo-dev; every query is distinct, so the query-embedding LRU never answers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (  # noqa: E402
    PYTHON,
    ROOT,
    Client,
    Server,
    database_url,
    django_env,
    migrate,
    percentile,
    server_timing,
    setup_django,
)

DATA = Path("/work/shared/eval/locomo-dev")


def texts() -> tuple[list[str], list[str]]:
    turns = [json.loads(line) for line in (DATA / "locomo_dev_turns.jsonl").open()]
    questions = [json.loads(line)["question"] for line in (DATA / "locomo_dev_qa.jsonl").open()]
    seen, facts = set(), []
    for t in turns:
        if t["memory_text"] not in seen and len(t["memory_text"]) > 30:
            seen.add(t["memory_text"])
            facts.append(t["memory_text"])
    return facts, list(dict.fromkeys(questions))


def rss_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of a process in MB."""
    rss = pss = 0.0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("Pss:"):
            pss = int(line.split()[1]) / 1024
    return rss, pss


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def embed_phase(engine: str, n: int) -> dict:
    """In this process, pinned to one core: load the engine, embed n questions one by one."""
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    os.environ["EMBED_THREADS"] = "1"
    import django

    django.setup()
    from memory_admin.embedding import make_embedder

    _, questions = texts()
    t0 = time.perf_counter()
    embedder = make_embedder(engine)
    embedder.embed(["warm up"])
    load_s = time.perf_counter() - t0
    for q in questions[:20]:
        embedder.embed([q])
    times = []
    for q in questions[20 : 20 + n]:
        t = time.perf_counter()
        embedder.embed([q])
        times.append((time.perf_counter() - t) * 1000)
    return {
        "embed_p50": percentile(times, 50),
        "embed_p95": percentile(times, 95),
        "load_s": load_s,
        "embed_rss": rss_mb(os.getpid())[0],
        "torch_loaded": "torch" in sys.modules,
    }


def drive(port: int, key: str, calls: list, clients: int = 1) -> tuple[list[tuple[float, dict, dict]], float]:
    """Run (method, path, body, params) calls from `clients` keep-alive clients; (results, wall seconds)."""

    def worker(part):
        client, out = Client(port, key), []
        for method, path, body, params in part:
            t0 = time.perf_counter()
            status, payload, headers = client.request(method, path, body, params)
            assert status in (200, 201), (status, payload)
            out.append(((time.perf_counter() - t0) * 1000, server_timing(headers), payload))
        return out

    parts = [calls[i::clients] for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [r for part in pool.map(worker, parts) for r in part]
    return results, time.perf_counter() - t0


def server_phase(engine: str, n: int) -> dict:
    url = database_url(f"bench_speed_{engine}", fresh=True)
    migrate(url)
    setup_django(url)
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="speed")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="speed-bench")
    facts, questions = texts()
    out: dict = {}

    t0 = time.perf_counter()
    with Server(url, EMBEDDER=engine, EMBED_THREADS="1") as server:
        first = Client(server.port, key)
        status, _, _ = first.request(
            "POST", "/api/v1/users/u0/facts", {"content": "u0 exists", "source": "user_stated"}
        )
        assert status in (200, 201)
        status, _, _ = first.request("GET", "/api/v1/users/u0/search", params={"q": "hello"})
        assert status == 200
        out["first_answer_s"] = time.perf_counter() - t0
        # warm every worker and thread pool (distinct texts: the LRU never answers a measured query)
        drive(server.port, key, [("GET", "/api/v1/users/u0/search", None, {"q": f"warm {i}"}) for i in range(16)], 4)

        # add one fact: 5 users × n/5 facts, one client
        per_user = max(1, n // 5)
        calls = [
            ("POST", f"/api/v1/users/u{i % 5}/facts", {"content": facts[i], "source": "user_stated"}, None)
            for i in range(5 * per_user)
        ]
        results, _ = drive(server.port, key, calls)
        out["add_p50"] = percentile([r[0] for r in results], 50)
        out["add_outcomes"] = _count(r[2]["outcome"] for r in results)

        # search k=10 over those users
        calls = [
            ("GET", f"/api/v1/users/u{i % 5}/search", None, {"q": q, "k": 10}) for i, q in enumerate(questions[:n])
        ]
        results, _ = drive(server.port, key, calls)
        out["search_p50"] = percentile([r[0] for r in results], 50)
        out["search_server_p50"] = percentile([r[1]["server_ms_excluding_embed"] for r in results], 50)
        out["search_embed_p50"] = percentile([r[1]["embed_ms"] for r in results], 50)
        if all("view_ms" in r[1] for r in results):  # the whole API view (key, user, rendering) too
            out["search_view_p50"] = percentile([r[1]["view_ms"] - r[1]["embed_ms"] for r in results], 50)

        # batch route: 10 batches of 50 facts, fresh users, one client
        offset = 5 * per_user
        calls = [
            (
                "POST",
                f"/api/v1/users/b{b}/facts/batch",
                {"facts": [{"content": facts[offset + 50 * b + i], "source": "user_stated"} for i in range(50)]},
                None,
            )
            for b in range(10)
        ]
        results, wall = drive(server.port, key, calls)
        out["batch_facts_s"] = sum(len(r[2]["results"]) for r in results) / wall
        out["batch_outcomes"] = _count(x["outcome"] for r in results for x in r[2]["results"])

        # single writes from 4 clients, 4 users
        offset += 500
        calls = [
            ("POST", f"/api/v1/users/w{i % 4}/facts", {"content": facts[offset + i], "source": "user_stated"}, None)
            for i in range(n)
        ]
        results, wall = drive(server.port, key, calls, clients=4)
        out["writes4_s"] = len(results) / wall
        out["writes4_p50"] = percentile([r[0] for r in results], 50)

        workers = children(server.proc.pid)
        mems = [rss_mb(pid) for pid in workers]
        out["worker_rss"] = sum(m[0] for m in mems) / max(1, len(mems))
        out["worker_pss"] = sum(m[1] for m in mems) / max(1, len(mems))
        out["workers"] = len(mems)
    return out


def _count(values) -> dict:
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts


def run(engine: str, phase: str, n: int) -> dict:
    url = database_url("bench_speed_embed", fresh=False)
    done = subprocess.run(
        [PYTHON, __file__, f"--{phase}", engine, "--requests", str(n)],
        cwd=ROOT,
        env=django_env(url, EMBEDDER=engine),
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"{phase} {engine} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


ROWS = [
    ("query embedding p50, one core (ms)", "embed_p50", "{:.2f}"),
    ("query embedding p95, one core (ms)", "embed_p95", "{:.2f}"),
    ("engine load + first text (s)", "load_s", "{:.2f}"),
    ("RSS of a process with the engine loaded (MB)", "embed_rss", "{:.0f}"),
    ("torch imported", "torch_loaded", "{}"),
    ("gunicorn start → first write + /search answered (s)", "first_answer_s", "{:.2f}"),
    ("add one fact p50, HTTP (ms)", "add_p50", "{:.1f}"),
    ("search k=10 p50, HTTP (ms)", "search_p50", "{:.1f}"),
    ("  server excluding embedding p50 (ms)", "search_server_p50", "{:.1f}"),
    ("  server's query embedding p50 (ms)", "search_embed_p50", "{:.1f}"),
    ("  whole API view excluding embedding p50 (ms)", "search_view_p50", "{:.1f}"),
    ("POST /facts/batch, all gates (facts/s)", "batch_facts_s", "{:.0f}"),
    ("single writes from 4 clients (writes/s)", "writes4_s", "{:.1f}"),
    ("  their p50 (ms)", "writes4_p50", "{:.1f}"),
    ("web worker RSS after the run (MB)", "worker_rss", "{:.0f}"),
    ("web worker PSS after the run (MB)", "worker_pss", "{:.0f}"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="torch,onnx")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--embed", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.embed:
        print(json.dumps(embed_phase(args.embed, 300)))
        return 0
    if args.server:
        print(json.dumps(server_phase(args.server, args.requests)))
        return 0

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    results = {}
    for engine in engines:
        results[engine] = {**run(engine, "embed", args.requests), **run(engine, "server", args.requests)}
        print(f"{engine}: {json.dumps(results[engine])}", flush=True)
    print()
    print(f"{'':<48}" + "".join(f"{e:>12}" for e in engines) + ("       ratio" if len(engines) == 2 else ""))
    for label, field, fmt in ROWS:
        values = [results[e].get(field) for e in engines]
        line = f"{label:<48}" + "".join(f"{fmt.format(v):>12}" for v in values)
        if len(engines) == 2 and all(isinstance(v, float) for v in values) and values[0]:
            line += f"{values[1] / values[0]:>11.2f}×"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
