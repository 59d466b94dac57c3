"""Start the whole product on embedded defaults: Postgres (pgserver), migrations, demo data,
the web server (gunicorn), a Celery worker, the beat scheduler and the MCP server. Ctrl-C or SIGTERM
stops all of them cleanly (in-flight requests and the running batch finish first).

`up` supervises its children (memory_admin/supervisor.py): one that exits (crash, OOM kill, a beat
giving up after an outage) or is wedged (web or MCP not answering, no worker heartbeat, no sweep
while the worker is fine, for `--wedged-after` seconds) is started again after a backoff that doubles
on each quick failure (1 s, 2 s, 4 s ... up to 60 s) and resets once the child has stayed up for a
minute. Each exit, wedge and restart is printed. To add a child, add an entry to `children()`.
"""

from __future__ import annotations

import os
import sys
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connection

from memory_admin.selectors.health import heartbeat_ages
from memory_admin.services.heartbeats import SWEEP, WORKER
from memory_admin.supervisor import Backoff, Child, LivenessProbe, Supervisor

__all__ = ["Child", "Command"]


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def local_url(bind: str, path: str) -> str | None:
    """The URL at which `up` reaches a child bound to `bind` (host:port); None for a unix socket."""
    if bind.startswith("unix:") or ":" not in bind:
        return None
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    if host in {"", "0.0.0.0", "::"}:  # noqa: S104 - reading the bind address, not binding
        host = "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}{path}"


class Heartbeats:
    """The background heartbeats as `up` sees them (ops_heartbeat, read at most once a second).

    Says nothing (None) while the database is unreachable and for `wedged_after` seconds after it
    came back: an outage is not a wedge. A child whose heartbeat has not been recorded since it
    started gets `start_grace` seconds to come up."""

    def __init__(self, wedged_after: float, start_grace: float):
        self.wedged_after, self.start_grace = wedged_after, max(start_grace, wedged_after)
        self.db_ok_since: float | None = None
        self.fresh_since: dict[str, float] = {}  # since when the worker heartbeat has stayed fresh
        self._ages: dict[str, float] | None = None
        self._read_at = float("-inf")

    def ages(self, now: float) -> dict[str, float] | None:
        if now - self._read_at < 1.0:
            return self._ages
        self._read_at = now
        try:
            connection.close_if_unusable_or_obsolete()
            self._ages = heartbeat_ages()
        except Exception:  # noqa: BLE001 - database down: /health/ready reports it, `up` waits
            connection.close()
            self._ages, self.db_ok_since = None, None
            self.fresh_since.clear()
            return None
        self.db_ok_since = now if self.db_ok_since is None else self.db_ok_since
        # Workers run tasks as long as their heartbeat misses at most two periods in a row.
        worker_age = self._ages.get(WORKER)
        if worker_age is None or worker_age > min(self.wedged_after, 3 * settings.WORKER_HEARTBEAT_SECONDS):
            self.fresh_since.pop(WORKER, None)
        else:
            self.fresh_since.setdefault(WORKER, now)
        return self._ages

    def stale(self, name: str, child: Child, now: float) -> str | None:
        """Why the `name` heartbeat says the child is wedged, or None."""
        ages = self.ages(now)
        if ages is None or now - self.db_ok_since < self.wedged_after:
            return None
        age, up_for = ages.get(name), now - child.started_at
        if age is not None and age < up_for:  # recorded since this child started: it came up
            return None if age <= self.wedged_after else f"no {name} heartbeat for {age:.0f} s"
        if up_for <= self.start_grace:
            return None
        return f"no {name} heartbeat in the {up_for:.0f} s since it started"

    def worker_probe(self, child: Child, now: float) -> str | None:
        return self.stale(WORKER, child, now)

    def beat_probe(self, child: Child, now: float) -> str | None:
        # No sweep while workers have been running tasks all along: beat is not scheduling.
        # Without a working worker, a missing sweep is not beat's fault.
        reason = self.stale(SWEEP, child, now)
        workers_fine = now - self.fresh_since.get(WORKER, now) >= self.wedged_after
        return reason if workers_fine else None


