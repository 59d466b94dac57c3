"""Time to first answer after `manage.py up`, and memory per web process, per embedding engine.

    python bench/startup.py                         # EMBEDDER=torch (before) and onnx (after)
    python bench/startup.py --engines onnx --runs 3

For each engine and run: a fresh database `bench_up_<engine>` (migrated, one tenant and key made
beforehand with the product's own commands), then `manage.py up --no-demo` on a free loopback port
(web + worker + beat + MCP, as an operator starts it; the data directory is a temporary one holding
only the embedder cache, so nothing is downloaded or built). Measured from launching `up`:

- ready: GET /api/v1/health/ready answers 200;
- first search: a fact written (POST /facts, every gate on) and GET /search answered 200;
- then 100 searches from one client, and the RSS / PSS of each gunicorn web worker (and of the whole
  `up` process tree) after them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import PYTHON, ROOT, Client, database_url, django_env, free_port, migrate  # noqa: E402
from speed import children, rss_mb, texts  # noqa: E402


def manage(url: str, *argv: str) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", *argv], cwd=ROOT, env=django_env(url), check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def wait_for(port: int, path: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            status, _, _ = Client(port).request("GET", path)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{path} did not answer 200 in time")


def process_tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children(current))
    return out


def web_workers(up_pid: int) -> list[int]:
    """The gunicorn workers: children of the gunicorn master, itself a child of `up`."""
    for pid in children(up_pid):
        if b"gunicorn" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return children(pid)
    return []


def one_run(engine: str, embedder_cache: Path) -> dict:
    url = database_url(f"bench_up_{engine}", fresh=True)
    migrate(url)
    manage(url, "create_tenant", "startup")
    key = manage(url, "create_agent_key", "startup", "startup-bench").splitlines()[-1]
    facts, questions = texts()
    data = Path(tempfile.mkdtemp(prefix="bench-up-"))
    if embedder_cache.exists():
        shutil.copytree(embedder_cache, data / "embedder")
    port, mcp_port = free_port(), free_port()
    env = django_env(url, EMBEDDER=engine, MEMORY_ADMIN_DATA_DIR=str(data), MCP_BIND=f"127.0.0.1:{mcp_port}")
    t0 = time.monotonic()
    up = subprocess.Popen(
        [PYTHON, "manage.py", "up", "--no-demo", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict = {}
    try:
        wait_for(port, "/api/v1/health/ready", t0 + 300)
        out["ready_s"] = time.monotonic() - t0
        client = Client(port, key)
        status, _, _ = client.request("POST", "/api/v1/users/u0/facts", {"content": facts[0], "source": "user_stated"})
        assert status in (200, 201), status
        status, _, _ = client.request("GET", "/api/v1/users/u0/search", params={"q": questions[0]})
        assert status == 200, status
        out["first_search_s"] = time.monotonic() - t0
        for q in questions[1:101]:
            status, _, _ = client.request("GET", "/api/v1/users/u0/search", params={"q": q, "k": 10})
            assert status == 200, status
        workers = web_workers(up.pid)
        mems = [rss_mb(pid) for pid in workers]
        out["web_rss"] = max(m[0] for m in mems)
        out["web_pss"] = max(m[1] for m in mems)
        out["web_workers"] = len(mems)
        tree = [rss_mb(pid) for pid in process_tree(up.pid)]
        out["tree_rss"] = sum(m[0] for m in tree)
        out["tree_pss"] = sum(m[1] for m in tree)
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
        shutil.rmtree(data, ignore_errors=True)
    return out


ROWS = [
    ("`up` → /health/ready 200 (s)", "ready_s", "{:.2f}"),
    ("`up` → first write + /search answered (s)", "first_search_s", "{:.2f}"),
    ("web worker RSS after 100 searches (MB, largest)", "web_rss", "{:.0f}"),
    ("web worker PSS after 100 searches (MB, largest)", "web_pss", "{:.0f}"),
    ("whole `up` tree RSS (MB: web, worker, beat, MCP)", "tree_rss", "{:.0f}"),
    ("whole `up` tree PSS (MB)", "tree_pss", "{:.0f}"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="torch,onnx")
    parser.add_argument("--runs", type=int, default=1, help="runs per engine (medians printed)")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    cache = Path(os.environ.get("MEMORY_ADMIN_DATA_DIR") or ROOT / ".data") / "embedder"
    results: dict[str, dict] = {}
    for engine in engines:
        runs = [one_run(engine, cache) for _ in range(args.runs)]
        results[engine] = {field: sorted(r[field] for r in runs)[len(runs) // 2] for field in runs[0]}
        print(f"{engine}: {results[engine]} (load average {os.getloadavg()[0]:.1f})", flush=True)
    print()
    print(f"{'':<52}" + "".join(f"{e:>10}" for e in engines) + ("      ratio" if len(engines) == 2 else ""))
    for label, field, fmt in ROWS:
        values = [results[e][field] for e in engines]
        line = f"{label:<52}" + "".join(f"{fmt.format(v):>10}" for v in values)
        if len(engines) == 2 and values[0]:
            line += f"{values[1] / values[0]:>10.2f}×"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
