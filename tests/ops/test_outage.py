"""The fault test: the whole product under `manage.py up` (gunicorn, a Celery worker, beat) on its
own Postgres, which is stopped for 60 s while a client keeps posting and reading.

A Postgres of its own (initdb in a temp directory, from the pgserver wheel's binaries) so that it can
be stopped and started with pg_ctl without touching the suite's database. Afterwards: /health/ready
went 503 during the outage and 200 after, beat sweeps again, the worker consumes again, a thread
posted after recovery is extracted within the debounce window, and nothing accepted before or during
the outage is lost. Then beat is SIGKILLed: `up` must restart it and sweeps must resume.

Bounded: about 2.5 minutes (FAULT_OUTAGE_SECONDS shortens the outage when iterating locally).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pgserver
import pytest

from tests.ops.cluster import free_port, http

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OUTAGE_SECONDS = float(os.environ.get("FAULT_OUTAGE_SECONDS", "60"))
DEBOUNCE_SECONDS = 2
SWEEP_SECONDS = 1
STALE_SECONDS = 8
# A thread is due DEBOUNCE_SECONDS after its last message; the next sweep (every SWEEP_SECONDS) plans
# it and a worker runs the batch (broker polling 0.5 s, rules extractor, one embedding call).
EXTRACTED_WITHIN = DEBOUNCE_SECONDS + 6


class TempPostgres:
    """A throwaway Postgres 16 + pgvector, listening only on a unix socket in its own directory."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="ma-fault-", dir="/tmp"))
        self.pgdata = self.dir / "data"
        self.user = "pgserver" if os.geteuid() == 0 else None  # initdb refuses to run as root
        if self.user:
            shutil.chown(self.dir, self.user, self.user)
        pgserver.initdb(
            ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
            pgdata=self.pgdata,
            user=self.user,
        )
        self.start()
        pgserver.psql(["-h", str(self.dir), "-U", "postgres", "-c", "CREATE DATABASE memory_admin"])
        self.url = f"postgresql://postgres:@/memory_admin?host={self.dir}"

    def start(self) -> None:
        pgserver.pg_ctl(
            ["-w", "-o", '-h ""', "-o", f"-k {self.dir}", "-l", str(self.dir / "log"), "start"],
            pgdata=self.pgdata,
            user=self.user,
            timeout=60,
        )

    def stop(self) -> None:
        pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.user, timeout=60)

    def destroy(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.dir, ignore_errors=True)


