"""Extraction with REAL processes: `celery -A memory_admin worker` and `celery -A memory_admin beat` on the
embedded Postgres broker, pointed at this run's test database, talking HTTP to the fake OpenAI server.

The worker is SIGKILLed mid-extraction in one test: every message must still be extracted exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from memory_admin.models import (
    Episode,
    ExtractionBatch,
    Fact,
    FactEntity,
    Heartbeat,
    LlmCall,
    Message,
    TenantSettings,
)
from tests.conftest import wait_until_database_quiet
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
CELERY = [sys.executable, "-m", "celery", "-A", "memory_admin"]
LLM_TIMEOUT = 4.0


class Processes:
    """A worker and beat, each in its own process group (so SIGKILL takes the pool children too)."""

    def __init__(self, env: dict[str, str], logdir: Path):
        self.env, self.logdir = env, logdir
        self.worker: subprocess.Popen | None = None
        self.beat: subprocess.Popen | None = None
        self.starts = 0

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
        return subprocess.Popen(
            CELERY + args, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start_worker(self) -> None:
        self.starts += 1
        log = self.logdir / "worker.log"
        offset = log.stat().st_size if log.exists() else 0
        self.worker = self._spawn(
            [
                "worker",
                "--loglevel=INFO",
                "--pool=prefork",
                "--concurrency=2",
                f"--hostname=extraction-test-{self.starts}@%h",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
                "--purge",
            ],
            "worker",
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            # Ready, and both pool children have loaded the embedding model (worker_process_init).
            out = log.read_bytes()[offset:]
            if b" ready." in out and out.count(b"embedding model warm") >= 2:
                return
            if self.worker.poll() is not None:
                raise RuntimeError("worker died:\n" + log.read_text()[-3000:])
            time.sleep(0.2)
        raise RuntimeError("worker not ready:\n" + log.read_text()[-3000:])

    def start_beat(self) -> None:
        self.beat = self._spawn(["beat", "--loglevel=INFO", "-s", str(self.logdir / "beat-schedule")], "beat")

    def kill_worker(self) -> None:
        """SIGKILL, no warning: the machine dies mid-extraction."""
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait(10)

    def stop(self) -> None:
        for proc in (self.beat, self.worker):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in (self.beat, self.worker):
            if proc is not None:
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)

    def logs(self) -> str:
        return "\n".join(
            (self.logdir / f"{n}.log").read_text()[-4000:]
            for n in ("worker", "beat")
            if (self.logdir / f"{n}.log").exists()
        )


@pytest.fixture(scope="module")
def fake():
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def processes(django_db_setup, django_db_blocker, fake, tmp_path_factory):
    """One worker and one beat for the module (the tests' data is flushed between tests)."""
    db = connection.settings_dict  # the test database of this run (TEST_DB_NAME)
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}",
        "OPENAI_API_KEY": "sk-test-not-a-real-key",
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_TIMEOUT_SECONDS": str(LLM_TIMEOUT),
        "EXTRACTION_SWEEP_SECONDS": "0.5",
        "EPISODE_SWEEP_SECONDS": "1",
        "ENTITY_SWEEP_SECONDS": "1",
        # This process's claims send to the development broker: the sweep takes them for lost soon.
        "ENTITY_DRAW_LOST_SECONDS": "2",
        "EXTRACTION_LEASE_MARGIN_SECONDS": "1",
        "EXTRACTION_BACKOFF_SECONDS": "0.5",
        "EXTRACTION_REDISPATCH_SECONDS": "3",
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "WARNING",
    }
    env.pop("TEST_DB_NAME", None)
    env.pop("CELERY_BROKER_URL", None)
    procs = Processes(env, tmp_path_factory.mktemp("celery"))
    procs.start_worker()
    procs.start_beat()
    yield procs
    procs.stop()
    with django_db_blocker.unblock():  # their last heartbeats would make later health checks stale
        Heartbeat.objects.all().delete()


@pytest.fixture
def procs(processes, transactional_db, fake):
    fake.reset()
    yield processes
    wait_until_database_quiet()  # the workers' last writes, before the test database is flushed


def wait_for(predicate, timeout: float, procs: Processes, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}\n{procs.logs()}")


def set_window(tenant, seconds: int) -> None:
    TenantSettings.objects.update_or_create(tenant=tenant, defaults={"debounce_seconds": seconds})


def test_twenty_quick_messages_make_exactly_one_llm_call_after_the_window(api, tenant, procs, fake):
    set_window(tenant, 1)
    said = [
        "I grow tomatoes on my balcony.",
        "I play the cello in an orchestra.",
        "I drive a red Volvo estate.",
        "I teach chemistry at a high school.",
        "I run marathons every spring.",
        "I speak fluent Portuguese.",
        "I collect vintage fountain pens.",
        "I brew my own beer at home.",
        "I volunteer at the animal shelter.",
        "I fly small planes on weekends.",
    ]
    for i in range(20):
        content = said[i // 2] if i % 2 == 0 else f"That is interesting, tell me more (reply {i})."
        r = api.post(
            "users/alice/messages",
            {"thread_id": "conv", "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": content}]},
        )
        assert r.status_code == 202, r.content
    last_post = time.time()
    wait_for(
        lambda: (
            not Message.objects.filter(status="pending").exists()
            and ExtractionBatch.objects.filter(status="done").exists()
        ),
        30,
        procs,
        "extraction",
    )
    done_at = time.time()
    time.sleep(1.5)  # a second window: nothing else may happen
    assert fake.count("extraction") == 1, procs.logs()
    assert fake.calls[0]["at"] >= last_post + 1 - 0.05  # not before the thread went quiet for the window
    batch = ExtractionBatch.objects.get()
    assert batch.message_count == 20 and batch.status == "done" and batch.attempts == 1
    assert Message.objects.filter(status="extracted", batch=batch).count() == 20
    contents = Counter(Fact.objects.values_list("content", flat=True))
    assert len(contents) == 10 and set(contents.values()) == {1}  # the user's 10 statements, once each
    assert LlmCall.objects.filter(batch=batch, ok=True).count() == 1 and batch.cost_usd > 0
    print(f"\nend to end (last post → batch done): {done_at - last_post:.2f} s")


