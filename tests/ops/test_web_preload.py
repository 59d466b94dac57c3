"""gunicorn's master loads the application, the embedding model, the token counter and the secret
scan's rules before it forks the workers (memory_admin/gunicorn_conf.py `load_shared`), so the workers
share those pages instead of each holding its own copy.

Forking is only safe when nothing loaded started a thread (a lock a thread held at the fork stays held
in the child for ever): asserted in a process of its own, which then forks two workers whose vectors
must be exactly those of a process that runs its own model. And against a real gunicorn (two workers):
the master holds the model, and most of each worker's memory is shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.ops.cluster import embedder_cache, free_port, http

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [
    "Alice prefers green tea in the morning and coffee after lunch.",
    "What did Caroline say about the adoption agency?",
    "Ünïcödé straße café naïve résumé " * 20,
    "ok",
]

FORK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from memory_admin import gunicorn_conf  # as gunicorn reads it first: its environment before numpy
    import django
    django.setup()
    gunicorn_conf.load_shared()  # raises if anything it loads started a thread
    threads = len(os.listdir("/proc/self/task"))
    from memory_admin.embedding import get_embedder
    texts = json.loads(sys.argv[1])
    children = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            with os.fdopen(write, "w") as out:
                json.dump(get_embedder().embed(texts), out)
            os._exit(0)
        os.close(write)
        children.append((pid, read))
    forked = []
    for pid, read in children:
        with os.fdopen(read) as got:
            forked.append(json.load(got))
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
    print(json.dumps({"threads": threads, "forked": forked, "own": get_embedder().embed(texts)}))
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "EMBEDDER")}
    db = connection.settings_dict
    return {
        **env,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "memory_admin.settings",
        "EMBEDDER_CACHE_DIR": embedder_cache(),
        "DATABASE_URL": f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}",
        **extra,
    }


def test_workers_forked_after_the_shared_load_embed_exactly_as_a_process_with_its_own_model():
    done = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, json.dumps(TEXTS)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["threads"] == 1  # the master forks with no thread but its own
    assert len(result["own"]) == len(TEXTS) and len(result["own"][0]) == 384
    assert result["forked"] == [result["own"], result["own"]]  # to the bit


def _rollup(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        fields[name.rstrip(":")] = int(value)
    return fields


def test_gunicorns_workers_share_the_masters_model_and_most_of_their_memory(tmp_path):
    port = free_port()
    log = open(tmp_path / "web.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf"],
        env=_env(
            BIND=f"127.0.0.1:{port}",
            WEB_WORKERS="2",
            WEB_THREADS="2",
            MEMORY_ADMIN_DATA_DIR=str(tmp_path),
            PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
        ),
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while len(workers) < 2 or http("GET", f"http://127.0.0.1:{port}/api/v1/health/live")[0] != 200:
            assert proc.poll() is None, (tmp_path / "web.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "web.log").read_text()[-3000:]
            time.sleep(0.5)
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            workers = [int(pid) for pid in children]
        time.sleep(2)  # both workers past their warm-up (post_worker_init)
        assert "onnxruntime" in Path(f"/proc/{proc.pid}/maps").read_text()  # the master loaded the model
        for pid in workers:
            memory = _rollup(pid)
            # Without the preload a worker's PSS was ~0.8 of its RSS (next to nothing shared); with it ~0.45.
            assert memory["Pss"] < 0.65 * memory["Rss"], (pid, memory)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
