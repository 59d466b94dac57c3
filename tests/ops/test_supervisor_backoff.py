"""The supervisor's rules on small real processes (a few seconds): a child that keeps failing is
restarted with a doubling, capped delay and each restart is reported; at shutdown a child that ignores
SIGTERM is killed after the stop timeout, with its whole process group."""

from __future__ import annotations

import re
import sys
import time

from memory_admin.supervisor import Backoff, Child, Supervisor
from tests.ops.cluster import group_alive, wait_until


def drive(supervisor: Supervisor, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        supervisor.tick(time.monotonic())
        time.sleep(0.02)


def test_a_crash_looping_child_backs_off_doubling_up_to_the_cap():
    lines: list[str] = []
    crasher = Child("crasher", [sys.executable, "-c", "import sys; sys.exit(3)"], {})
    supervisor = Supervisor([crasher], say=lines.append, backoff=Backoff(0.1, 0.4), tick=0.02)
    crasher.start()
    drive(supervisor, 2.5)
    supervisor.shutdown()
    exits = [line for line in lines if line.startswith("crasher exited with status 3")]
    delays = [float(re.search(r"restarting in ([\d.]+) s", line).group(1)) for line in exits]
    assert delays[:5] == [0.1, 0.2, 0.4, 0.4, 0.4], lines
    attempts = [int(re.search(r"\(attempt (\d+)\)", line).group(1)) for line in exits]
    assert attempts == list(range(1, len(exits) + 1))
    assert sum(line.startswith("crasher restarted (pid ") for line in lines) >= 4
    assert lines[-1] == "stopped"


def test_shutdown_kills_a_child_that_ignores_sigterm_with_its_group():
    lines: list[str] = []
    code = (
        "import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('ready', flush=True); "
        "time.sleep(60)"
    )
    stubborn = Child("stubborn", [sys.executable, "-c", code], {})
    polite = Child("polite", [sys.executable, "-c", "import time; time.sleep(60)"], {})
    supervisor = Supervisor([stubborn, polite], say=lines.append, backoff=Backoff(), stop_timeout=1.0)
    stubborn.start()
    polite.start()
    time.sleep(0.5)  # the stubborn one's grandchild is running
    started = time.monotonic()
    supervisor.shutdown()
    took = time.monotonic() - started
    assert 1.0 <= took < 5, took
    assert polite.proc.returncode == -15  # SIGTERM was enough
    assert stubborn.proc.returncode == -9
    assert any(line.startswith(f"stubborn (pid {stubborn.proc.pid}) did not stop in time") for line in lines), lines
    wait_until(
        lambda: not group_alive(stubborn.proc.pid) and not group_alive(polite.proc.pid),
        5,
        "both process groups (the stubborn one's child too) to be gone",
    )
    assert lines[-1] == "stopped"
