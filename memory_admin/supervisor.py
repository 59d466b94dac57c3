"""Process supervision for `manage.py up`: start the children, restart one that exits or is wedged,
and stop them all cleanly on SIGTERM / Ctrl-C.

* A child that exits (crash, OOM kill, beat giving up after an outage) is started again after a
  backoff that doubles on each quick failure (initial, 2x, 4x ... capped) and starts over once the
  child has stayed up for STABLE_SECONDS.
* A child whose probe reports it wedged (web not answering its liveness URL, no worker heartbeat,
  no sweep while workers are fine) is SIGKILLed with its whole process group and then restarted the
  same way.
* Shutdown: SIGTERM to each child's main process only (gunicorn's master drains in-flight requests,
  Celery's worker finishes the task it runs: a warm shutdown), then SIGKILL to whatever is left after
  `stop_timeout`. A batch cut short that way is leased back by the sweeper when its lease expires.

Every exit, wedge and restart is printed as one `up: ...` line naming the child, the exit status or
signal, the attempt and the next delay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

STABLE_SECONDS = 60.0  # a child that ran this long had no quick failure: its backoff starts over

# A probe looks at a running child and returns why it is wedged, or None when it is fine (or when it
# cannot tell, e.g. the database is down: an outage must not get healthy processes killed).
Probe = Callable[["Child", float], "str | None"]


@dataclass
class Child:
    """One supervised process. Started in its own session, so stopping it stops its whole process
    group (the worker's pool processes too) and Ctrl-C reaches only `up`, which stops everyone."""

    name: str
    argv: list[str]
    env: dict[str, str]
    probe: Probe | None = None
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restart_at: float | None = None  # set while waiting out the backoff
    quick_failures: int = 0
    restarts: int = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True)
        self.started_at = time.monotonic()
        self.restart_at = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_leader(self, sig: int) -> None:
        """The main process only: gunicorn's master and Celery's worker shut their own children down
        gracefully; a signal to the whole group would cut the pool's running task short."""
        if self.running():
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class Backoff:
    initial: float = 1.0
    maximum: float = 60.0

    def delay(self, quick_failures: int) -> float:
        return min(self.initial * 2 ** max(0, quick_failures - 1), self.maximum)


def describe_exit(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with status {code}"


def answers(url: str, timeout: float) -> bool:
    """True when something answers HTTP at `url` (any status: an error page is an answer)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):  # noqa: S310 - our own child on a local address
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


class LivenessProbe:
    """Wedged when `url` has not answered for `wedged_after` seconds; a child that has not answered
    once since it started gets `start_grace` seconds to come up (loading models takes a while)."""

    def __init__(self, url: str, wedged_after: float, start_grace: float, timeout: float = 3.0):
        self.url, self.wedged_after, self.start_grace, self.timeout = url, wedged_after, start_grace, timeout
        self.last_ok = float("-inf")

    def __call__(self, child: Child, now: float) -> str | None:
        if answers(self.url, self.timeout):
            self.last_ok = now
            return None
        came_up = self.last_ok >= child.started_at
        silent = now - (self.last_ok if came_up else child.started_at)
        if silent <= (self.wedged_after if came_up else max(self.wedged_after, self.start_grace)):
            return None
        return f"{self.url} not answering for {silent:.0f} s" + ("" if came_up else " since it started")


class Supervisor:
    def __init__(
        self,
        children: list[Child],
        *,
        say: Callable[[str], None],
        backoff: Backoff,
        stop_timeout: float = 60.0,
        check_every: float = 5.0,
        tick: float = 0.5,
    ):
        self.children, self.say, self.backoff = children, say, backoff
        self.stop_timeout, self.check_every, self.tick_seconds = stop_timeout, check_every, tick
        self.stopping = False
        self.hurry = False  # a second SIGTERM/Ctrl-C: no more waiting
        self._next_check = 0.0

    def request_stop(self, signum: int, frame: FrameType | None = None) -> None:
        self.hurry = self.stopping
        self.stopping = True

    def start_all(self) -> None:
        # Installed first: a SIGTERM from now on stops the children instead of orphaning them.
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)
        for child in self.children:
            child.start()
            self.say(f"{child.name} started (pid {child.proc.pid})")

    def run(self) -> int:
        """Supervise (after `start_all`) until asked to stop; then stop every child. Returns 0."""
        while not self.stopping:
            self.tick(time.monotonic())
            time.sleep(self.tick_seconds)
        self.shutdown()
        return 0

    def tick(self, now: float) -> None:
        check = now >= self._next_check
        if check:
            self._next_check = now + self.check_every
        for child in self.children:
            if self.stopping:
                return
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._restart(child)
                continue
            code = child.proc.poll()
            if code is not None:
                # Whatever the child left behind in its group (pool processes of a killed worker) goes too.
                child.signal_group(signal.SIGKILL)
                self._schedule_restart(child, now, f"{describe_exit(code)} after {now - child.started_at:.0f} s")
            elif check:
                self._check_wedged(child, now)

    def _restart(self, child: Child) -> None:
        child.start()
        child.restarts += 1
        self.say(f"{child.name} restarted (pid {child.proc.pid}, restart #{child.restarts})")

    def _schedule_restart(self, child: Child, now: float, what: str) -> None:
        ran = now - child.started_at
        child.quick_failures = 0 if ran >= STABLE_SECONDS else child.quick_failures + 1
        delay = self.backoff.delay(child.quick_failures)
        child.restart_at = now + delay
        self.say(f"{child.name} {what}; restarting in {delay:g} s (attempt {child.restarts + 1})")

    def _check_wedged(self, child: Child, now: float) -> None:
        if child.probe is None:
            return
        try:
            reason = child.probe(child, now)
        except Exception as exc:  # noqa: BLE001 - a broken probe must not take the supervisor down
            self.say(f"{child.name}: health probe failed ({type(exc).__name__}); not acting on it")
            return
        if reason is None:
            return
        pid = child.proc.pid
        child.signal_group(signal.SIGKILL)
        try:
            code = child.proc.wait(10)
        except subprocess.TimeoutExpired:
            code = -signal.SIGKILL
        self._schedule_restart(child, now, f"(pid {pid}) wedged: {reason}; {describe_exit(code)}")

    def shutdown(self) -> None:
        running = [child for child in self.children if child.running()]
        self.say(
            f"stopping {', '.join(c.name for c in running) or 'nothing'} "
            f"(in-flight work gets up to {self.stop_timeout:g} s)"
        )
        for child in running:
            child.signal_leader(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while any(child.running() for child in running) and time.monotonic() < deadline and not self.hurry:
            time.sleep(0.2)
        for child in running:
            if child.running():
                self.say(f"{child.name} (pid {child.proc.pid}) did not stop in time; killing it")
        for child in self.children:
            child.signal_group(signal.SIGKILL)  # and whatever is left in its group
            try:
                child.proc.wait(10)
            except (AttributeError, subprocess.TimeoutExpired):
                pass
        self.say("stopped")
