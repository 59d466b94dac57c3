"""Write throughput, before and after, alternated in one run (issue 9 §2-3).

    python bench/write_throughput.py                              # this tree only, 3 rounds
    python bench/write_throughput.py --trees /tmp/base,. --rounds 3   # alternate two code trees

One database (`bench_write`, migrated once), a fresh tenant per run (so fresh users), gunicorn
(2 workers × 8 threads, EMBEDDER=onnx, or --engine) started from each tree in turn (its own code on PYTHONPATH),
LoCoMo dev turns as facts (the same texts for every tree), every gate on. Per run:

- add one fact: 100 × POST /facts over 5 users, one keep-alive client, p50;
- batch, under the cap: 10 × POST /facts/batch of 50 facts for fresh users, one client, facts/s;
- single writes from 4 clients, under the cap: 200 facts over 4 fresh users, writes/s and p50;
- the tenant's cap lowered to 50 (every batch user is then at it), then batch at the cap: 6 batches of
  50 new facts for those users (each stored fact evicts one), facts/s;
- single writes from 4 clients at the cap: 200 new facts over 4 of those users, writes/s.

Each phase also reports the CPU it cost per fact, of the server processes and of Postgres (this tree's
embedded cluster, of which the benchmark is the only client): on a machine shared with other work the
wall-clock rates follow the load, the CPU per fact much less.

Prints each run as it ends, then the median per tree and the ratio after / before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import ROOT, Server, database_url, migrate, percentile, setup_django  # noqa: E402
from speed import drive, texts  # noqa: E402


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its descendants, alive or reaped."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, and cutime, cstime: the exited children it reaped (a closed connection's backend)
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        todo.extend(children.get(p, []))
    return total


def _postmaster() -> int:
    """The pid of the Postgres serving this tree's database (the embedded one under .data)."""
    pgdata = str(ROOT / ".data" / "pgdata")
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"/postgres") and pgdata.encode() in args:
            return int(cmdline.parent.name)
    raise SystemExit("the embedded Postgres of this tree is not running")


