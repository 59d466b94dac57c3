"""`manage.py up` as a supervisor, with real processes on their own Postgres (over TCP) and free ports.

Each child (web, worker, beat, mcp) is SIGKILLed in turn: `up` says so, starts a new one (a new pid),
/health/ready is ok again, and a message posted afterwards is extracted. Then beat and web are wedged
(SIGSTOP: alive but doing nothing): `up` notices (no sweep; no answer on /health/live), kills and
restarts them; so is the bulk worker, stopped while entity drawing waits in its queue. Last, SIGTERM
to `up` while a batch's LLM call and an API request are in flight: the request is answered, the batch
is finished by the worker (warm shutdown), every child is gone and `up` exits with status 0.

Bounded: about 2.5 minutes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.ops.cluster import ROOT, TcpPostgres, embedder_cache, free_port, group_alive, http, manage, wait_until

pytestmark = pytest.mark.slow

WEDGED_AFTER = 8
LLM_SLOW = 5


class Up:
    """`manage.py up` in its own session, its output in a file."""

    def __init__(self, env: dict[str, str], logfile: Path, bind: str):
        self.logfile, self.base = logfile, f"http://{bind}/api/v1/"
        self.mcp = f"http://{env['MCP_BIND']}/mcp"
        with open(logfile, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "up",
                    "--no-demo",
                    f"--bind={bind}",
                    "--restart-backoff=0.5",
                    f"--wedged-after={WEDGED_AFTER}",
                    "--start-grace=60",
                    "--stop-timeout=30",
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.logfile.read_text(errors="replace")

    def tail(self) -> str:
        return "\n".join(self.output().splitlines()[-80:])

    def up_lines(self) -> list[str]:
        return [line for line in self.output().splitlines() if line.startswith("up: ")]

    def pids(self, child: str) -> list[int]:
        return [int(p) for p in re.findall(rf"^up: {child} (?:started|restarted) \(pid (\d+)", self.output(), re.M)]

    def pid_of(self, child: str) -> int:
        return self.pids(child)[-1]

    def all_pids(self) -> list[int]:
        return [pid for child in ("web", "worker", "worker-bulk", "beat", "mcp") for pid in self.pids(child)]

    def stop(self) -> None:
        """Teardown, whatever happened: `up` and every process group it ever started."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        for pid in self.all_pids():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass


def ready(up: Up) -> dict | None:
    status, body = http("GET", up.base + "health/ready", timeout=5)
    return body if status == 200 and body.get("status") == "ok" else None


@pytest.fixture(scope="module")
def fake():
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, fake):
    data = tmp_path_factory.mktemp("supervised")
    embedder = embedder_cache()
    pg = TcpPostgres()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": pg.url,
        "MEMORY_ADMIN_DATA_DIR": str(data),
        "EMBEDDER_CACHE_DIR": embedder,
        "MCP_BIND": f"127.0.0.1:{free_port()}",
        "OPENAI_API_KEY": "sk-test-not-a-real-key",
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_TIMEOUT_SECONDS": str(LLM_SLOW + 4),
        "CONTRADICTION_JUDGE": "llm",  # a write whose judge call is slow: an in-flight request at shutdown
        "GUARD_JUDGE": "rules",
        "EXTRACTION_SWEEP_SECONDS": "1",
        "WORKER_HEARTBEAT_SECONDS": "1",
        "HEALTH_STALE_SECONDS": "20",
        "HEALTH_STARTUP_GRACE_SECONDS": "3",
        "WEB_WORKERS": "1",
        "LOG_LEVEL": "WARNING",
    }
    for name in ("TEST_DB_NAME", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "BIND", "UP_WEDGED_SECONDS"):
        env.pop(name, None)
    try:
        up = Up(env, data / "up.log", f"127.0.0.1:{free_port()}")
    except BaseException:
        pg.destroy()
        raise
    up.pg = pg
    try:
        wait_until(lambda: ready(up), 150, "the stack to become ready", up.tail)
        manage(env, "create_tenant", "supervised")
        up.key = manage(env, "create_agent_key", "supervised", "agent", "--admin").splitlines()[-1]
        status, body = http("PATCH", up.base + "settings", {"debounce_seconds": 1}, up.key)
        assert status == 200, body
        yield up
    finally:
        up.stop()
        pg.destroy()


