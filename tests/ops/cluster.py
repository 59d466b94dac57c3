"""Real processes for the distributed tests: a Postgres listening on a local TCP port, a Redis server,
and a registry of child processes (each in its own process group, with its log in a file) that is
torn down on exit whatever happened. Everything listens on 127.0.0.1 only, on free ports."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pgserver

ROOT = Path(__file__).resolve().parents[2]
CELERY = [sys.executable, "-m", "celery", "-A", "memory_admin"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(method: str, url: str, body: Any = None, key: str | None = None, timeout: float = 10) -> tuple[int, Any]:
    """(status, JSON body); status 0 when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw.startswith(b"{") else {"raw": raw[:200].decode(errors="replace")}
    except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
        return 0, {"error": str(err)}


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, logs: Callable[[], str] = lambda: "", every: float = 0.3
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs()}")


class TcpPostgres:
    """A throwaway Postgres 16 + pgvector from the pgserver wheel's binaries, reached over TCP on
    127.0.0.1:<port> (trust auth, loopback only), as a managed Postgres would be."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ma-tcp-pg-", dir="/tmp"))
        self.pgdata = self.dir / "data"
        self.port = free_port()
        self.user = "pgserver" if os.geteuid() == 0 else None  # initdb refuses to run as root
        if self.user:
            shutil.chown(self.dir, self.user, self.user)
        pgserver.initdb(["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=self.pgdata, user=self.user)
        pgserver.pg_ctl(
            ["-w", "-o", f"-h 127.0.0.1 -p {self.port} -k {self.dir}", "-l", str(self.dir / "log"), "start"],
            pgdata=self.pgdata,
            user=self.user,
            timeout=60,
        )
        self.psql("CREATE DATABASE memory_admin", db="postgres")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/memory_admin"

    def psql(self, sql: str, db: str = "memory_admin") -> str:
        return pgserver.psql(["-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db, "-tAXc", sql])

    def rows(self, sql: str) -> list[list[str]]:
        return [line.split("|") for line in self.psql(sql).splitlines() if line]

    def destroy(self) -> None:
        try:
            pgserver.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.pgdata, user=self.user, timeout=60)
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(self.dir, ignore_errors=True)


class Processes:
    """Child processes, each in its own session (a SIGKILL to its group takes its pool/workers too),
    each logging to <logdir>/<name>.log. `stop_all` ends every group ever started."""

    def __init__(self, env: dict[str, str], logdir: Path):
        self.env, self.logdir = env, logdir
        self.procs: dict[str, subprocess.Popen] = {}
        self.groups: set[int] = set()

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        with open(self.logdir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs[name] = proc
        self.groups.add(proc.pid)
        return proc

    def log(self, name: str) -> str:
        path = self.logdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{self.log(name)[-2500:]}" for name in self.procs)

    def kill(self, name: str) -> None:
        """SIGKILL to the whole group, no warning: the machine running it died."""
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def embedder_cache() -> str:
    """The directory of this checkout's verified ONNX embedder (built once, by `build_embedder`), so
    the processes started here load it instead of each building their own."""
    from memory_admin.embedding.onnx_recipe import cache_dir, verified_model

    if verified_model() is None:
        subprocess.run(
            [sys.executable, "manage.py", "build_embedder"],
            cwd=ROOT,
            check=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
        )
    return str(cache_dir())


def manage(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout,
    ).stdout.strip()


@contextmanager
def up_for_soak(name: str, **extra: Any) -> Iterator[Any]:
    """A real `up` (bench/soak.py's UpStack) in a directory of its own, with a tenant `name`: health and
    heartbeats on short windows, and a worker taken for wedged after 20 s, so that a liveness mistake
    (a busy or waiting worker killed) shows within a test. Skipped without the LoCoMo dev data."""
    import pytest

    from bench.soak import LOCOMO, UpStack

    if not (LOCOMO / "locomo_dev_turns.jsonl").exists():
        pytest.skip(f"the LoCoMo dev data is not at {LOCOMO}")
    workdir = Path(tempfile.mkdtemp(prefix=f"ma-{name}-"))
    env = {
        "EMBEDDER_CACHE_DIR": embedder_cache(),
        "HEALTH_STALE_SECONDS": "10",
        "HEALTH_STARTUP_GRACE_SECONDS": "5",
        "WORKER_HEARTBEAT_SECONDS": "2",
    }
    up = UpStack(workdir, env=env, wedged_after=20, **extra)
    try:
        up.wait_ready()
        up.create_tenant(name)
        yield up
    finally:
        up.kill_everything()
        shutil.rmtree(workdir, ignore_errors=True)
