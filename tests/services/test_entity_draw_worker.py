"""Entity drawing with REAL processes: a gunicorn serving the API, `celery worker` and `celery beat`, on
this run's test database and its default broker. A burst of writes for one memory user makes one pending
drawing, not a task per write; a drawing whose task was lost is sent again by the beat's sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Sum

from memory_admin.models import EntityDrawing, Fact, FactEntity, Heartbeat, MemoryUser
from memory_admin.services.keys import api_key_create
from memory_admin.services.tenants import tenant_create
from tests.conftest import wait_until_database_quiet

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["Dana Scully", "Kim Wexler", "Hank Scorpio", "Saul Goodman", "Lisbon", "Acme Robotics", "Globex"]


WORDS = (
    "garden violin harbour recipe glacier lantern saddle compass orchard ferry pottery chess quilt telescope "
    "bakery kayak meadow anvil sonnet canyon ledger falcon tulip marathon cello espresso lighthouse origami "
    "vineyard bicycle volcano theatre archive monsoon carpentry tapestry planetarium rowing beekeeping mosaic"
).split()


def turn(i: int) -> str:
    """A distinct statement naming two of NAMES (the write path merges near-duplicates)."""
    a, b, c = WORDS[i % len(WORDS)], WORDS[i * 7 % len(WORDS)], WORDS[i * 13 % len(WORDS)]
    return f"{NAMES[i % 7]} told {NAMES[(i + 3) % 7]} about the {a}, the {b} and a {c} (note {i})."


class Stack:
    """The API server (started once) and a worker and beat started and stopped by each test."""

    def __init__(self, env: dict[str, str], logdir: Path):
        self.env, self.logdir = env, logdir
        self.procs: dict[str, subprocess.Popen] = {}
        self.port = 0

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(
            args, env=env or self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs[name] = proc
        return proc

    def _wait_log(self, name: str, offset: int, marker: bytes, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in (self.logdir / f"{name}.log").read_bytes()[offset:]:
                return
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready:\n{self.logs()}")

    def _offset(self, name: str) -> int:
        log = self.logdir / f"{name}.log"
        return log.stat().st_size if log.exists() else 0

    def start_web(self) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        args = [sys.executable, "-m", "gunicorn", "memory_admin.wsgi:application", "-b", f"127.0.0.1:{self.port}"]
        self._spawn("web", [*args, "-k", "gthread", "--workers", "1", "--threads", "4", "--log-level", "info"])
        self._wait_log("web", 0, b"Booting worker")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if self.request("GET", "/api/v1/health", None)[0] == 200:
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"web not answering:\n{self.logs()}")

    def start_worker(self, *, lost_seconds: float = 600) -> None:
        """A worker and beat; the sweep (run by the worker) takes a claim silent for `lost_seconds` for lost."""
        offset = self._offset("worker")
        env = {**self.env, "ENTITY_DRAW_LOST_SECONDS": str(lost_seconds)}
        celery = [sys.executable, "-m", "celery", "-A", "memory_admin"]
        self._spawn(
            "worker",
            [*celery, "worker", "--loglevel=INFO", "--pool=prefork", "--concurrency=1", "--without-heartbeat"]
            + ["--without-mingle", "--without-gossip", f"--hostname=draw-test-{time.monotonic_ns()}@%h"],
            env,
        )
        self._wait_log("worker", offset, b" ready.")
        beat = [*celery, "beat", "--loglevel=INFO", "-s", str(self.logdir / "beat-schedule")]
        self._spawn("beat", beat, env)

    def stop(self, *names: str) -> None:
        for name in names or list(self.procs):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def request(self, method: str, path: str, key: str | None, body: dict | None = None) -> tuple[int, bytes]:
        import http.client
        import json

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n" + (self.logdir / f"{name}.log").read_text(errors="replace")[-3000:]
            for name in ("web", "worker", "beat")
            if (self.logdir / f"{name}.log").exists()
        )


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}",
        "PYTHONPATH": str(ROOT),
        "ENTITY_SWEEP_SECONDS": "1",
        "API_RATE_LIMIT": "1000000",
        "LOG_LEVEL": "WARNING",
    }
    for name in ("TEST_DB_NAME", "CELERY_BROKER_URL"):
        env.pop(name, None)
    stack = Stack(env, tmp_path_factory.mktemp("drawing"))
    stack.start_web()
    yield stack
    stack.stop()
    with django_db_blocker.unblock():
        Heartbeat.objects.all().delete()


@pytest.fixture
def running(stack, transactional_db):
    yield stack
    stack.stop("beat", "worker")
    wait_until_database_quiet()


@pytest.fixture
def tenant_key(transactional_db):
    tenant = tenant_create(slug=f"drawing-{time.monotonic_ns()}")
    return tenant, api_key_create(tenant_id=tenant.pk, agent_name="burst")[1]


def burst(stack: Stack, key: str, user: str, n: int, clients: int = 4) -> None:
    def write(i: int) -> int:
        body = {
            "content": turn(i),
            "source": "user_stated",
            "observed_at": f"2024-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        }
        return stack.request("POST", f"/api/v1/users/{user}/facts", key, body)[0]

    with ThreadPoolExecutor(clients) as pool:
        statuses = list(pool.map(write, range(n)))
    assert all(s in (200, 201) for s in statuses), statuses


def wait_drawn(stack: Stack, user: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    facts = Fact.objects.filter(memory_user__external_id=user)
    while time.monotonic() < deadline:
        if not facts.filter(entities_due=True).exists():
            return
        time.sleep(0.5)
    pytest.fail(f"{facts.filter(entities_due=True).count()} of {facts.count()} facts still due\n{stack.logs()}")


def drawings_run(user: str) -> int:
    return EntityDrawing.objects.filter(memory_user__external_id=user).aggregate(n=Sum("runs"))["n"] or 0


def test_a_burst_written_while_the_worker_is_down_is_drawn_by_one_task(running, tenant_key):
    burst(running, tenant_key[1], "alice", 500)
    alice = MemoryUser.objects.get(external_id="alice")
    stored = Fact.objects.filter(memory_user=alice).count()  # near-duplicate turns are merged
    assert Fact.objects.filter(memory_user=alice, entities_due=True).count() == stored > 300
    assert EntityDrawing.objects.get(memory_user=alice).pending_since is not None
    running.start_worker()
    wait_drawn(running, "alice")
    time.sleep(2)  # a second task for her, had one been sent, would have run by now
    assert drawings_run("alice") == 1  # one task for 500 writes
    active = Fact.objects.filter(memory_user=alice, status=Fact.Status.ACTIVE)  # the others went over the cap
    assert active.exists() and not active.filter(mentions__isnull=True).exists()
    assert set(FactEntity.objects.filter(fact__memory_user=alice).values_list("entity__name", flat=True)) == set(NAMES)
    assert EntityDrawing.objects.get(memory_user=alice).pending_since is None


def test_writes_while_the_worker_draws_make_few_tasks_and_all_are_drawn(running, tenant_key):
    running.start_worker()
    burst(running, tenant_key[1], "bob", 300)
    wait_drawn(running, "bob")
    time.sleep(2)
    assert 1 <= drawings_run("bob") <= 30  # not one a write
    assert EntityDrawing.objects.get(memory_user__external_id="bob").pending_since is None


def test_a_drawing_whose_task_was_lost_is_sent_again_by_the_sweep(running, tenant_key):
    """The drawing was claimed but its message never reached a worker: writes meanwhile send nothing
    (it is pending), and once it gave no sign of life for ENTITY_DRAW_LOST_SECONDS the sweep sends it."""
    from memory_admin.services.entity_draw import claim

    tenant, key = tenant_key
    carol = MemoryUser.objects.create(tenant=tenant, external_id="carol")
    assert claim([(tenant.pk, carol.pk)]) == [(tenant.pk, carol.pk)]  # claimed, and its message lost
    burst(running, key, "carol", 40)
    running.start_worker(lost_seconds=4)
    wait_drawn(running, "carol", timeout=120)
    # Sent again once (a second time only if the drawing itself outlasted the lost time: harmless).
    assert 1 <= drawings_run("carol") <= 2
    assert EntityDrawing.objects.get(memory_user=carol).pending_since is None
    assert FactEntity.objects.filter(fact__memory_user=carol).exists()