class Command(BaseCommand):
    help = "Run server, worker, scheduler and MCP server together (embedded Postgres unless DATABASE_URL is set)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--bind", default=os.environ.get("BIND", "127.0.0.1:8000"))
        parser.add_argument("--no-demo", action="store_true", help="skip seeding the demo tenant")
        parser.add_argument(
            "--restart-backoff",
            type=float,
            default=_env_float("UP_RESTART_BACKOFF_SECONDS", 1),
            help="seconds before restarting a child that exited (doubles on quick failures)",
        )
        parser.add_argument(
            "--restart-backoff-max", type=float, default=_env_float("UP_RESTART_BACKOFF_MAX_SECONDS", 60)
        )
        parser.add_argument(
            "--wedged-after",
            type=float,
            default=_env_float("UP_WEDGED_SECONDS", 120),
            help="restart a child whose liveness or heartbeat has been silent this long (0: never)",
        )
        parser.add_argument(
            "--start-grace",
            type=float,
            default=_env_float("UP_START_GRACE_SECONDS", 120),
            help="how long a (re)started child may take to first answer or beat before it is wedged",
        )
        parser.add_argument(
            "--stop-timeout",
            type=float,
            default=_env_float("UP_STOP_TIMEOUT_SECONDS", 60),
            help="on SIGTERM, how long children may finish in-flight work before SIGKILL",
        )

    @staticmethod
    def children(env: dict[str, str]) -> list[Child]:
        celery = [sys.executable, "-m", "celery", "-A", "memory_admin"]
        return [
            Child(
                "worker",
                celery + ["worker", "--loglevel=INFO", "--concurrency=1", "--pool=prefork", "--hostname=worker@%h"],
                env,
            ),
            Child(
                "beat",
                celery + ["beat", "--loglevel=INFO", f"--schedule={settings.CELERY_BEAT_SCHEDULE_FILENAME}"],
                env,
            ),
            Child("web", [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf"], env),
            Child("mcp", [sys.executable, str(settings.BASE_DIR / "manage.py"), "mcp", "--transport", "http"], env),
        ]

    @staticmethod
    def attach_probes(children: list[Child], env: dict[str, str], wedged_after: float, start_grace: float) -> None:
        """How each child is found wedged: web and MCP by answering HTTP, worker and beat by heartbeats."""
        if wedged_after <= 0:
            return
        heartbeats = Heartbeats(wedged_after, start_grace)
        urls = {
            "web": local_url(env["BIND"], "/api/v1/health/live"),
            "mcp": local_url(env.get("MCP_BIND", "127.0.0.1:8765"), "/mcp"),
        }
        for child in children:
            if urls.get(child.name):
                child.probe = LivenessProbe(urls[child.name], wedged_after, start_grace)
            elif child.name == "worker":
                child.probe = heartbeats.worker_probe
            elif child.name == "beat":
                child.probe = heartbeats.beat_probe

    def say(self, message: str) -> None:
        self.stdout.write(f"up: {message}")
        self.stdout.flush()

    def prepare(self, *, demo: bool) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        if settings.EMBEDDER in ("onnx", "static"):
            call_command("build_embedder")  # once, before the workers start; a no-op when the cache verifies
        if demo:
            call_command("seed_demo")

    def banner(self, bind: str) -> None:
        key_file = settings.DATA_DIR / "demo-api-key"
        self.stdout.write(
            self.style.SUCCESS(
                f"\nmemory-admin is starting on http://{bind}/\n"
                f"  dashboard logins: admin / operator / auditor / member, password demo-password\n"
                f"  agent API:        http://{bind}/api/v1/docs   (admin key in {key_file})\n"
                f"  health:           curl http://{bind}/api/v1/health   (liveness: /api/v1/health/live)\n"
            )
        )
        self.stdout.flush()

    def handle(
        self,
        *args: Any,
        bind: str,
        no_demo: bool,
        restart_backoff: float,
        restart_backoff_max: float,
        wedged_after: float,
        start_grace: float,
        stop_timeout: float,
        **options: Any,
    ) -> None:
        self.prepare(demo=not no_demo)
        env = {**os.environ, "BIND": bind, "DATABASE_URL": settings.DATABASE_URL}
        children = self.children(env)
        self.attach_probes(children, env, wedged_after, start_grace)
        supervisor = Supervisor(
            children,
            say=self.say,
            backoff=Backoff(restart_backoff, restart_backoff_max),
            stop_timeout=stop_timeout,
            check_every=min(5.0, max(1.0, wedged_after / 4)),
        )
        supervisor.start_all()
        self.banner(bind)
        code = supervisor.run()
        connection.close()
        sys.exit(code)
