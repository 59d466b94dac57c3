"""What `manage.py up` tells a person on a fresh data directory: one `up: <step>: ...` line per step,
in the order the steps happen (database, checks, migrations, embedding model, the children, then each
role's URL once it answers), and no third-party warning among them (Celery's superuser warning, the
quantiser's pre-processing advice). SIGTERM then stops it with exit status 0.

Bounded: about a minute (the embedder is the checkout's prebuilt one; the demo is not seeded).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from bench.soak import UpStack
from tests.ops.cluster import embedder_cache, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def stack():
    workdir = Path(tempfile.mkdtemp(prefix="ma-up-say-"))
    env = {"EMBEDDER_CACHE_DIR": embedder_cache(), "WEB_WORKERS": "1", "WORKER_CONCURRENCY": "2"}
    # The children log at INFO here, as they do for a person running `up` (UpStack's default is WARNING).
    up = UpStack(workdir, env={**env, "LOG_LEVEL": "INFO"})
    try:
        yield up
    finally:
        up.kill_everything()
        shutil.rmtree(workdir, ignore_errors=True)


def position(lines: list[str], pattern: str) -> int:
    found = [i for i, line in enumerate(lines) if re.fullmatch(pattern, line)]
    assert found, f"no line matches {pattern!r} in:\n" + "\n".join(lines)
    return found[0]


def test_up_says_each_step_in_order_then_each_url_without_third_party_warnings(stack):
    wait_until(lambda: "up: ready" in stack.output(), 240, "`up` to say it is ready", stack.tail)
    output = stack.output()
    lines = stack.up_lines()
    steps = [
        r"up: database: embedded Postgres \d+ at .+/pgdata \(started\)",
        r"up: checks: System check identified no issues \(0 silenced\)\.",
        r"up: migrations: \d+ applied",
        r"up: embedding model: verified: .+\.onnx \([\d,]+ bytes, sha256 [0-9a-f]{16}…\) in [\d.]+ s",
        r"up: worker started \(pid \d+\)",
        r"up: worker-bulk started \(pid \d+\)",
        r"up: beat started \(pid \d+\)",
        r"up: web started \(pid \d+\)",
        r"up: mcp started \(pid \d+\)",
        r"up: web: http://127\.0\.0\.1:\d+/",  # --no-demo: no demo logins offered
        r"up: API docs: http://127\.0\.0\.1:\d+/api/v1/docs",
        r"up: health: http://127\.0\.0\.1:\d+/api/v1/health \(liveness: /api/v1/health/live\)",
        r"up: MCP: http://127\.0\.0\.1:\d+/mcp",
        r"up: ready \(Ctrl-C or SIGTERM stops everything\)",
    ]
    positions = [position(lines, step) for step in steps]
    assert positions == sorted(positions), "\n".join(lines)
    assert f"up: web: {stack.root}/" in lines
    assert not any(line.startswith("up: demo:") for line in lines)

    # No warning from a third party anywhere in what a person sees (ours would be `up: ...` lines).
    alarming = [
        line
        for line in output.splitlines()
        if re.search(r"warning|superuser", line, re.I) and not line.startswith("up: ")
    ]
    assert alarming == [], "\n".join(alarming)
    # Celery's banners (one per worker, with its task list) are not printed either.
    assert "[tasks]" not in output and "-------------- [queues]" not in output

    # Idle, it is quiet: the heartbeats run (the sweep every 2 s, the message index, each worker's own), but
    # Celery's three lines about each wait for LOG_LEVEL=DEBUG (~3 lines a second otherwise).
    time.sleep(8)
    with urllib.request.urlopen(f"{stack.root}/api/v1/health", timeout=10) as answer:
        assert json.load(answer)["background"]["sweep"]["age_seconds"] < 8
    heartbeat = re.compile(r"extraction\.(sweep|index_messages|worker_heartbeat)\b")
    chatter = [line for line in stack.output().splitlines() if heartbeat.search(line)]
    assert chatter == [], "\n".join(chatter[:5])

    code, left = stack.stop()
    assert code == 0, stack.tail()
    assert left == [], left
