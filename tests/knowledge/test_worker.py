"""Ingestion on REAL processes: `celery worker` (one process, so the queues' order is what decides) and
`celery beat` on the embedded Postgres broker of this run's test database, crawling a real local site.

The test process publishes to the development broker (tests/conftest.py), so the worker learns of a new
crawl the way it recovers a lost send: beat's refresh sweep resends a running crawl that has not moved
for KNOWLEDGE_STUCK_SECONDS.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from memory_admin.models import ExtractionBatch, Heartbeat, KnowledgeChunk, KnowledgeSource, Message, TenantSettings
from tests.conftest import wait_until_database_quiet
from tests.knowledge.conftest import Site

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
CELERY = [sys.executable, "-m", "celery", "-A", "memory_admin"]
PAGES = 16


@pytest.fixture(scope="module")
def wsite():
    server = Site()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def processes(django_db_setup, django_db_blocker, wsite, tmp_path_factory):
    db = connection.settings_dict
    logdir = tmp_path_factory.mktemp("knowledge-celery")
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}",
        "OPENAI_API_KEY": "",  # the offline rules extractor
        "EXTRACTION_SWEEP_SECONDS": "0.5",
        "KNOWLEDGE_REFRESH_SWEEP_SECONDS": "1",
        "KNOWLEDGE_STUCK_SECONDS": "1",
        "KNOWLEDGE_PAGES_PER_TASK": "1",
        "KNOWLEDGE_ALLOWED_HOSTS": f"127.0.0.1:{wsite.port}",
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "WARNING",
    }
    env.pop("TEST_DB_NAME", None)
    env.pop("CELERY_BROKER_URL", None)
    procs = []
    for name, args in (
        (
            "worker",
            [
                "worker",
                "--loglevel=INFO",
                "--pool=prefork",
                "--concurrency=1",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
                "--purge",
                "--hostname=knowledge-test@%h",
            ],
        ),
        ("beat", ["beat", "--loglevel=INFO", "-s", str(logdir / "beat-schedule")]),
    ):
        log = open(logdir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
        procs.append(
            subprocess.Popen(
                CELERY + args, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
    deadline = time.monotonic() + 120
    while b" ready." not in (logdir / "worker.log").read_bytes():
        assert time.monotonic() < deadline and procs[0].poll() is None, (logdir / "worker.log").read_text()[-3000:]
        time.sleep(0.2)
    yield logdir
    for proc in procs:
        os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    with django_db_blocker.unblock():
        Heartbeat.objects.all().delete()


@pytest.fixture
def worker(processes, transactional_db, wsite, settings):
    settings.KNOWLEDGE_ALLOWED_HOSTS = (f"127.0.0.1:{wsite.port}",)
    wsite.pages.clear()
    wsite.requests.clear()
    wsite.delay = 0.0
    yield processes
    wsite.delay = 0.0
    wait_until_database_quiet()


def wait_for(predicate, timeout: float, logdir: Path, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}\n" + (logdir / "worker.log").read_text()[-4000:])


def _wiki(site: Site, pages: int, topic: str = "service") -> None:
    site.page("/robots.txt", "", "text/plain")
    links = "".join(f'<li><a href="/p{i}">page {i}</a></li>' for i in range(pages))
    site.page("/", f"<h1>Wiki</h1><ul>{links}</ul>")
    for i in range(pages):
        site.page(f"/p{i}", f"<h1>Page {i}</h1><p>The {topic} number {i} is owned by team {i % 3}.</p>")


def _crawled(source_id):
    source = KnowledgeSource.objects.get(pk=source_id)
    return source if source.state == "idle" and source.last_crawled_at else None


def test_worker_crawls_a_site_in_steps_and_beat_refreshes_it(admin_api, worker, wsite):
    _wiki(wsite, 3)
    r = admin_api.post("knowledge/sources", {"kind": "site", "location": wsite.base + "/", "refresh_minutes": 60})
    assert r.status_code == 201, r.content
    source_id = r.json()["id"]
    wait_for(lambda: _crawled(source_id), 60, worker, "the first crawl")
    assert KnowledgeChunk.objects.filter(source_id=source_id, status="active", content__contains="number 2").exists()

    # The refresh is due: beat's sweep starts it; a changed page is superseded, the others stay.
    wsite.page("/p1", "<h1>Page 1</h1><p>The service number 1 moved to team 7.</p>")
    first = KnowledgeSource.objects.get(pk=source_id).last_crawled_at
    KnowledgeSource.objects.filter(pk=source_id).update(next_crawl_at=timezone.now() - timedelta(seconds=1))
    wait_for(
        lambda: KnowledgeSource.objects.filter(pk=source_id, state="idle", last_crawled_at__gt=first).exists(),
        60,
        worker,
        "the scheduled refresh",
    )
    statuses = dict(
        KnowledgeChunk.objects.filter(source_id=source_id, document__locator__endswith="/p1").values_list(
            "content", "status"
        )
    )
    assert statuses["The service number 1 moved to team 7."] == "active"
    assert statuses["The service number 1 is owned by team 1."] == "superseded"


def test_a_long_crawl_does_not_starve_conversation_extraction(admin_api, api, tenant, worker, wsite):
    _wiki(wsite, PAGES)
    # Every page takes a while: the crawl lasts ~13 s on one worker process, a margin the extraction (debounce
    # 1 s) keeps on a loaded machine too (at 0.4 s a page it once lost the race while a suite ran beside it).
    wsite.delay = 0.8
    TenantSettings.objects.filter(tenant=tenant).update(debounce_seconds=1)
    r = admin_api.post("knowledge/sources", {"kind": "site", "location": wsite.base + "/", "max_pages": 50})
    source_id = r.json()["id"]
    wait_for(lambda: KnowledgeSource.objects.get(pk=source_id).pages_done >= 2, 60, worker, "the crawl to start")

    r = api.post(
        "users/alice/messages",
        {
            "thread_id": "t",
            "messages": [{"role": "user", "content": "I moved to Lisbon last spring and I work as a pastry chef now."}],
        },
    )
    assert r.status_code == 202
    wait_for(lambda: ExtractionBatch.objects.filter(status="done").exists(), 60, worker, "the extraction")
    source = KnowledgeSource.objects.get(pk=source_id)
    # Extracted while the crawl still had pages to go: the interactive queue went first.
    assert source.state == "running" and source.pages_done < source.pages_total, (source.pages_done, source.pages_total)
    assert not Message.objects.filter(status="pending").exists()
    wait_for(lambda: _crawled(source_id), 120, worker, "the crawl to finish")
    assert KnowledgeSource.objects.get(pk=source_id).pages_done == PAGES + 1
