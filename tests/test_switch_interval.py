"""The GIL switch interval of web and worker processes (settings.GIL_SWITCH_INTERVAL_MS): their helper
threads embed texts beside the request's or the task's Python, and need the GIL between two texts."""

from __future__ import annotations

import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def web_process(value: str | None) -> subprocess.CompletedProcess:
    """A process that loads the WSGI application as gunicorn's workers do, and prints its switch interval."""
    env = {k: v for k, v in os.environ.items() if k != "GIL_SWITCH_INTERVAL_MS"}
    if value is not None:
        env["GIL_SWITCH_INTERVAL_MS"] = value
    code = "import sys, memory_admin.wsgi; print(repr(sys.getswitchinterval()))"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_a_web_process_takes_the_switch_interval_of_its_setting():
    default = web_process(None)
    assert default.returncode == 0, default.stderr
    assert float(default.stdout.strip().splitlines()[-1]) == pytest.approx(0.001)
    chosen = web_process("1.5")
    assert chosen.returncode == 0, chosen.stderr
    assert float(chosen.stdout.strip().splitlines()[-1]) == pytest.approx(0.0015)


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", "1000"])
def test_a_bad_switch_interval_stops_the_process_at_start_naming_the_setting(value):
    result = web_process(value)
    assert result.returncode != 0
    assert f"configuration error: GIL_SWITCH_INTERVAL_MS={value!r}: a number from 0.01 to 100." in result.stderr


def test_worker_processes_take_it_too(settings):
    """The Celery worker's main process (worker_init) and each pool child (worker_process_init)."""
    from celery.signals import worker_init, worker_process_init

    import extraction.tasks as tasks

    for signal in (worker_init, worker_process_init):
        # Weakly connected receivers are stored as references; strong ones (tracing's) as the function.
        receivers = [r() if isinstance(r, weakref.ref) else r for _, r in signal.receivers]
        assert tasks._switch_interval in receivers
    before = sys.getswitchinterval()
    settings.GIL_SWITCH_INTERVAL_MS = 0.7
    try:
        tasks._switch_interval()
        assert sys.getswitchinterval() == pytest.approx(0.0007)
    finally:
        sys.setswitchinterval(before)
