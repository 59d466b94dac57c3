"""A backlog you can see: messages waiting in the broker's queues (the embedded broker, on this run's
test database) show in readiness (`degraded`, still 200), in /metrics and on the dashboard's batches
page; a backlog is never a 503 while the workers move."""

from __future__ import annotations

import re
import time

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from memory_admin.celery import app
from memory_admin.models import Heartbeat
from memory_admin.services.heartbeats import SWEEP, WORKER, heartbeat_record
from memory_admin.services.staff import staff_create
from memory_admin.services.tenants import tenant_create


def send(url: str, queue: str, n: int) -> None:
    with app.connection_for_write(url) as conn:
        for _ in range(n):
            app.send_task("extraction.sweep", queue=queue, connection=conn)


@pytest.fixture
def broker(settings, transactional_db):
    """The embedded broker on this run's test database, its queue table emptied; fresh heartbeats."""
    db = connection.settings_dict
    url = f"pg+postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}"
    if db["PORT"] or not db["HOST"].startswith("/"):
        url = f"pg+postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    settings.CELERY_BROKER_URL = url
    settings.HEALTH_STARTUP_GRACE_SECONDS = 0
    settings.HEALTH_STALE_SECONDS = 30
    settings.HEALTH_BACKLOG_SECONDS = 0.5
    with app.connection_for_write(url) as conn:
        conn.connect()  # creates the table
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM broker_message")
    Heartbeat.objects.all().delete()
    heartbeat_record(SWEEP)
    heartbeat_record(WORKER)
    yield url
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM broker_message")


def test_no_backlog_is_ok_with_the_queues_shown(client, broker):
    body = client.get("/api/v1/health/ready").json()
    assert body["status"] == "ok" and body["reasons"] == []
    assert body["queues"] == {q: {"depth": 0, "oldest_age_seconds": None} for q in ("bulk", "control", "interactive")}


def test_a_backlog_older_than_the_limit_is_degraded_not_unavailable(client, broker):
    send(broker, "bulk", 3)
    time.sleep(1.0)
    send(broker, "interactive", 1)  # young: not behind
    r = client.get("/api/v1/health/ready")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "degraded"
    assert body["queues"]["bulk"]["depth"] == 3 and body["queues"]["bulk"]["oldest_age_seconds"] >= 1.0
    assert body["queues"]["interactive"]["depth"] == 1
    assert len(body["reasons"]) == 1 and re.fullmatch(
        r"queue bulk: 3 waiting, the oldest for \d+ s", body["reasons"][0]
    )
    assert body["background"]["worker"]["status"] == "ok"


def test_a_backlog_with_workers_that_do_not_move_is_unavailable(client, broker):
    send(broker, "bulk", 2)
    Heartbeat.objects.filter(name=WORKER).update(last_at=Heartbeat.objects.get(name=WORKER).last_at.replace(year=2000))
    r = client.get("/api/v1/health/ready")
    assert r.status_code == 503 and r.json()["code"] == "background_stale"


def test_metrics_give_each_queue_its_depth_and_oldest_age(client, broker):
    send(broker, "control", 2)
    time.sleep(0.6)
    text = client.get("/metrics").content.decode()
    depth = dict(re.findall(r'^memory_admin_queue_depth\{queue="(\w+)"\} ([\d.]+)$', text, re.M))
    oldest = dict(re.findall(r'^memory_admin_queue_oldest_seconds\{queue="(\w+)"\} ([\d.]+)$', text, re.M))
    assert {q: float(n) for q, n in depth.items()} == {"bulk": 0.0, "control": 2.0, "interactive": 0.0}
    assert float(oldest["control"]) >= 0.6 and float(oldest["bulk"]) == 0.0


def test_the_batches_page_shows_what_waits_in_each_queue(broker):
    tenant = tenant_create(slug="backlog")
    membership, _ = staff_create(tenant_slug=tenant.slug, username="ops-1", role="operator", password="x" * 16)
    page = Client()
    page.force_login(membership.user)
    send(broker, "bulk", 4)
    time.sleep(1.0)
    html = page.get(reverse("batches", args=[tenant.slug])).content.decode()
    section = html[html.index('id="queues"') : html.index("</section>", html.index('id="queues"'))]
    rows = re.findall(r"<tr[^>]*><td>(\w+)</td><td class=\"num\">(\d+)</td><td class=\"num\">([^<]*)", section)
    assert [(name, depth) for name, depth, _ in rows] == [("bulk", "4"), ("control", "0"), ("interactive", "0")]
    assert re.fullmatch(r"\d+ s ", rows[0][2]) and rows[1][2] == "—"
    # Older than HEALTH_BACKLOG_SECONDS: the bulk row, and only it, is flagged for the person reading.
    flagged = re.findall(r"<tr[^>]*><td>(\w+)</td>(?:(?!</tr>).)*>behind</span></td></tr>", section)
    assert flagged == ["bulk"]
