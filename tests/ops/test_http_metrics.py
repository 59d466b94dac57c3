"""HTTP RED metrics per route template and process series: scraped after real requests, in one process
(Django's test client) and across gunicorn's workers (`manage.py serve web`, two workers)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.test import Client
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.parser import text_string_to_metric_families

from memory_admin.models import MemoryUser
from memory_admin.services.keys import api_key_create
from memory_admin.services.tenants import tenant_create
from tests.integrations.conftest import server_env
from tests.ops.cluster import embedder_cache, free_port
from tests.ops.test_metrics import sample, scrape

ROOT = Path(__file__).resolve().parents[2]
FACTS_ROUTE = "api/v1/users/<user_id>/facts"


def families(text: str) -> dict[str, list]:
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


@pytest.mark.django_db
def test_requests_are_counted_and_timed_by_route_template_and_status_class(api, tenant):
    for name in ("alice", "bob"):
        MemoryUser.objects.create(tenant=tenant, external_id=name)
    before = scrape()
    assert api.get("users/alice/facts").status_code == 200
    assert api.get("users/bob/facts").status_code == 200
    assert Client().get("/api/v1/users/alice/facts").status_code == 401
    assert Client().get("/no/such/page").status_code == 404
    after = scrape()

    def grew(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("memory_admin_http_requests_total", route=FACTS_ROUTE, method="GET", status="2xx") == 2
    assert grew("memory_admin_http_requests_total", route=FACTS_ROUTE, method="GET", status="4xx") == 1
    assert grew("memory_admin_http_requests_total", route="unmatched", method="GET", status="4xx") == 1
    assert grew("memory_admin_http_request_seconds_count", route=FACTS_ROUTE, method="GET") == 3
    assert grew("memory_admin_http_request_seconds_bucket", route=FACTS_ROUTE, method="GET", le="+Inf") == 3
    # No identifier an agent sent becomes a label.
    assert "alice" not in after and "bob" not in after
    rss = [
        s for s in families(after)["memory_admin_process_resident_memory_bytes"] if s.labels["pid"] == str(os.getpid())
    ]
    assert rss and rss[0].value > 10 * 2**20


@pytest.mark.slow
def test_two_gunicorn_workers_add_up_in_one_scrape(tmp_path):
    bind = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MEMORY_ADMIN_DATA_DIR": str(tmp_path),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "EMBEDDER_CACHE_DIR": embedder_cache(),
        "BIND": bind,
        "WEB_WORKERS": "2",
        "WEB_THREADS": "1",
    }
    env.pop("TEST_DB_NAME", None)
    web = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "web"], cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://{bind}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(base + "/api/v1/health/live", timeout=5).close()
                break
            except OSError:
                time.sleep(0.5)
        for _ in range(40):
            urllib.request.urlopen(base + "/api/v1/health/live", timeout=5).close()
            try:
                urllib.request.urlopen(base + "/api/v1/no-such-route", timeout=5)
            except urllib.error.HTTPError as missing:
                assert missing.code == 404
        text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(timeout=60)
    live = sample(text, "memory_admin_http_requests_total", route="api/v1/health/live", method="GET", status="2xx")
    assert live >= 41  # the 40 and at least one wait-loop probe, whichever worker answered each
    workers = {s.labels["pid"] for s in families(text)["memory_admin_process_resident_memory_bytes"]}
    assert len(workers) == 2, workers


def process_series(directory: Path) -> dict[str, str]:
    """role by pid of the process series a scrape of `directory` would carry."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    samples = families(generate_latest(registry).decode()).get("memory_admin_process_resident_memory_bytes", [])
    return {s.labels["pid"]: s.labels["role"] for s in samples}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_mcp_server_reports_its_process_while_it_runs_and_takes_it_away_when_it_exits(tmp_path):
    tenant = tenant_create(slug="mcp-process")
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="agent")
    env = server_env(MEMORY_ADMIN_API_KEY=key, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    server = StdioServerParameters(
        command=sys.executable, args=["manage.py", "mcp", "--transport", "stdio"], env=env, cwd=str(ROOT)
    )

    async def one_call() -> dict[str, str]:
        async with McpClient(server) as mem:
            assert not (await mem.call_tool("list_skills", {})).is_error
            return process_series(tmp_path)

    during = asyncio.run(one_call())
    assert list(during.values()) == ["mcp"], during
    deadline = time.monotonic() + 30
    while process_series(tmp_path) and time.monotonic() < deadline:  # the server exits once stdin closes
        time.sleep(0.2)
    assert process_series(tmp_path) == {}
