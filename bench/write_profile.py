"""Where a write's CPU goes in the real server (issue 9 §2-3): py-spy samples gunicorn while the batch
route and single writes run, and every sample is put in one bucket of the write path.

    python bench/write_profile.py                      # 10 batches of 50, then 200 single writes (4 clients)
    python bench/write_profile.py --batches 20 --rate 250

gunicorn (2 × 8, EMBEDDER=onnx) from this tree on the `bench_write_profile` database, LoCoMo dev turns,
every gate on. py-spy (`pip install py-spy==0.4.3`, the dev extra) attaches to the master and its
workers, sampling only running threads (idle and waiting ones are not CPU), so each bucket's share of the
samples times the phase's measured server CPU is that bucket's CPU per fact. A sample goes to the bucket
of its innermost frame that names one (the order of `BUCKETS` breaks ties inside one frame).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import PYTHON, ROOT, Server, database_url, migrate, setup_django  # noqa: E402
from speed import drive, texts  # noqa: E402
from write_throughput import Cpu  # noqa: E402

_CURSOR_FRAMES = ("execute", "_send_query_prepared", "vector_cursor", "prepared_cursor")
# (bucket, substrings of a frame "function (path:line)"), matched innermost frame first.
BUCKETS = [
    ("embedding: onnxruntime run", ["run (onnxruntime/"]),
    ("embedding: tokenizer, arrays, tolist", ["embed (memory_admin/embeddings.py"]),
    ("embedding: EmbedAhead hand-off, futures", ["memory_admin/embeddings.py", "concurrent/futures/"]),
    (
        "SQL: psycopg (send, wait, parse rows)",
        # and the cursors of selectors/search.py that the write path's statements go through
        ["psycopg/", "pgvector/", *(f"{f} (memory_admin/selectors/search.py:" for f in _CURSOR_FRAMES)],
    ),
    ("SQL: Django ORM (compile, models)", ["django/db/"]),
    ("audit rows", ["memory_admin/services/audit.py"]),
    ("entity drawing hook", ["memory_admin/services/entity_draw.py"]),
    ("metrics", ["memory_admin/metrics.py", "prometheus_client/"]),
    ("screening: PII/secret scans", ["memory_admin/services/pii.py", "memory_admin/services/screening.py"]),
    ("screening: size, key, metadata checks", ["memory_admin/services/facts/checks.py"]),
    ("poisoning guard", ["memory_admin/services/guard.py"]),
    ("judge (contradictions)", ["memory_admin/services/judge.py"]),
    ("cap: eviction query, UPDATE, audit", ["memory_admin/services/facts/cap.py"]),
    ("cap: ending the evicted facts' relations", ["memory_admin/services/entities.py"]),
    ("write path: INSERT building, chains", ["memory_admin/services/facts/versions.py"]),
    (
        "write path: lookup, steps, new Fact",
        [f"memory_admin/services/facts/{m}.py" for m in ("write", "checks", "conflicts", "mutations", "__init__")],
    ),
    ("key/user lookup, tenant settings", ["memory_admin/selectors/access.py", "memory_admin/services/settings.py"]),
    ("API handler: batch body, outcomes", ["memory_admin/api/facts.py"]),
    ("response rendering (ninja, JSON)", ["ninja/responses.py", "ninja/renderers.py", "json/encoder.py"]),
    ("request parsing, validation (ninja, pydantic)", ["ninja/", "pydantic"]),
    ("middleware, auth, throttle", ["memory_admin/middleware", "memory_admin/api/auth", "memory_admin/services/"]),
    ("Django request/response", ["django/"]),
    ("gunicorn (HTTP, threads)", ["gunicorn/", "selectors.py", "socket.py", "ssl.py"]),
    ("other memory_admin", ["memory_admin/"]),
]


def _hit(frame: str, needle: str) -> bool:
    """A frame "function (path:line)" is in a needle: a file (py-spy prints some paths shortened to
    their last parts, "facts/write.py") or a substring (a package, "psycopg/")."""
    if not needle.endswith(".py"):
        return needle in frame
    path = frame[frame.rfind("(") + 1 : frame.rfind(":")]
    return path == needle or needle.endswith("/" + path) or path.endswith("/" + needle)


_SQL = ("SQL: psycopg (send, wait, parse rows)", "SQL: Django ORM (compile, models)")


def _match(frame: str) -> str | None:
    return next((name for name, needles in BUCKETS if any(_hit(frame, n) for n in needles)), None)


def bucket(frames: list[str]) -> str:
    """The innermost frame's bucket; SQL is charged to the write path's step that ran it ("step › SQL")."""
    for depth in range(len(frames) - 1, -1, -1):
        name = _match(frames[depth])
        if name is None:
            continue
        if name in _SQL:
            caller = next((m for f in reversed(frames[:depth]) if (m := _match(f)) and m not in _SQL), None)
            if caller and not caller.startswith(("Django", "gunicorn", "request parsing", "middleware")):
                return f"{caller} › SQL"
        return name
    return "other (interpreter, threading)"


def read_raw(path: Path) -> collections.Counter:
    """py-spy's raw (collapsed) output: `frame;frame;...;frame count` per distinct stack."""
    counts: collections.Counter = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[bucket(stack.split(";"))] += int(n)
    return counts