def facts_of(up: Up, user: str) -> list[str]:
    return [
        row
        for row in up.pg.psql(
            "SELECT f.content FROM memory_admin_fact f JOIN memory_admin_memoryuser mu ON mu.id = f.memory_user_id "
            f"WHERE mu.external_id = '{user}'"
        ).splitlines()
        if row
    ]


def extracted_after_post(up: Up, user: str, statement: str) -> None:
    status, body = http(
        "POST",
        up.base + f"users/{user}/messages",
        {"thread_id": "t", "messages": [{"role": "user", "content": statement}]},
        up.key,
    )
    assert status == 202, body
    wait_until(
        lambda: f"The user said: {statement.rstrip('.')}." in facts_of(up, user),
        30,
        f"{user}'s message to be extracted",
        up.tail,
    )


@pytest.mark.parametrize("child", ["web", "worker", "beat", "mcp"])
def test_a_killed_child_comes_back(stack, child):
    old = stack.pid_of(child)
    os.kill(old, signal.SIGKILL)
    new = wait_until(
        lambda: stack.pid_of(child) != old and stack.pid_of(child), 20, f"up to restart {child}", stack.tail
    )
    assert any(
        re.fullmatch(rf"up: {child} killed by signal 9 after \d+ s; restarting in 0.5 s \(attempt \d+\)", line)
        for line in stack.up_lines()
    ), stack.up_lines()
    # Nothing of the old one is left (its pool or gunicorn workers went with it).
    wait_until(lambda: not group_alive(old), 10, f"the old {child}'s process group to be gone", stack.tail)
    restarted = time.monotonic()
    if child == "mcp":
        wait_until(lambda: http("GET", stack.mcp, timeout=3)[0] != 0, 60, "the new MCP server to answer", stack.tail)
    # Ready again, with a sweep and a worker heartbeat newer than the restart.
    wait_until(
        lambda: (
            (body := ready(stack))
            and all(part["age_seconds"] < time.monotonic() - restarted for part in body["background"].values())
        ),
        60,
        "/health/ready with fresh heartbeats",
        stack.tail,
    )
    extracted_after_post(stack, f"after-{child}", f"I restarted the {child} and it kept working.")
    assert stack.pid_of(child) == new and group_alive(new)  # the first new process took over, and stayed


@pytest.mark.parametrize("child", ["beat", "web"])
def test_a_wedged_child_is_killed_and_restarted(stack, child):
    old = stack.pid_of(child)
    os.killpg(old, signal.SIGSTOP)  # alive, answering nothing, doing nothing
    try:
        wait_until(lambda: stack.pid_of(child) != old, WEDGED_AFTER + 30, f"up to find {child} wedged", stack.tail)
    finally:
        try:
            os.killpg(old, signal.SIGCONT)
        except ProcessLookupError:
            pass
    line = next(line for line in stack.up_lines() if line.startswith(f"up: {child} (pid {old}) wedged:"))
    reason = "no sweep heartbeat" if child == "beat" else "/api/v1/health/live not answering"
    assert reason in line and "killed by signal 9" in line and "restarting in" in line, line
    wait_until(lambda: ready(stack), 60, "/health/ready after the wedge", stack.tail)
    extracted_after_post(stack, f"unwedged-{child}", f"I unwedged the {child} without any help.")


