"""The production topology, for real, on one machine (docs/deployment.md describes it):

* Redis (Debian's redis-server, no persistence, a free local port) as the Celery broker and result store;
* Postgres reached over TCP through DATABASE_URL (its own cluster on 127.0.0.1:<free port>);
* two gunicorn servers on two ports, two Celery workers and one beat, all separate processes sharing
  only the environment a deployment would give them (SECRET_KEY, DATABASE_URL, CELERY_*).

Messages are posted to both web servers at once by two clients. Afterwards, in the database: every
thread became exactly one batch (the debounce is per thread, in Postgres, so it holds across web
servers), every message was extracted exactly once, every statement is one fact. Then a worker is
SIGKILLed while it is in the middle of a batch (its LLM call is in flight): the other worker finishes
that batch once the lease expires, with no fact lost or written twice.

Bounded: about 1.5 minutes on a 2-core machine. `pytest -m scaleout` runs only this.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import threading
import time
from collections import Counter

import pytest
from celery import Celery

from tests.fake_openai import FakeOpenAI
from tests.ops.cluster import CELERY, ROOT, Processes, TcpPostgres, embedder_cache, free_port, http, manage, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.scaleout]

DEBOUNCE_SECONDS = 4
LLM_TIMEOUT = 4.0  # the lease is this plus EXTRACTION_LEASE_MARGIN_SECONDS (1 s)
STATEMENTS = [
    "I grow tomatoes on my balcony.",
    "I play the cello in an orchestra.",
    "I drive a red Volvo estate.",
    "I teach chemistry at a high school.",
    "I run marathons every spring.",
    "I speak fluent Portuguese.",
    "I collect vintage fountain pens.",
    "I brew my own beer at home.",
]
VICTIM_STATEMENTS = [
    f"I keep project {name} in the {name.lower()} repository."
    for name in ("Apollo", "Borealis", "Cygnus", "Draco", "Eridanus")
]
USERS = [f"member-{i}" for i in range(6)]


class Cluster:
    def __init__(self, env: dict[str, str], procs: Processes, pg: TcpPostgres, redis_url: str, webs: list[str]):
        self.env, self.procs, self.pg, self.redis_url, self.webs = env, procs, pg, redis_url, webs
        self.key = ""
        self.celery = Celery("scaleout-probe", broker=redis_url + "/0", backend=redis_url + "/1")

    def start_workers(self, *names: str) -> None:
        log_before = {name: len(self.procs.log(name)) for name in names}
        for name in names:
            self.procs.start(
                name,
                CELERY + ["worker", "--loglevel=INFO", "--pool=prefork", "--concurrency=1", f"--hostname={name}@%h"],
            )

        def ready() -> bool:
            outs = {name: self.procs.log(name)[log_before[name] :] for name in names}
            for name, out in outs.items():
                assert self.procs.procs[name].poll() is None, out[-3000:]
            return all(" ready." in out and "embedding model warm" in out for out in outs.values())

        wait_until(ready, 120, f"{', '.join(names)} to be ready", self.procs.logs)

    def sql(self, query: str) -> list[list[str]]:
        return self.pg.rows(query)

    def count(self, query: str) -> int:
        return int(self.pg.psql(query).strip())


@pytest.fixture(scope="module")
def fake():
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, fake):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: run `bash .ci/bootstrap --browser` (Debian's redis-server)")
    data = tmp_path_factory.mktemp("scaleout")
    embedder = embedder_cache()
    pg = TcpPostgres()  # destroyed in the `finally` below, like every process started here
    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}"
    webs = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": pg.url,
        "CELERY_BROKER_URL": f"{redis_url}/0",
        "CELERY_RESULT_BACKEND": f"{redis_url}/1",
        # Shared by every host of a deployment (the per-install files would differ between hosts).
        "SECRET_KEY": secrets.token_urlsafe(50),
        "PII_FINGERPRINT_KEY": secrets.token_urlsafe(50),
        "MEMORY_ADMIN_DATA_DIR": str(data),
        "EMBEDDER_CACHE_DIR": embedder,
        "OPENAI_API_KEY": "sk-test-not-a-real-key",
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_TIMEOUT_SECONDS": str(LLM_TIMEOUT),
        "CONTRADICTION_JUDGE": "rules",
        "GUARD_JUDGE": "rules",
        "EXTRACTION_SWEEP_SECONDS": "0.5",
        "EXTRACTION_LEASE_MARGIN_SECONDS": "1",
        "EXTRACTION_REDISPATCH_SECONDS": "3",
        "EXTRACTION_BACKOFF_SECONDS": "0.5",
        "WORKER_HEARTBEAT_SECONDS": "2",
        "HEALTH_STARTUP_GRACE_SECONDS": "5",
        "WEB_WORKERS": "1",
        "LOG_LEVEL": "WARNING",
    }
    for name in ("TEST_DB_NAME", "BIND"):
        env.pop(name, None)
    procs = Processes(env, data)
    try:
        procs.start(
            "redis",
            [
                "redis-server",
                "--port",
                str(redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(data),
            ],
        )
        manage(env, "migrate", "--verbosity=0")
        manage(env, "create_tenant", "scale")
        key = manage(env, "create_agent_key", "scale", "loader", "--admin").splitlines()[-1]
        for i, bind in enumerate(webs):
            procs.start(
                f"web-{'ab'[i]}",
                [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf", f"--bind={bind}"],
            )
        procs.start("beat", CELERY + ["beat", "--loglevel=INFO", "-s", str(data / "beat-schedule")])
        cluster = Cluster(env, procs, pg, redis_url, [f"http://{bind}/api/v1/" for bind in webs])
        cluster.key = key
        cluster.start_workers("worker-a", "worker-b")
        for base in cluster.webs:
            wait_until(
                lambda base=base: http("GET", base + "health/ready", timeout=5)[1].get("status") == "ok",
                90,
                f"{base} to be ready",
                procs.logs,
            )
        status, body = http("PATCH", cluster.webs[0] + "settings", {"debounce_seconds": DEBOUNCE_SECONDS}, key)
        assert status == 200, body
        yield cluster
    finally:
        procs.stop_all()
        pg.destroy()


def post(base: str, key: str, user: str, thread: str, contents: list[str]) -> None:
    status, body = http(
        "POST",
        base + f"users/{user}/messages",
        {"thread_id": thread, "messages": [{"role": "user", "content": c} for c in contents]},
        key,
    )
    assert status == 202, body


def report(capsys: pytest.CaptureFixture, line: str) -> None:
    """The figures go to the terminal even when pytest captures output (CI shows them)."""
    with capsys.disabled():
        print(f"\n{line}")


def test_two_web_servers_two_workers_extract_every_message_exactly_once(cluster, fake, capsys):
    fake.reset()
    started = time.monotonic()
    # Two clients at once, one per web server; each thread gets its messages from both.
    shares: list[list[tuple[str, str]]] = [[], []]
    for r, statement in enumerate(STATEMENTS):
        for u, user in enumerate(USERS):
            shares[(r + u) % 2].append((user, statement))
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            for user, statement in shares[i]:
                post(cluster.webs[i], cluster.key, user, "chat", [statement])
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    clients = [threading.Thread(target=client, args=(i,)) for i in (0, 1)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(60)
    assert not errors, errors
    posted = len(USERS) * len(STATEMENTS)
    per_web = [len(share) for share in shares]

    def all_done() -> bool:
        return cluster.count("SELECT count(*) FROM memory_admin_message WHERE status = 'extracted'") == posted

    wait_until(all_done, DEBOUNCE_SECONDS + 40, f"all {posted} messages to be extracted", cluster.procs.logs)
    extracted_in = time.monotonic() - started

    batches = cluster.sql(
        "SELECT t.external_id, mu.external_id, b.status, b.message_count, b.attempts, "
        "extract(epoch FROM b.created_at - max(m.received_at)) "
        "FROM memory_admin_extractionbatch b JOIN memory_admin_thread t ON t.id = b.thread_id "
        "JOIN memory_admin_memoryuser mu ON mu.id = b.memory_user_id "
        "JOIN memory_admin_message m ON m.batch_id = b.id GROUP BY 1, 2, 3, 4, 5, b.created_at"
    )
    # The debounce held across web servers: one batch per thread, planned a full window after its last message.
    assert sorted(row[1] for row in batches) == sorted(USERS), batches
    assert {(row[2], row[3], row[4]) for row in batches} == {("done", str(len(STATEMENTS)), "1")}, batches
    assert min(float(row[5]) for row in batches) >= DEBOUNCE_SECONDS - 0.2, batches
    assert fake.count("extraction") == len(USERS)  # one LLM call per batch, none repeated

    facts = Counter(
        tuple(row)
        for row in cluster.sql(
            "SELECT mu.external_id, f.content FROM memory_admin_fact f "
            "JOIN memory_admin_memoryuser mu ON mu.id = f.memory_user_id"
        )
    )
    duplicates = sum(n - 1 for n in facts.values())
    lost = posted - cluster.count(
        "SELECT count(*) FROM memory_admin_message WHERE status = 'extracted' "
        "AND batch_id IN (SELECT id FROM memory_admin_extractionbatch WHERE status = 'done')"
    )
    expected = {(user, f"The user said: {s.rstrip('.')}.") for user in USERS for s in STATEMENTS}
    assert set(facts) == expected and duplicates == 0 and lost == 0
    report(
        capsys,
        f"scale-out: {posted} messages posted to 2 web servers ({per_web[0]} + {per_web[1]}), "
        f"{len(batches)} batches (one per thread), {len(facts)} facts, duplicates = {duplicates}, "
        f"lost = {lost}; all extracted {extracted_in:.1f} s after the first post (debounce {DEBOUNCE_SECONDS} s)",
    )


def test_a_worker_killed_mid_batch_is_covered_by_the_other(cluster, fake, capsys):
    fake.reset()
    fake.fail_next(f"slow:{LLM_TIMEOUT - 1}")  # the first answer takes 3 s: long enough to die during it
    post(cluster.webs[1], cluster.key, "victim", "kill", VICTIM_STATEMENTS[:3])
    post(cluster.webs[0], cluster.key, "victim", "kill", VICTIM_STATEMENTS[3:])
    wait_until(lambda: fake.count("extraction") >= 1, DEBOUNCE_SECONDS + 20, "the first LLM call", cluster.procs.logs)

    # Which worker runs the batch? Asked over the broker, as `celery inspect active` would.
    def holder() -> str | None:
        active = cluster.celery.control.inspect(timeout=1.0).active() or {}
        return next(
            (
                host.split("@")[0]
                for host, tasks in active.items()
                if any(t["name"] == "extraction.run_batch" for t in tasks)
            ),
            None,
        )

    victim = wait_until(holder, 5, "the worker running the batch", cluster.procs.logs, every=0.1)
    cluster.procs.kill(victim)
    killed_at = time.monotonic()
    batch = (
        "SELECT b.status, b.attempts FROM memory_admin_extractionbatch b JOIN memory_admin_memoryuser mu "
        "ON mu.id = b.memory_user_id WHERE mu.external_id = 'victim'"
    )
    assert cluster.sql(batch) == [["running", "1"]]
    assert (
        cluster.count(
            "SELECT count(*) FROM memory_admin_fact f JOIN memory_admin_memoryuser mu "
            "ON mu.id = f.memory_user_id WHERE mu.external_id = 'victim'"
        )
        == 0
    )

    wait_until(
        lambda: cluster.sql(batch) == [["done", "2"]], 30, "the other worker to finish the batch", cluster.procs.logs
    )
    recovered_in = time.monotonic() - killed_at
    facts = Counter(
        row[0]
        for row in cluster.sql(
            "SELECT f.content FROM memory_admin_fact f JOIN memory_admin_memoryuser mu ON mu.id = f.memory_user_id "
            "WHERE mu.external_id = 'victim'"
        )
    )
    assert set(facts) == {f"The user said: {s.rstrip('.')}." for s in VICTIM_STATEMENTS}
    duplicates = sum(n - 1 for n in facts.values())
    lost = 5 - cluster.count(
        "SELECT count(*) FROM memory_admin_message m JOIN memory_admin_memoryuser mu "
        "ON mu.id = m.memory_user_id WHERE mu.external_id = 'victim' AND m.status = 'extracted'"
    )
    assert duplicates == 0 and lost == 0
    assert fake.count("extraction") == 2  # the killed attempt and the one that finished

    # The killed worker comes back and both take work again; results travel through Redis too.
    cluster.start_workers(victim)
    wait_until(
        lambda: (
            {host.split("@")[0] for host in cluster.celery.control.inspect(timeout=2.0).ping() or {}}
            == {"worker-a", "worker-b"}
        ),
        30,
        "both workers to answer a ping over Redis",
        cluster.procs.logs,
    )
    result = cluster.celery.send_task("extraction.sweep", ignore_result=False).get(timeout=20)
    assert set(result) == {"planned", "recovered"}
    report(
        capsys,
        f"scale-out: worker {victim} SIGKILLed mid-batch; the other worker finished it {recovered_in:.1f} s "
        f"later (attempt 2): 5 messages, 1 batch, 5 facts, duplicates = {duplicates}, lost = {lost}",
    )