class Cpu:
    """CPU milliseconds spent by the server (gunicorn and its workers) and by Postgres (every backend
    of this tree's cluster; the benchmark is its only client) during a phase: unlike wall time, the
    cost per fact does not depend on how busy other processes keep the machine."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid, self.pg_pid = server_pid, _postmaster()

    def __enter__(self) -> Cpu:
        self.start = (_tree_cpu(self.server_pid), _tree_cpu(self.pg_pid))
        return self

    def __exit__(self, *exc) -> None:
        self.server_ms = (_tree_cpu(self.server_pid) - self.start[0]) * 1000
        self.pg_ms = (_tree_cpu(self.pg_pid) - self.start[1]) * 1000


PHASES = [
    ("add one fact p50 (ms)", "add_p50", "{:.1f}"),
    ("  CPU per fact: server / Postgres (ms)", "add_cpu", "{}"),
    ("batch, under the cap (facts/s)", "batch_s", "{:.1f}"),
    ("  CPU per fact: server / Postgres (ms)", "batch_cpu", "{}"),
    ("4 clients, under the cap (writes/s)", "writes4_s", "{:.1f}"),
    ("  their p50 (ms)", "writes4_p50", "{:.1f}"),
    ("  CPU per fact: server / Postgres (ms)", "writes4_cpu", "{}"),
    ("batch, at the cap (facts/s)", "batch_cap_s", "{:.1f}"),
    ("  CPU per fact: server / Postgres (ms)", "batch_cap_cpu", "{}"),
    ("4 clients, at the cap (writes/s)", "writes4_cap_s", "{:.1f}"),
    ("  their p50 (ms)", "writes4_cap_p50", "{:.1f}"),
    ("  CPU per fact: server / Postgres (ms)", "writes4_cap_cpu", "{}"),
]


def one_run(tree: Path, url: str, label: str, facts: list[str], engine: str = "onnx") -> dict:
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug=f"w{label}-{time.time_ns()}")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="bench")
    _, admin = api_key_create(tenant_id=tenant.pk, agent_name="bench-admin", is_admin=True)
    env = {"EMBEDDER": engine, "EMBED_THREADS": "1", "PYTHONPATH": str(tree)}
    out: dict = {}
    with Server(url, cwd=tree, **env) as server:
        # warm both workers (engine loaded, connections open)
        warm = [
            ("POST", f"/api/v1/users/warm{i % 4}/facts", {"content": f"warm up {i}", "source": "user_stated"}, None)
            for i in range(16)
        ]
        drive(server.port, key, warm, 4)
        pos = 0

        def take(n: int) -> list[str]:
            nonlocal pos
            pos += n
            return facts[pos - n : pos]

        calls = [
            ("POST", f"/api/v1/users/a{i % 5}/facts", {"content": t, "source": "user_stated"}, None)
            for i, t in enumerate(take(100))
        ]
        with Cpu(server.proc.pid) as cpu:
            results, _ = drive(server.port, key, calls)
        out["add_p50"] = percentile([r[0] for r in results], 50)
        out["add_cpu_server"], out["add_cpu_pg"] = cpu.server_ms / len(calls), cpu.pg_ms / len(calls)

        def batches(users: list[str], n: int, name: str) -> float:
            calls = [
                (
                    "POST",
                    f"/api/v1/users/{u}/facts/batch",
                    {"facts": [{"content": t, "source": "user_stated"} for t in take(n)]},
                    None,
                )
                for u in users
            ]
            with Cpu(server.proc.pid) as cpu:
                results, wall = drive(server.port, key, calls)
            facts_done = sum(len(r[2]["results"]) for r in results)
            out[f"{name}_cpu_server"], out[f"{name}_cpu_pg"] = cpu.server_ms / facts_done, cpu.pg_ms / facts_done
            return facts_done / wall

        out["batch_s"] = batches([f"b{b}" for b in range(10)], 50, "batch")

        def writes4(users: list[str], n: int, name: str) -> tuple[float, float]:
            calls = [
                ("POST", f"/api/v1/users/{users[i % 4]}/facts", {"content": t, "source": "user_stated"}, None)
                for i, t in enumerate(take(n))
            ]
            with Cpu(server.proc.pid) as cpu:
                results, wall = drive(server.port, key, calls, clients=4)
            out[f"{name}_cpu_server"], out[f"{name}_cpu_pg"] = cpu.server_ms / n, cpu.pg_ms / n
            return len(results) / wall, percentile([r[0] for r in results], 50)

        out["writes4_s"], out["writes4_p50"] = writes4([f"w{i}" for i in range(4)], 200, "writes4")
        drive(server.port, admin, [("PATCH", "/api/v1/settings", {"fact_cap": 50}, None)])
        out["batch_cap_s"] = batches([f"b{b}" for b in range(4, 10)], 50, "batch_cap")
        out["writes4_cap_s"], out["writes4_cap_p50"] = writes4([f"b{b}" for b in range(4)], 200, "writes4_cap")
    out["load"] = os.getloadavg()[0]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated code trees, alternated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine", default="onnx", help="EMBEDDER of the servers (onnx, torch)")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",") if t.strip()]
    url = database_url("bench_write", fresh=True)
    migrate(url)
    setup_django(url)
    facts, _ = texts()
    runs: dict[Path, list[dict]] = {t: [] for t in trees}
    for rnd in range(args.rounds):
        for i, tree in enumerate(trees):
            out = one_run(tree, url, f"{rnd}{i}", facts, args.engine)
            runs[tree].append(out)
            print(f"round {rnd} tree {tree}: " + ", ".join(f"{k} {v:.1f}" for k, v in out.items()), flush=True)
    print()
    print(f"{'median of ' + str(args.rounds) + ' runs':<40}" + "".join(f"{t.name:>16}" for t in trees))
    for label, field, fmt in PHASES:
        if field.endswith("_cpu"):  # server / Postgres, and the ratio of their sum
            pairs = [
                [statistics.median(r[f"{field}_{part}"] for r in runs[t]) for part in ("server", "pg")] for t in trees
            ]
            values = [sum(p) for p in pairs]
            line = f"{label:<40}" + "".join(f"{f'{p[0]:.1f} / {p[1]:.1f}':>16}" for p in pairs)
        else:
            values = [statistics.median(r[field] for r in runs[t]) for t in trees]
            line = f"{label:<40}" + "".join(f"{fmt.format(v):>16}" for v in values)
        if len(trees) == 2:
            line += f"{values[1] / values[0]:>10.2f}×"
        print(line)
    print(
        f"{'load average (1 min) during the runs':<40}"
        + "".join(f"{statistics.median(r['load'] for r in runs[t]):>16.1f}" for t in trees)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
