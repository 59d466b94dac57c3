"""The fault tests (tests/ops/test_outage.py: Postgres stopped, a process SIGKILLed) during the burst of
tests/ops/test_soak.py: `manage.py up` on a data directory of its own (its own embedded Postgres, the
default broker, two workers, beat, web, MCP) while three clients replay the dev LoCoMo conversations as
fact batches, messages, thread closes and searches (bench/soak.py drives it). A third of the way into
the burst a worker is killed with SIGKILL; in the second test the embedded Postgres is stopped for a few
seconds and started again while the clients keep going.

Asserted, as a user would notice it: every acknowledged fact and message stored, every message
extracted (no batch failed or stuck), the backlog drained within 120 s of the burst, readiness 200
again. The kill: no 5xx, readiness never red for more than 10 s, and `up` restarted the killed worker
and nothing else. The outage: every request was answered, requests failed (503 database_unavailable)
only while the database was down and no later than a few seconds after it came back, readiness came
back on its own, and nothing was restarted (an outage is not a wedge).

Bounded: about 5 minutes for both (one stack; FAULT_BURST_SECONDS sets each burst).
"""

from __future__ import annotations

import os
import re
import signal
import time

import psutil
import pytest

from bench.soak import UpStack, http, soak
from tests.ops.cluster import up_for_soak, wait_until

pytestmark = pytest.mark.slow

BURST_SECONDS = float(os.environ.get("FAULT_BURST_SECONDS", "45"))
OUTAGE_SECONDS = 8
# How long after Postgres is back a request may still fail: each process' next statement on a dead
# connection fails once before Django opens a new one.
RECONNECT_SECONDS = 5


@pytest.fixture(scope="module")
def stack():
    with up_for_soak("faults") as up:
        yield up


def running(stack: UpStack) -> dict[tuple[str, int], float]:
    """(role, pid) -> start time of every process of `up` but Postgres; the start time tells a pid
    reused by a new process from the one that was there."""
    found = {}
    for role, proc in stack.processes():
        if role != "postgres":
            try:
                found[(role, proc.pid)] = proc.create_time()
            except psutil.NoSuchProcess:
                pass
    return found


def ready_again(stack: UpStack) -> dict | None:
    status, body = http("GET", stack.base + "health/ready", timeout=5)
    return body if status == 200 and body.get("status") == "ok" else None


def assert_nothing_lost(figures) -> None:
    report = figures.report("fault during the burst")
    assert figures.acknowledged_facts > 50 and figures.closes > 2, report
    assert figures.missing_facts == 0, report
    assert figures.missing_messages == 0, report
    assert figures.drain_seconds is not None and figures.drain_seconds <= 120, report
    assert figures.unextracted_messages == 0, report
    assert (figures.failed_batches, figures.stuck_batches) == (0, 0), report


def test_a_worker_killed_mid_burst_is_restarted_alone_and_nothing_is_lost(stack, capsys):
    before = running(stack)
    bulk = [pid for role, pid in before if role == "worker-bulk"]
    assert len(bulk) == 1, before
    lines_before = len(stack.up_lines())

    figures = soak(
        stack,
        BURST_SECONDS,
        drain_timeout=150,
        fault=lambda: os.kill(bulk[0], signal.SIGKILL),
        fault_after=BURST_SECONDS / 3,
    )
    with capsys.disabled():
        print("\n" + figures.report(f"worker-bulk SIGKILLed {BURST_SECONDS / 3:.0f} s into the burst"))
    assert_nothing_lost(figures)
    assert figures.server_errors == 0 and figures.unanswered == 0, figures.errors
    assert figures.longest_red <= 10, figures.readiness
    assert ready_again(stack), stack.tail()

    # `up` saw the kill and restarted that worker, and only it: every other process is the one that was
    # there before, and nothing was found wedged.
    said = stack.up_lines()[lines_before:]
    assert any(re.match(r"up: worker-bulk killed by signal 9 after \d+ s; restarting in", line) for line in said), said
    assert [line for line in said if " restarted (pid " in line or " wedged" in line] == [
        line for line in said if line.startswith("up: worker-bulk restarted (pid ")
    ], said
    assert len([line for line in said if line.startswith("up: worker-bulk restarted (pid ")]) == 1, said
    after = running(stack)
    gone = {key for key in before if after.get(key) != before[key]}
    assert gone == {("worker-bulk", bulk[0])}, (gone, said)
    assert [pid for role, pid in after if role == "worker-bulk"] != bulk


def test_a_postgres_outage_mid_burst_heals_without_a_restart_and_nothing_is_lost(stack, capsys):
    before = running(stack)
    lines_before = len(stack.up_lines())
    outage: dict[str, float] = {}

    def outage_of_postgres() -> None:
        outage["stopped"] = time.monotonic()  # sessions are cut as the stop begins
        options = stack.postgres_stop()
        time.sleep(OUTAGE_SECONDS)
        stack.postgres_start(options)
        outage["started"] = time.monotonic()

    figures = soak(stack, BURST_SECONDS, drain_timeout=150, fault=outage_of_postgres, fault_after=BURST_SECONDS / 3)
    with capsys.disabled():
        print(
            "\n"
            + figures.report(f"embedded Postgres stopped {OUTAGE_SECONDS} s, {BURST_SECONDS / 3:.0f} s into the burst")
        )
    assert_nothing_lost(figures)
    # The clients saw the outage (503 database_unavailable), every request was answered, and no request
    # failed once the database had been back for a few seconds (the first ones reconnect).
    other = [f"{status} {request}" for _, status, request in figures.failures if status != 503]
    with capsys.disabled():
        print(f"5xx during the outage: {figures.statuses}; other than 503: {other or 'none'}")
    assert figures.statuses.get(503, 0) > 0 and figures.unanswered == 0, figures.statuses
    late = [f for f in figures.failures if not outage["stopped"] - 1 <= f[0] <= outage["started"] + RECONNECT_SECONDS]
    assert late == [], late
    # Readiness went red for the outage and came back on its own within a bounded time after it.
    assert 0 < figures.longest_red <= OUTAGE_SECONDS + 30, figures.readiness
    wait_until(lambda: ready_again(stack), 30, "/health/ready 200 ok after the outage", stack.tail)

    said = stack.up_lines()[lines_before:]
    assert [line for line in said if " restarted (pid " in line or " wedged" in line or " killed " in line] == [], said
    assert running(stack) == before, said
