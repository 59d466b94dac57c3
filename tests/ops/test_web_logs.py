"""The web server's log lines per request, from a real gunicorn started with the product's settings
(`gunicorn -c python:memory_admin.gunicorn_conf`, JSON logs).

gunicorn's own access line is written only when ACCESS_LOG asks for it (setting `logconfig_dict` used to
turn it on for every request at every LOG_LEVEL); the application's request line (LOG_LEVEL=INFO) names
each request with its request id either way."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_and_log(tmp_path: Path, **env: str) -> list[dict]:
    """Start gunicorn, send two requests (one search with a query), stop it; every JSON line it wrote."""
    port = _free_port()
    db = connection.settings_dict
    out = open(tmp_path / "web.log", "wb")  # noqa: SIM115 - lives as long as the process
    environ = {
        **os.environ,
        "BIND": f"127.0.0.1:{port}",
        "WEB_WORKERS": "1",
        "WEB_THREADS": "2",
        "LOG_LEVEL": "INFO",
        "LOG_FORMAT": "json",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(ROOT),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "DATABASE_URL": f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}",
        **env,
    }
    if "ACCESS_LOG" not in env:
        environ.pop("ACCESS_LOG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf"],
        env=environ,
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "web.log").read_text()
            try:
                # A first answer can take seconds on a loaded machine (the worker warms up): waited for, not
                # retried, or the retried request would write a second access line.
                live = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/health/live",
                    headers={"X-Request-ID": "probe-req-0001"},
                    timeout=60,
                )
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert live.status_code == 200
        assert live.headers["X-Request-ID"] == "probe-req-0001"
        # no key: 401, and the query must not reach any log line
        unauthorised = httpx.get(f"http://127.0.0.1:{port}/api/v1/users/u1/search", params={"q": "lapsang tea"})
        assert unauthorised.status_code == 401
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    text = (tmp_path / "web.log").read_text()
    assert "lapsang" not in text
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_no_access_line_by_default_the_request_line_carries_the_id(tmp_path):
    lines = _serve_and_log(tmp_path)
    assert not [line for line in lines if line["logger"] == "gunicorn.access"]
    requests = [line for line in lines if line["logger"] == "memory_admin.request"]
    assert [(line["request_id"], line["status"]) for line in requests][:1] == [("probe-req-0001", 200)]
    assert [line["status"] for line in requests] == [200, 401]
    assert any(line["logger"] == "gunicorn.error" for line in lines)  # gunicorn's own lines stay JSON


def test_access_log_asked_for(tmp_path):
    lines = _serve_and_log(tmp_path, ACCESS_LOG="-")
    access = [line for line in lines if line["logger"] == "gunicorn.access"]
    assert len(access) == 2
    assert "/api/v1/users/*/search" in access[1]["message"]  # the path masked, the query dropped


def test_a_web_worker_loads_the_brokers_transport_before_its_first_request():
    """gunicorn's post_worker_init warms what a first write would otherwise load during its request: the
    embedding model, the tokenizer, and the broker's transport (extraction/broker.py on the embedded
    defaults, which its entity drawing is sent through), without connecting to the broker."""
    code = (
        "import sys, django; django.setup()\n"
        "before = 'extraction.broker' in sys.modules\n"
        "from memory_admin import gunicorn_conf\n"
        "gunicorn_conf.post_worker_init(None)\n"
        "print(before, 'extraction.broker' in sys.modules)\n"
    )
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "memory_admin.settings"}
    environ.pop("CELERY_BROKER_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=environ, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"], out.stdout