class Stack:
    """`manage.py up` and what it printed."""

    def __init__(self, env: dict[str, str], logfile: Path, bind: str):
        self.logfile, self.base = logfile, f"http://{bind}/api/v1/"
        self.log = open(logfile, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "up", "--no-demo", f"--bind={bind}", "--restart-backoff=1"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.logfile.read_text(errors="replace")

    def up_lines(self) -> list[str]:
        return [line for line in self.output().splitlines() if line.startswith("up: ")]

    def pid_of(self, child: str) -> int:
        pids = re.findall(rf"^up: {child} (?:started|restarted) \(pid (\d+)", self.output(), re.M)
        return int(pids[-1])

    def tail(self) -> str:
        return "\n".join(self.output().splitlines()[-60:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for child in ("worker", "worker-bulk", "beat", "web", "mcp"):  # in case `up` could not stop them itself
            try:
                os.killpg(self.pid_of(child), signal.SIGKILL)
            except (IndexError, ProcessLookupError, PermissionError):
                pass
        self.log.close()


def wait_until(predicate, timeout: float, stack: Stack, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{stack.tail()}")


def ready(stack: Stack) -> dict | None:
    status, body = http("GET", stack.base + "health/ready", timeout=5)
    fresh = status == 200 and body.get("status") == "ok"
    return body if fresh else None


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=120
    ).stdout.strip()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    pg = TempPostgres()
    data = tmp_path_factory.mktemp("fault-data")
    bind = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": pg.url,
        "MEMORY_ADMIN_DATA_DIR": str(data),
        "OPENAI_API_KEY": "",  # the offline rules extractor: real extraction, no model
        "EXTRACTION_SWEEP_SECONDS": str(SWEEP_SECONDS),
        "WORKER_HEARTBEAT_SECONDS": "2",
        "HEALTH_STALE_SECONDS": str(STALE_SECONDS),
        "HEALTH_STARTUP_GRACE_SECONDS": "5",
        "WEB_WORKERS": "1",
        "DB_CONN_MAX_AGE": "60",
        "LOG_LEVEL": "WARNING",
    }
    for name in ("TEST_DB_NAME", "CELERY_BROKER_URL", "OPENAI_BASE_URL"):
        env.pop(name, None)
    stack = Stack(env, data / "up.log", bind)
    stack.pg = pg
    try:
        wait_until(lambda: ready(stack), 150, stack, "the stack to become ready")
        manage(env, "create_tenant", "fault")
        stack.key = manage(env, "create_agent_key", "fault", "load", "--admin").splitlines()[-1]
        status, body = http("PATCH", stack.base + "settings", {"debounce_seconds": DEBOUNCE_SECONDS}, stack.key)
        assert status == 200, body
        yield stack
    finally:
        stack.stop()
        pg.destroy()


class Load(threading.Thread):
    """A light, bounded client: post a message, read facts, every 0.25 s (at most `limit` rounds)."""

    def __init__(self, stack: Stack, limit: int = 2000):
        super().__init__(daemon=True)
        self.stack, self.limit = stack, limit
        self.stopped = threading.Event()
        self.accepted = 0
        self.statuses: list[int] = []

    def run(self) -> None:
        for i in range(self.limit):
            if self.stopped.is_set():
                return
            content = f"Load message number {i}: the client is still talking."
            status, _ = http(
                "POST",
                self.stack.base + "users/loader/messages",
                {"thread_id": f"load-{i // 20}", "messages": [{"role": "user", "content": content}]},
                self.stack.key,
            )
            self.statuses.append(status)
            self.accepted += status == 202
            self.statuses.append(http("GET", self.stack.base + "users/loader/facts", key=self.stack.key)[0])
            time.sleep(0.25)


class HealthWatch(threading.Thread):
    """Polls /health/ready and /health/live every 0.5 s; remembers every answer."""

    def __init__(self, stack: Stack):
        super().__init__(daemon=True)
        self.stack = stack
        self.stopped = threading.Event()
        self.ready: list[tuple[float, int, dict]] = []
        self.live: list[int] = []

    def run(self) -> None:
        while not self.stopped.is_set():
            status, body = http("GET", self.stack.base + "health/ready", timeout=5)
            self.ready.append((time.monotonic(), status, body))
            self.live.append(http("GET", self.stack.base + "health/live", timeout=5)[0])
            time.sleep(0.5)


def extracted(stack: Stack, user: str, needle: str) -> bool:
    status, body = http("GET", stack.base + f"users/{user}/facts?limit=200", key=stack.key)
    return status == 200 and any(needle in fact["content"] for fact in body["items"])


def test_a_postgres_outage_under_load_heals_itself(stack):
    load, watch = Load(stack), HealthWatch(stack)
    load.start()
    watch.start()
    time.sleep(5)
    assert 202 in load.statuses, stack.tail()

    stopped_at = time.monotonic()
    stack.pg.stop()
    time.sleep(OUTAGE_SECONDS)
    during = [(status, body) for at, status, body in watch.ready if at > stopped_at + 3]
    restarted_at = time.monotonic()
    stack.pg.start()

    # Ready again: database reachable, and a sweep and a worker heartbeat since the restart.
    back = wait_until(lambda: ready(stack), 60, stack, "/health/ready to be 200 again")
    recovered_in = time.monotonic() - restarted_at
    watch.stopped.set()
    watch.join(10)

    assert during, "no health answer during the outage"
    assert all(status == 503 for status, _ in during), [s for s, _ in during]
    assert {body.get("code") for _, body in during} == {"database_unavailable"}
    assert set(watch.live) == {200}, "liveness must not depend on the database"
    assert 503 in load.statuses, "the load saw no outage"
    assert back["background"]["sweep"]["age_seconds"] <= 3 * SWEEP_SECONDS + 1

    # A thread posted after recovery is extracted within the debounce window (plus a sweep).
    status, body = http(
        "POST",
        stack.base + "users/newcomer/messages",
        {"thread_id": "after-outage", "messages": [{"role": "user", "content": "I work at Bassoon Works."}]},
        stack.key,
    )
    assert status == 202, body
    posted = time.monotonic()
    wait_until(
        lambda: extracted(stack, "newcomer", "Bassoon Works"),
        EXTRACTED_WITHIN,
        stack,
        "the thread posted after recovery to be extracted",
    )
    took = time.monotonic() - posted
    load.stopped.set()
    load.join(15)

    # Nothing accepted (202) before or during the outage is lost: every message ends in a done batch.
    def all_extracted():
        status, body = http("GET", stack.base + "batches?limit=200", key=stack.key)
        mine = [b for b in body if b["user_id"] == "loader"] if status == 200 else []
        done = sum(b["message_count"] for b in mine if b["status"] == "done")
        return done == load.accepted and all(b["status"] == "done" for b in mine)

    wait_until(all_extracted, 30, stack, f"all {load.accepted} accepted messages to be extracted")
    assert "channel disconnected" not in stack.output()  # the failure mode this test was written for
    print(
        f"\noutage {OUTAGE_SECONDS:.0f} s; ready again {recovered_in:.1f} s after Postgres restarted; "
        f"new thread extracted {took:.1f} s after posting (debounce {DEBOUNCE_SECONDS} s); "
        f"{load.accepted} messages accepted under load"
    )


def test_up_restarts_a_killed_beat(stack):
    beat = stack.pid_of("beat")
    os.kill(beat, signal.SIGKILL)
    wait_until(lambda: stack.pid_of("beat") != beat, 15, stack, "up to restart beat")
    assert any(
        re.match(r"up: beat killed by signal 9 after \d+ s; restarting in \d+ s", line) for line in stack.up_lines()
    ), stack.up_lines()
    assert any(line.startswith("up: beat restarted") for line in stack.up_lines())
    # The new beat sweeps: the sweep row is fresher than the restart.
    restarted = time.monotonic()
    body = wait_until(
        lambda: (b := ready(stack)) and b["background"]["sweep"]["age_seconds"] < time.monotonic() - restarted and b,
        40,
        stack,
        "a sweep from the new beat",
    )
    assert body["status"] == "ok"
