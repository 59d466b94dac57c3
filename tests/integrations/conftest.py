"""Live servers for the integration doors (typed client, MCP, LangGraph store): real processes on this
run's test database. Tests here commit their data (transactional), so the server processes see it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
CLIENT_SRC = ROOT / "clients" / "python" / "src"
if str(CLIENT_SRC) not in sys.path:
    # The client is its own distribution; the tests use it from the source tree (the venv test installs it).
    sys.path.insert(0, str(CLIENT_SRC))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a server process pointed at this run's test database."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}",
        "PYTHONPATH": str(ROOT),
        "ACCESS_COUNT_FLUSH_SECONDS": "0",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("TEST_DB_NAME", None)
    env.pop("MEMORY_ADMIN_API_KEY", None)
    return {**env, **extra}


def wait_until_up(url: str, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError as exc:
            if getattr(exc, "code", None):  # an HTTP answer, even an error one: it is up
                return
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def gunicorn_server(django_db_setup, django_db_blocker) -> Iterator[str]:
    """gunicorn (the production config: one worker, model warmed) on the test database; its base URL."""
    port = free_port()
    env = server_env(BIND=f"127.0.0.1:{port}", WEB_WORKERS="1", WEB_THREADS="4")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/api/v1/health", proc, "gunicorn")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def wait_for_server_work(timeout: float = 15) -> None:
    """Let the server processes finish what they do after a response before the test database is flushed: a web
    process claims the drawing of the entities of facts written in a request ENTITY_DRAW_SEND_EVERY (0.25 s)
    after it (`services.entity_draw`), and that claim's row locks deadlock with the flush's TRUNCATE (seen once
    in a full suite). Waits out that window, then until no other session of the test database is at work."""
    time.sleep(0.3)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction')"
            )
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.05)


@pytest.fixture
def make_key(transactional_db):
    """A raw agent key for a tenant (committed, so a server process sees it). Set up after the database, so
    its teardown (`wait_for_server_work`) runs before the flush."""
    from memory_admin.services.keys import api_key_create

    def make(tenant, *, admin: bool = False, users: list[str] | None = None, agent: str = "agent") -> str:
        return api_key_create(tenant_id=tenant.pk, agent_name=agent, is_admin=admin, allowed_user_ids=users)[1]

    yield make
    wait_for_server_work()