def test_a_stopped_worker_with_work_waiting_is_killed_and_restarted(stack):
    """SIGSTOP to the bulk worker: it takes nothing more, and the entity drawing queued by the next
    writes waits in `bulk`. No progress while its queue has a message waiting longer than the wedge
    limit is a wedge (an idle worker with empty queues is not)."""
    old = stack.pid_of("worker-bulk")
    os.killpg(old, signal.SIGSTOP)
    try:
        for i in range(3):
            status, body = http(
                "POST", stack.base + "users/drawn/facts", {"content": f"The user met Ada Quill on trip {i}."}, stack.key
            )
            assert status in (200, 201), body
        wait_until(
            lambda: stack.pid_of("worker-bulk") != old,
            3 * WEDGED_AFTER + 20,
            "up to find worker-bulk wedged",
            stack.tail,
        )
    finally:
        try:
            os.killpg(old, signal.SIGCONT)
        except ProcessLookupError:
            pass
    line = next(line for line in stack.up_lines() if line.startswith(f"up: worker-bulk (pid {old}) wedged:"))
    assert "no task started or finished" in line and "queue bulk has a message waiting" in line, line
    assert "killed by signal 9" in line, line
    # The control worker was never touched: it kept moving all along.
    assert not any(line.startswith("up: worker (pid ") for line in stack.up_lines()), stack.up_lines()
    wait_until(
        lambda: (
            (b := http("GET", stack.base + "health/ready")[1])
            and (b.get("queues") or {}).get("bulk", {}).get("depth") == 0
        ),
        60,
        "the restarted bulk worker to empty its queue",
        stack.tail,
    )


def test_sigterm_finishes_in_flight_work_and_stops_every_child(stack, fake, capsys):
    # A standing fact, so that the next write has a neighbour and asks the (slow) judge.
    status, body = http(
        "POST",
        stack.base + "users/painter/facts",
        {"content": "The user's favourite colour is green.", "confidence": 0.9},
        stack.key,
    )
    assert status in (200, 201), body
    fake.fail_matching("Zanzibar", f"slow:{LLM_SLOW}")
    fake.fail_matching("colour is blue", f"slow:{LLM_SLOW}")
    extracting = len([c for c in fake.calls if "Zanzibar" in c["prompt"]])
    status, body = http(
        "POST",
        stack.base + "users/linguist/messages",
        {"thread_id": "t", "messages": [{"role": "user", "content": "I am learning the Zanzibar dialect of Swahili."}]},
        stack.key,
    )
    assert status == 202, body
    wait_until(
        lambda: len([c for c in fake.calls if "Zanzibar" in c["prompt"]]) > extracting,
        20,
        "the batch's LLM call",
        stack.tail,
    )

    answer: list[tuple[int, dict]] = []
    request = threading.Thread(
        target=lambda: answer.append(
            http(
                "POST",
                stack.base + "users/painter/facts",
                {"content": "The user's favourite colour is blue.", "confidence": 0.9},
                stack.key,
                timeout=30,
            )
        )
    )
    request.start()
    wait_until(
        lambda: any("colour is blue" in c["prompt"] and c["layer"] == "judge" for c in fake.calls),
        15,
        "the write's judge call",
        stack.tail,
    )

    pids = stack.all_pids()
    stack.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = stack.proc.wait(45)
    took = time.monotonic() - signalled
    request.join(15)
    assert code == 0, stack.tail()
    assert answer and answer[0][0] in (200, 201), answer  # the in-flight request was answered
    assert not [pid for pid in pids if group_alive(pid)], "children left behind"
    # The worker finished its batch before it stopped (a warm shutdown): done on the first attempt.
    batch = stack.pg.rows(
        "SELECT b.status, b.attempts FROM memory_admin_extractionbatch b JOIN "
        "memory_admin_memoryuser mu ON mu.id = b.memory_user_id WHERE mu.external_id = 'linguist'"
    )
    assert batch == [["done", "1"]], (batch, stack.tail())
    assert "The user said: I am learning the Zanzibar dialect of Swahili." in facts_of(stack, "linguist")
    lines = stack.up_lines()
    assert lines[-1] == "up: stopped" and not any("did not stop in time" in line for line in lines), lines
    restarts = [line for line in lines if " restarted (pid " in line]
    with capsys.disabled():
        print(
            f"\nup: {len(restarts)} restarts over the module (4 kills, 3 wedges); SIGTERM with a request and a "
            f"batch in flight: both finished, {len(pids)} process groups gone, exit 0 after {took:.1f} s"
        )
