"""Health over real HTTP (Django's test client) on real Postgres: liveness, readiness, and how the
ages of the last sweep and of the worker heartbeat turn readiness on and off."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.models import Heartbeat
from memory_admin.services.heartbeats import SWEEP, WORKER, heartbeat_record, progress_name, progress_record

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_heartbeats_yet(db):
    """Each test starts from a database that never saw background work (rolled back afterwards)."""
    Heartbeat.objects.all().delete()


@pytest.fixture
def after_grace(settings):
    settings.HEALTH_STARTUP_GRACE_SECONDS = 0
    settings.HEALTH_STALE_SECONDS = 30


def age(name: str, seconds: float) -> None:
    Heartbeat.objects.filter(name=name).update(last_at=timezone.now() - timedelta(seconds=seconds))


@pytest.mark.parametrize("path", ["/api/v1/health", "/api/v1/health/ready"])
def test_fresh_sweep_and_worker_heartbeat_are_ready_with_their_ages(client, after_grace, path):
    heartbeat_record(SWEEP)
    heartbeat_record(WORKER, "sent by worker@a, run by worker@b")
    age(WORKER, 4)
    r = client.get(path)
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert body["background"]["sweep"]["status"] == "ok" and body["background"]["sweep"]["age_seconds"] < 2
    assert body["background"]["worker"]["status"] == "ok" and 4 <= body["background"]["worker"]["age_seconds"] < 6


@pytest.mark.parametrize("path", ["/api/v1/health", "/api/v1/health/ready"])
def test_a_stale_sweep_is_not_ready_and_says_why(client, after_grace, path):
    heartbeat_record(SWEEP)
    heartbeat_record(WORKER)
    age(SWEEP, 300)
    r = client.get(path)
    assert r.status_code == 503
    body = r.json()
    assert body["code"] == "background_stale" and body["status"] == "unavailable" and body["database"] == "ok"
    assert body["background"]["sweep"] == {"status": "stale", "age_seconds": pytest.approx(300, abs=2)}
    assert body["background"]["worker"]["status"] == "ok"
    assert len(body["reasons"]) == 1 and "no extraction sweep for 300 s" in body["reasons"][0]
    assert body["detail"] == body["reasons"][0]


def test_a_stale_worker_heartbeat_is_not_ready(client, after_grace):
    heartbeat_record(SWEEP)
    heartbeat_record(WORKER)
    age(WORKER, 45)
    body = client.get("/api/v1/health/ready").json()
    assert body["code"] == "background_stale"
    assert body["background"]["worker"]["status"] == "stale"
    assert ["no worker heartbeat" in reason for reason in body["reasons"]] == [True]


def test_before_the_first_sweep_the_answer_is_starting_not_a_failure(client, after_grace):
    """A database that never saw a sweep (a fresh install coming up) is `starting`, and ready."""
    r = client.get("/api/v1/health/ready")
    assert r.status_code == 200
    assert r.json()["status"] == "starting"
    assert r.json()["background"] == {
        "sweep": {"status": "starting", "age_seconds": None},
        "worker": {"status": "starting", "age_seconds": None},
    }


def test_old_heartbeats_right_after_a_restart_are_starting_until_the_grace_ends(client, settings):
    """The whole stack restarted after a day off: its rows are a day old, the first sweep is
    seconds away. Within HEALTH_STARTUP_GRACE_SECONDS of the web process start: starting."""
    heartbeat_record(SWEEP)
    heartbeat_record(WORKER)
    age(SWEEP, 86400)
    age(WORKER, 86400)
    settings.HEALTH_STALE_SECONDS = 30
    settings.HEALTH_STARTUP_GRACE_SECONDS = 10**9
    r = client.get("/api/v1/health/ready")
    assert r.status_code == 200 and r.json()["status"] == "starting"
    settings.HEALTH_STARTUP_GRACE_SECONDS = 0
    r = client.get("/api/v1/health/ready")
    assert r.status_code == 503 and len(r.json()["reasons"]) == 2


def test_liveness_answers_whatever_the_background_state(client, after_grace):
    heartbeat_record(SWEEP)
    age(SWEEP, 10_000)
    assert client.get("/api/v1/health/ready").status_code == 503
    r = client.get("/api/v1/health/live")
    assert r.status_code == 200 and r.json() == {"status": "alive"}


def test_a_heartbeat_is_one_row_overwritten(db):
    heartbeat_record(SWEEP, "first")
    heartbeat_record(SWEEP, "second")
    assert list(Heartbeat.objects.values_list("name", "detail")) == [(SWEEP, "second")]


def test_a_worker_finishing_tasks_is_ready_though_its_heartbeat_waits_in_a_queue(client, after_grace):
    """The heartbeat task sits behind a backlog, but the worker finished a task a second ago: alive."""
    heartbeat_record(SWEEP)
    heartbeat_record(WORKER)
    age(WORKER, 300)
    assert progress_record("worker-bulk@host", now=1000.0)
    age(progress_name("worker-bulk@host"), 1)
    r = client.get("/api/v1/health/ready")
    assert r.status_code == 200, r.json()
    assert r.json()["background"]["worker"]["status"] == "ok"
    assert 1 <= r.json()["background"]["worker"]["age_seconds"] < 3


def test_no_heartbeat_and_no_progress_is_not_ready(client, after_grace):
    heartbeat_record(SWEEP)
    heartbeat_record(WORKER)
    progress_record("worker@host", now=2000.0)
    age(WORKER, 300)
    age(progress_name("worker@host"), 200)
    r = client.get("/api/v1/health/ready")
    assert r.status_code == 503
    assert r.json()["background"]["worker"] == {"status": "stale", "age_seconds": pytest.approx(200, abs=2)}
    assert r.json()["reasons"] == [
        "no worker heartbeat and no task finished for 200 s (no worker is consuming tasks from the broker)"
    ]


def test_progress_is_written_at_most_once_a_second_per_process(db):
    name = progress_name("worker@throttled")

    def seconds_old() -> float:
        return (timezone.now() - Heartbeat.objects.get(name=name).last_at).total_seconds()

    assert progress_record("worker@throttled", now=5000.0) is True
    age(name, 30)
    assert progress_record("worker@throttled", now=5000.5) is False  # within the second: not written
    assert seconds_old() == pytest.approx(30, abs=2)
    assert progress_record("worker@throttled", now=5001.1) is True
    assert seconds_old() < 2