def test_a_worker_killed_mid_extraction_loses_and_duplicates_nothing(api, tenant, procs, fake):
    set_window(tenant, 1)
    statements = [
        f"I keep project {name} in the {name.lower()} repository."
        for name in ("Apollo", "Borealis", "Cygnus", "Draco", "Eridanus")
    ]
    r = api.post(
        "users/alice/messages", {"thread_id": "conv", "messages": [{"role": "user", "content": s} for s in statements]}
    )
    assert r.status_code == 202
    # The first extraction answer takes 3 s: long enough to die during it (the close task's summary may
    # reach the model first; it must not take the slow answer).
    fake.fail_next(f"slow:{LLM_TIMEOUT - 1}", layer="extraction")
    assert api.post("users/alice/threads/conv/close", {"outcome": "success"}).status_code == 202
    wait_for(lambda: fake.count("extraction") >= 1, 20, procs, "the first LLM call")
    assert ExtractionBatch.objects.get().status == "running"
    procs.kill_worker()
    assert not Fact.objects.exists() and Message.objects.filter(status="pending").count() == 5

    procs.start_worker()
    wait_for(lambda: ExtractionBatch.objects.filter(status="done").exists(), 40, procs, "recovery")
    batch = ExtractionBatch.objects.get()
    assert batch.attempts == 2  # the lost attempt counts
    assert Message.objects.filter(status="extracted").count() == 5
    contents = Counter(Fact.objects.values_list("content", flat=True))
    assert len(contents) == 5 and set(contents.values()) == {1}, contents
    assert Fact.objects.filter(batch=batch).count() == 5
    # The close task died with the worker; the sweeper still turns the closed thread into its episode.
    episode = wait_for(lambda: Episode.objects.first(), 20, procs, "the episode")
    assert episode.messages.count() == 5
    wait_for(lambda: episode.facts.count() == 5, 10, procs, "facts linked to the episode")


def test_rate_limited_then_success_through_the_sweeper(api, tenant, procs, fake):
    set_window(tenant, 1)
    fake.fail_next("429", "500")
    api.post(
        "users/alice/messages",
        {
            "thread_id": "conv",
            "messages": [{"role": "user", "content": "I moved our staging cluster to Hetzner last week."}],
        },
    )
    wait_for(lambda: ExtractionBatch.objects.filter(status="done").exists(), 30, procs, "the retried batch")
    batch = ExtractionBatch.objects.get()
    assert batch.attempts == 3 and fake.count("extraction") == 3
    assert list(LlmCall.objects.filter(batch=batch).order_by("id").values_list("ok", flat=True)) == [False, False, True]
    assert Fact.objects.filter(batch=batch).count() == 1
    # The embedded broker keeps no delivered messages: its table holds only what waits (a sweep or two).
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM broker_message")
        assert cursor.fetchone()[0] < 5
    api.post(
        "users/alice/messages",
        {
            "thread_id": "conv",
            "messages": [{"role": "user", "content": "I also run the Grafana dashboards for the team."}],
        },
    )
    wait_for(lambda: ExtractionBatch.objects.filter(status="done").count() == 2, 30, procs, "the next batch")


def test_a_fact_posted_through_the_api_gets_its_entities_from_the_worker(api, tenant, procs):
    r = api.post("users/alice/facts", {"content": "Dana Scully works at Acme Robotics.", "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    fact_id = r.json()["fact"]["id"]
    # The write committed without them. This process's after-commit send goes to the development
    # broker, not the worker's: the beat's sweep makes good a lost task, and the worker runs it.
    names = wait_for(
        lambda: set(FactEntity.objects.filter(fact_id=fact_id).values_list("entity__name", flat=True)),
        30,
        procs,
        "the entities of the posted fact",
    )
    assert names == {"Dana Scully", "Acme Robotics"}
    found = api.get("entities", q="Acme Robotics", user_id="alice").json()["items"]
    assert [e["name"] for e in found] == ["Acme Robotics"]


def test_a_posted_message_becomes_a_search_hit_once_the_worker_indexed_it(api, tenant, procs):
    r = api.post(
        "users/alice/messages",
        {"thread_id": "trip", "messages": [{"role": "user", "content": "We rented a houseboat on Loch Ness in May."}]},
    )
    assert r.status_code == 202, r.content
    [message_id] = r.json()["message_ids"]

    def message_hits():
        found = api.get("users/alice/search", q="houseboat Loch Ness", kinds="message").json()["hits"]
        return [h["message"] for h in found]

    shown = wait_for(message_hits, 30, procs, "the message indexed by the worker")
    assert [m["id"] for m in shown] == [message_id] and shown[0]["text"] == "We rented a houseboat on Loch Ness in May."
    assert not Message.objects.filter(search_due=True).exists()