SPY = str(Path(PYTHON).parent / "py-spy")


def thread_cpu(master: int) -> dict[int, float]:
    """CPU seconds of every thread of the server's processes, by thread id."""
    out = {}
    for task in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        try:
            fields = task.read_text().rsplit(")", 1)[1].split()
            ppid = int(Path(f"/proc/{task.parent.parent.parent.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        pid = int(task.parent.parent.parent.name)
        if pid == master or ppid == master:
            out[int(task.parent.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def thread_names(master: int) -> dict[int, str]:
    """Python's name of every thread (py-spy dump prints `Thread <tid> (idle): "name"`)."""
    dump = subprocess.run([SPY, "dump", "--pid", str(master), "--subprocesses"], capture_output=True, text=True)
    return {int(t): n for t, n in re.findall(r'^Thread (\d+) \(\w+\): "([^"]*)"', dump.stdout, re.M)}


def thread_role(name: str) -> str:
    if name.startswith("embed-ahead"):
        return "EmbedAhead helper threads (onnx embedding)"
    if name.startswith("ThreadPoolExecutor"):
        return "request threads (gthread pool)"
    if name == "entity-draw-sender":
        return "entity-draw sender thread (broker INSERT)"
    if name == "MainThread":
        return "main threads (gunicorn accept loop, arbiter)"
    return f"other threads ({name.split(' ')[0]})"


def profiled(server: Server, out: Path, rate: int, work) -> tuple[collections.Counter, Cpu, dict[str, float]]:
    """py-spy in --gil mode: a sample is taken of the thread holding the GIL, so the buckets split the
    Python CPU; native work that releases the GIL (onnxruntime, psycopg's waits) shows in the per-thread
    CPU instead."""
    spy = subprocess.Popen(
        [
            SPY,
            "record",
            "--pid",
            str(server.proc.pid),
            "--subprocesses",
            "--gil",
            "-r",
            str(rate),
            "-f",
            "raw",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2)  # py-spy attached to every process
    before = thread_cpu(server.proc.pid)
    with Cpu(server.proc.pid) as cpu:
        work()
    after = thread_cpu(server.proc.pid)
    spy.send_signal(signal.SIGINT)
    spy.wait(timeout=60)
    names = thread_names(server.proc.pid)
    roles: dict[str, float] = collections.defaultdict(float)
    for tid, seconds in after.items():
        roles[thread_role(names.get(tid, "gone"))] += seconds - before.get(tid, 0.0)
    return read_raw(out), cpu, roles


def report(title: str, counts: collections.Counter, cpu: Cpu, roles: dict[str, float], n: int) -> None:
    print(f"\n{title}: {n} facts, server CPU {cpu.server_ms / n:.2f} ms a fact, Postgres {cpu.pg_ms / n:.2f} ms")
    print(f"{'CPU by thread':<56}{'ms/fact':>10}")
    for name, seconds in sorted(roles.items(), key=lambda kv: -kv[1]):
        print(f"{name:<56}{seconds * 1000 / n:>10.2f}")
    request_ms = roles.get("request threads (gthread pool)", 0.0) * 1000 / n
    total = sum(counts.values())
    print(f"{'Python holding the GIL (all threads), by bucket':<60}{'share':>8}{'~ms/fact':>10}")
    for name, c in counts.most_common():
        print(f"{name:<60}{c / total:>8.1%}{c / total * request_ms:>10.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--singles", type=int, default=200)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--tree", default=str(ROOT), help="the code tree the server runs (default: this one)")
    parser.add_argument("--cap", action="store_true", help="then both again with every user at the cap")
    parser.add_argument("--out", default="/tmp/write_profile", help="where py-spy's raw files go")
    args = parser.parse_args()
    url = database_url("bench_write_profile", fresh=True)
    migrate(url)
    setup_django(url)
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug=f"profile-{time.time_ns()}")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="bench")
    _, admin = api_key_create(tenant_id=tenant.pk, agent_name="bench-admin", is_admin=True)
    facts, _ = texts()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    tree = Path(args.tree).resolve()
    with Server(url, cwd=tree, EMBEDDER="onnx", EMBED_THREADS="1", PYTHONPATH=str(tree)) as s:
        warm = [
            ("POST", f"/api/v1/users/warm{i % 4}/facts", {"content": f"warm up {i}", "source": "user_stated"}, None)
            for i in range(16)
        ]
        drive(s.port, key, warm, 4)
        batch_texts = facts[: args.batches * 50]
        calls = [
            (
                "POST",
                f"/api/v1/users/b{b}/facts/batch",
                {"facts": [{"content": t, "source": "user_stated"} for t in batch_texts[b * 50 : b * 50 + 50]]},
                None,
            )
            for b in range(args.batches)
        ]
        counts, cpu, roles = profiled(s, Path(args.out) / "batch.txt", args.rate, lambda: drive(s.port, key, calls))
        report("batch route (one client, batches of 50)", counts, cpu, roles, len(batch_texts))
        single_texts = facts[len(batch_texts) : len(batch_texts) + args.singles]
        calls = [
            ("POST", f"/api/v1/users/s{i % 4}/facts", {"content": t, "source": "user_stated"}, None)
            for i, t in enumerate(single_texts)
        ]
        counts, cpu, roles = profiled(s, Path(args.out) / "single.txt", args.rate, lambda: drive(s.port, key, calls, 4))
        report("single writes (4 clients)", counts, cpu, roles, len(single_texts))
        if args.cap:  # every batch user holds 50 facts: with a cap of 50 each stored fact evicts one
            drive(s.port, admin, [("PATCH", "/api/v1/settings", {"fact_cap": 50}, None)])
            start = len(batch_texts) + len(single_texts)
            cap_texts = facts[start : start + args.batches * 50]
            calls = [
                (
                    "POST",
                    f"/api/v1/users/b{b}/facts/batch",
                    {"facts": [{"content": t, "source": "user_stated"} for t in cap_texts[b * 50 : b * 50 + 50]]},
                    None,
                )
                for b in range(args.batches)
            ]
            counts, cpu, roles = profiled(
                s, Path(args.out) / "batch_cap.txt", args.rate, lambda: drive(s.port, key, calls)
            )
            report("batch route at the cap (each fact evicts one)", counts, cpu, roles, len(cap_texts))
            start += len(cap_texts)
            calls = [
                ("POST", f"/api/v1/users/b{i % 4}/facts", {"content": t, "source": "user_stated"}, None)
                for i, t in enumerate(facts[start : start + args.singles])
            ]
            counts, cpu, roles = profiled(
                s, Path(args.out) / "single_cap.txt", args.rate, lambda: drive(s.port, key, calls, 4)
            )
            report("single writes at the cap (4 clients)", counts, cpu, roles, args.singles)
    print(f"\nload average (1 min): {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
