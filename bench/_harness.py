"""Shared plumbing of the benchmarks: a database of their own, a real server process, keys, HTTP.

Benchmarks never touch the development database: each one gets its own database on the embedded
Postgres (or on the server of DATABASE_URL), migrated from scratch, and a gunicorn on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable


def database_url(name: str, *, fresh: bool) -> str:
    """The URL of database `name` on the same server as the project's own database."""
    base = os.environ.get("DATABASE_URL")
    if base:
        parsed = urllib.parse.urlparse(base)
        url = urllib.parse.urlunparse(parsed._replace(path="/" + name))
        admin = urllib.parse.urlunparse(parsed._replace(path="/postgres"))
    else:
        sys.path.insert(0, str(ROOT))
        from memory_admin.embedded_db import embedded_server

        server = embedded_server(ROOT)
        url, admin = server.get_uri(name), server.get_uri("postgres")
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and fresh:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = None
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    return url


def django_env(url: str, **extra: str) -> dict[str, str]:
    # Benchmarks drive one key far past the production rate limit; the counting itself stays on.
    return {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "memory_admin.settings",
        "API_RATE_LIMIT": os.environ.get("API_RATE_LIMIT", "1000000000"),
        **extra,
    }


def migrate(url: str) -> None:
    subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=django_env(url), check=True)


def setup_django(url: str) -> None:
    os.environ.update(django_env(url))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """gunicorn (gthread) on loopback, started and stopped by the benchmark itself."""

    def __init__(self, url: str, *, workers: int = 2, threads: int = 8, cwd: Path = ROOT, **env: str):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "gunicorn",
                # The product's configuration (`manage.py up`), so its hooks run here as there: above all
                # post_worker_init, which loads the model and the broker's transport before a worker's first
                # request (without it, write_profile.py's batch phase charged the transport's one-time import,
                # ~17 % of its Python samples, to the write path).
                "-c",
                "python:memory_admin.gunicorn_conf",
                "memory_admin.wsgi:application",
                "-b",
                f"127.0.0.1:{self.port}",
                "-k",
                "gthread",
                "--workers",
                str(workers),
                "--threads",
                str(threads),
                "--timeout",
                "120",
                "--log-level",
                "warning",
            ],
            cwd=cwd,
            env=django_env(url, **env),
            start_new_session=True,
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                status, _, _ = Client(self.port).request("GET", "/api/v1/health")
                if status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited at start")
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("the server did not answer /health within 120 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class Client:
    """A keep-alive HTTP/1.1 client for one thread."""

    def __init__(self, port: int, key: str | None = None):
        self.port, self.key = port, key
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def request(self, method: str, path: str, body=None, params: dict | None = None):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = json.dumps(body) if body is not None else None
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else None), dict(resp.getheaders())
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                if attempt:
                    raise
        raise AssertionError("unreachable")


_local = threading.local()


def thread_client(port: int, key: str) -> Client:
    client = getattr(_local, "client", None)
    if client is None or client.key != key:
        client = _local.client = Client(port, key)
    return client


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def server_timing(headers: dict[str, str]) -> dict[str, float]:
    out = {}
    for part in headers.get("Server-Timing", "").split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name and dur:
            out[name] = float(dur)
    return out
