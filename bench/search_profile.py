"""Where each millisecond of one `/search` request goes, client to client, in the product's server.

    python bench/search_profile.py [--requests 200] [--cached] [--workers 2 --threads 8]

One memory user with 40 LoCoMo facts (database `bench_search_profile`), gunicorn started with the
product's settings (`memory_admin/gunicorn_conf.py`, through `_probe_conf.py`, which adds the timing
probes of `_probe.py` to each worker), one keep-alive client sending LoCoMo questions (distinct, so
every one is embedded; `--cached`: the same 30 again and again, so the query LRU answers).

Every request's marks (client: before sending, headers read, body read, JSON parsed; server: gunicorn
took the connection, parsed it, the WSGI call, each middleware in and out, Django's resolver, ninja's
auth and parameters, the key statement, the user statement, the search's parts, the rendering, the log
line, the response written) are put in time order; each step between two consecutive marks is one row:
wall time p50 / p95 and, between two server marks, the thread's CPU time p50 (the difference is
waiting: for Postgres, for a core, for the GIL). Last, the CPU per search of the whole server (every
thread of every gunicorn process: the request's thread and the one embedding its query ahead) and of its
Postgres backends, from /proc over the timed requests: what a search costs whatever the load.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (  # noqa: E402
    PYTHON,
    ROOT,
    Client,
    database_url,
    django_env,
    free_port,
    migrate,
    percentile,
    setup_django,
)

DATA = Path("/work/shared/eval/locomo-dev")


def texts(n_facts: int) -> tuple[list[str], list[str]]:
    turns = [json.loads(line)["memory_text"] for line in (DATA / "locomo_dev_turns.jsonl").open()]
    questions = [json.loads(line)["question"] for line in (DATA / "locomo_dev_qa.jsonl").open()]
    facts = [t for t in dict.fromkeys(turns) if len(t) > 30][:n_facts]
    return facts, list(dict.fromkeys(questions))


def start_server(url: str, workers: int, threads: int, probe_dir: str, log) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = django_env(
        url,
        BIND=f"127.0.0.1:{port}",
        WEB_WORKERS=str(workers),
        WEB_THREADS=str(threads),
        PROBE_DIR=probe_dir,
    )
    proc = subprocess.Popen(
        [PYTHON, "-m", "gunicorn", "-c", str(ROOT / "bench" / "_probe_conf.py")],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if Client(port).request("GET", "/api/v1/health")[0] == 200:
                return proc, port
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("the server exited at start")
        time.sleep(0.5)
    raise RuntimeError("the server did not answer")


def process_cpu(group: int) -> tuple[dict[int, float], dict[int, float]]:
    """CPU seconds so far (user + system, every thread) of each process in the server's process group, and
    of each Postgres backend connected to the benchmark's database, by pid (from /proc)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        backends = {row[0] for row in cursor.fetchall()}
    server: dict[int, float] = {}
    postgres: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, seconds = int(entry), (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        if int(fields[2]) == group:
            server[pid] = seconds
        elif pid in backends:
            postgres[pid] = seconds
    return server, postgres


def timed_search(conn: http.client.HTTPConnection, key: str, path: str, rid: str) -> tuple[list, dict]:
    headers = {"Authorization": f"Bearer {key}", "X-Request-ID": rid}
    marks = [("client send", time.perf_counter())]
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    marks.append(("client: headers read", time.perf_counter()))
    raw = resp.read()
    marks.append(("client: body read", time.perf_counter()))
    body = json.loads(raw)
    marks.append(("client: JSON parsed", time.perf_counter()))
    assert resp.status == 200, body
    timing = {}
    for part in (resp.getheader("Server-Timing") or "").split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name and dur:
            timing[name] = float(dur)
    return marks, timing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--cached", action="store_true", help="repeat 30 queries: the query LRU answers")
    parser.add_argument(
        "--thrash-mb",
        type=int,
        default=0,
        help="between requests, the client reads this many MB (as mem0's torch model does in peer_mem0.py: "
        "the server then starts each request with cold caches)",
    )
    args = parser.parse_args()

    facts, questions = texts(40)
    url = database_url("bench_search_profile", fresh=True)
    migrate(url)
    setup_django(url)
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="profile")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="profile-bench")
    probe_dir = tempfile.mkdtemp(prefix="search-profile-")
    log = open(Path(probe_dir) / "server.log", "w")  # noqa: SIM115
    proc, port = start_server(url, args.workers, args.threads, probe_dir, log)
    client_marks: dict[str, list] = {}
    timings: list[dict] = []
    try:
        writer = Client(port, key)
        for text in facts:
            status, body, _ = writer.request(
                "POST", "/api/v1/users/u0/facts", {"content": text, "source": "user_stated"}
            )
            assert status in (200, 201), body
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        queries = questions[:30] if args.cached else questions[10 : 10 + args.requests]
        for i, q in enumerate(questions[:10]):  # warm: both workers, every code path
            timed_search(conn, key, "/api/v1/users/u0/search?" + urllib.parse.urlencode({"q": q}), f"warm-{i:04d}")
        if args.cached:
            for i, q in enumerate(queries):
                timed_search(conn, key, "/api/v1/users/u0/search?" + urllib.parse.urlencode({"q": q}), f"lru-{i:05d}")
        load = os.getloadavg()
        cpu_before = process_cpu(proc.pid)
        junk = bytearray(args.thrash_mb * 1024 * 1024)
        for i in range(args.requests):
            if junk:
                junk[:] = bytes(len(junk))  # writes every cache line

            q = queries[i % len(queries)]
            rid = f"probe-{i:05d}"
            path = "/api/v1/users/u0/search?" + urllib.parse.urlencode({"q": q, "k": 10})
            client_marks[rid], timing = timed_search(conn, key, path, rid)
            timings.append(timing)
        cpu_after = process_cpu(proc.pid)
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    server_marks = {}
    for file in Path(probe_dir).glob("*.jsonl"):
        for line in file.open():
            record = json.loads(line)
            server_marks[record["rid"]] = record["marks"]
    report(client_marks, server_marks, timings, load, args)
    server, postgres = (
        sum(after[pid] - before.get(pid, 0.0) for pid in after)
        for before, after in zip(cpu_before, cpu_after, strict=True)
    )
    print(
        f"CPU per search, every thread of the server's processes {server / args.requests * 1000:.3f} ms, "
        f"its Postgres backends {postgres / args.requests * 1000:.3f} ms (/proc, {os.sysconf('SC_CLK_TCK')} ticks/s)"
    )
    return 0


