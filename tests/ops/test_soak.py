"""The soak, shortened: `manage.py up` on a data directory of its own (its own embedded Postgres, the
default broker, two workers, beat, web, MCP) while three clients replay the dev LoCoMo conversations
as fact batches, messages, thread closes and searches (bench/soak.py drives it; the bench runs 4
minutes, this test about a minute).

The supervisor's wedge limit and readiness's staleness are set short (20 s, 10 s) so that liveness
measured through the work queue (a heartbeat waiting behind a backlog) would show up here as kills and
red readiness. Asserted: no 5xx, no restart, readiness never red for more than 10 s, the backlog
drained within 120 s of the burst, every acknowledged fact stored, no extraction batch failed or stuck;
then SIGTERM to `up` leaves no process behind, its Postgres included.

Bounded: about 3 minutes (SOAK_SECONDS shortens or lengthens the burst).
"""

from __future__ import annotations

import os

import pytest

from bench.soak import gone, soak
from tests.ops.cluster import up_for_soak

pytestmark = pytest.mark.slow

BURST_SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))


@pytest.fixture
def stack():
    with up_for_soak("soak") as up:
        yield up


def test_a_sustained_burst_drains_with_no_kill_no_5xx_and_nothing_lost(stack, capsys):
    figures = soak(stack, BURST_SECONDS, drain_timeout=150)
    with capsys.disabled():
        print("\n" + figures.report("embedded broker, test"))
    assert figures.acknowledged_facts > 100 and figures.closes > 5 and figures.searches > 5, figures.report("load")
    assert figures.server_errors == 0 and figures.unanswered == 0, figures.errors
    assert figures.restarts == [], figures.restarts
    assert figures.longest_red <= 10, figures.readiness
    assert figures.drain_seconds is not None and figures.drain_seconds <= 120, figures.depths
    assert figures.missing_facts == 0
    assert (figures.failed_batches, figures.stuck_batches) == (0, 0)

    postmaster = stack.postmaster()
    assert postmaster is not None and postmaster.is_running()  # `up` started it: it must stop it too
    code, left = stack.stop()
    assert code == 0, stack.tail()
    assert left == [], left
    assert gone(postmaster)
    assert stack.up_lines()[-1] == "up: embedded Postgres stopped", stack.up_lines()
