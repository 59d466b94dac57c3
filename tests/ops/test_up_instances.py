"""Two `manage.py up` on one host, each with its own BIND and data directory (so each starts its own
embedded Postgres): they share no socket and no file (gunicorn's control socket, the MCP port, the
metrics directory, beat's schedule, Postgres's socket), `up` itself holds no embedding model, and
SIGTERM to each leaves no process behind, its Postgres included.

Bounded: about 2 minutes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from bench.soak import ROOT, UpStack, free_port, gone, http
from tests.ops.cluster import embedder_cache, wait_until

pytestmark = pytest.mark.slow


def unix_sockets(stack: UpStack) -> set[str]:
    found = set()
    for _, proc in stack.processes():
        try:
            found |= {c.laddr for c in proc.net_connections(kind="unix") if c.laddr}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def tcp_listening(stack: UpStack) -> set[tuple[str, int]]:
    found = set()
    for _, proc in stack.processes():
        try:
            found |= {tuple(c.laddr) for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def open_files(stack: UpStack, *, shared_on_purpose: str) -> set[str]:
    found = set()
    for _, proc in stack.processes():
        try:
            found |= {f.path for f in proc.open_files()}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    ignored = ("/dev/", "/proc/", sys.prefix, shared_on_purpose)  # the read-only embedder the test hands both
    return {path for path in found if not path.startswith(ignored)}


@pytest.fixture
def two():
    cache = embedder_cache()
    stacks, dirs = [], []
    try:
        for _ in range(2):
            workdir = Path(tempfile.mkdtemp(prefix="ma-up-"))
            dirs.append(workdir)
            env = {"EMBEDDER_CACHE_DIR": cache, "WEB_WORKERS": "1", "WORKER_CONCURRENCY": "2"}
            stacks.append(UpStack(workdir, env=env))
        for stack in stacks:
            stack.wait_ready()
        yield stacks
    finally:
        for stack in stacks:
            stack.kill_everything()
        for workdir in dirs:
            shutil.rmtree(workdir, ignore_errors=True)


def test_two_instances_share_nothing_and_sigterm_leaves_no_process_behind(two):
    a, b = two
    sockets_a, sockets_b = unix_sockets(a), unix_sockets(b)
    assert any(s.endswith("gunicorn.ctl") for s in sockets_a), sockets_a  # each has its own control socket
    assert any(".s.PGSQL." in s for s in sockets_a), sockets_a
    assert not sockets_a & sockets_b, sockets_a & sockets_b
    for stack in two:  # the MCP server may come up after the web server answers
        wait_until(lambda stack=stack: len(tcp_listening(stack)) >= 2, 90, "web and MCP to listen", stack.tail)
    ports_a, ports_b = tcp_listening(a), tcp_listening(b)
    assert len(ports_a) >= 2 and not ports_a & ports_b, (ports_a, ports_b)  # web and MCP each
    cache = embedder_cache()
    shared_files = open_files(a, shared_on_purpose=cache) & open_files(b, shared_on_purpose=cache)
    assert not shared_files, shared_files

    # `up` itself holds no embedding model (it was built and the demo seeded by a child).
    for stack in two:
        up = psutil.Process(stack.proc.pid)
        assert up.memory_info().rss < 100 * 2**20, up.memory_info().rss
        assert not any("onnx" in m.path for m in up.memory_maps()), "up mapped the ONNX runtime"

    for stack in two:
        postmaster = stack.postmaster()
        code, left = stack.stop()
        assert code == 0, stack.tail()
        assert left == [], left
        assert postmaster is not None and gone(postmaster)
        assert stack.up_lines()[-1] == "up: embedded Postgres stopped"


def test_a_second_up_on_a_taken_data_folder_or_address_stops_at_once_and_says_why(tmp_path):
    """The newcomer's clashes: `up` started twice in one checkout, or another server already on :8000.
    The second `up` exits with the reason before starting anything, and the first runs on untouched."""
    first = UpStack(tmp_path / "first", env={"EMBEDDER_CACHE_DIR": embedder_cache(), "WEB_WORKERS": "1"})
    try:
        first.wait_ready()
        children = {p.pid for p in psutil.Process(first.proc.pid).children()}
        postmaster = first.postmaster().pid
        bind = first.root.removeprefix("http://")
        other_data = tmp_path / "other-data"
        other_data.mkdir()
        cases = {
            "same data folder": (
                {},
                [f"--bind=127.0.0.1:{free_port()}"],
                f"another `manage.py up` (pid {first.proc.pid})",
            ),
            "same address": (
                {"MEMORY_ADMIN_DATA_DIR": str(other_data)},
                [f"--bind={bind}"],
                f"{bind} (web) is already in use",
            ),
        }
        for case, (env, args, said) in cases.items():
            second = subprocess.run(
                [sys.executable, "manage.py", "up", "--no-demo", *args],
                cwd=ROOT,
                env={**first.env, **env},
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert second.returncode != 0, case
            assert said in second.stderr and "Nothing was started" in second.stderr, (case, second.stderr[-800:])
            assert "restart" not in second.stdout, case
        # Nothing of the second was left running, and the first is whole.
        assert not [p for p in psutil.process_iter(["cmdline"]) if str(other_data) in " ".join(p.info["cmdline"] or [])]
        assert {p.pid for p in psutil.Process(first.proc.pid).children()} == children
        assert first.postmaster().pid == postmaster
        status, _ = http("GET", first.base + "health/live", timeout=5)
        assert status == 200
    finally:
        first.kill_everything()