def report(client_marks: dict, server_marks: dict, timings: list[dict], load, args) -> None:
    steps: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    totals, server_cpu = [], []
    for rid, cmarks in client_marks.items():
        smarks = server_marks.get(rid)
        if not smarks:
            continue
        merged = [(label, t, None) for label, t in cmarks] + [(label, t, c) for label, t, c in smarks]
        merged.sort(key=lambda m: m[1])
        totals.append((cmarks[-1][1] - cmarks[0][1]) * 1000)
        server_cpu.append((smarks[-1][2] - smarks[0][2]) * 1000)
        for (a, ta, ca), (b, tb, cb) in zip(merged, merged[1:], strict=False):
            name = f"{a}  ->  {b}"
            if name not in steps:
                order.append(name)
            steps[name].append((tb - ta) * 1000)
            if ca is not None and cb is not None:
                cpu[name].append((cb - ca) * 1000)
    n = len(totals)
    print(
        f"{n} searches k=10 ({'LRU answers the query' if args.cached else 'every query embedded'}), gunicorn "
        f"{args.workers}x{args.threads} with the product's config, client thrash {args.thrash_mb} MB; "
        f"load average {load[0]:.2f} {load[1]:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at the end"
    )
    print(
        f"client total p50 {percentile(totals, 50):.3f} ms (p95 {percentile(totals, 95):.3f}); "
        f"server thread CPU p50 {percentile(server_cpu, 50):.3f} ms"
    )
    for name in ("embed_ms", "server_ms_excluding_embed", "view_ms"):
        values = [t[name] for t in timings if name in t]
        print(f"  Server-Timing {name} p50 {percentile(values, 50):.3f} ms")
    print(f"\n{'step (consecutive marks)':<86} {'n':>4} {'wall p50':>9} {'p95':>8} {'CPU p50':>8}")
    sum_p50 = 0.0
    for name in order:
        values = steps[name]
        p50 = percentile(values, 50)
        sum_p50 += p50 * len(values) / n
        c = f"{percentile(cpu[name], 50):8.3f}" if cpu.get(name) else "       -"
        print(f"{name:<86} {len(values):>4} {p50:9.3f} {percentile(values, 95):8.3f} {c}")
    print(f"{'sum of the step medians (weighted by how often each step occurs)':<86} {'':>4} {sum_p50:9.3f}")


if __name__ == "__main__":
    sys.exit(main())
