"""Start the whole product on embedded defaults: Postgres (pgserver), migrations, demo data,
the web server (gunicorn), a Celery worker and the beat scheduler. Ctrl-C stops all of them.

`up` supervises its children: one that exits (crash, OOM kill, a beat giving up after an outage)
is started again after a backoff that doubles on each quick failure (1 s, 2 s, 4 s ... up to 60 s)
and resets once the child has stayed up for a minute. Each exit and restart is printed.
To add a child, add an entry to `children()`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

STABLE_SECONDS = 60.0  # a child that ran this long had no quick failure: its backoff starts over


@dataclass
class Child:
    """One supervised process. Started in its own session, so stopping it stops its whole process
    group (the worker's pool processes too) and Ctrl-C reaches only `up`, which stops everyone."""

    name: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restart_at: float | None = None  # set while waiting out the backoff
    quick_failures: int = 0
    restarts: int = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True)
        self.started_at = time.monotonic()
        self.restart_at = None

    def signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class Command(BaseCommand):
    help = "Run server, worker and scheduler together (embedded Postgres unless DATABASE_URL is set)."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default=os.environ.get("BIND", "127.0.0.1:8000"))
        parser.add_argument("--no-demo", action="store_true", help="skip seeding the demo tenant")
        parser.add_argument("--restart-backoff", type=float,
                            default=float(os.environ.get("UP_RESTART_BACKOFF_SECONDS", "1")),
                            help="seconds before restarting a child that exited (doubles on quick failures)")
        parser.add_argument("--restart-backoff-max", type=float,
                            default=float(os.environ.get("UP_RESTART_BACKOFF_MAX_SECONDS", "60")))

    @staticmethod
    def children(env: dict[str, str]) -> list[Child]:
        celery = [sys.executable, "-m", "celery", "-A", "memory_admin"]
        return [
            Child("worker", celery + ["worker", "--loglevel=INFO", "--concurrency=1", "--pool=prefork",
                                      "--hostname=worker@%h"], env),
            Child("beat", celery + ["beat", "--loglevel=INFO",
                                    f"--schedule={settings.CELERY_BEAT_SCHEDULE_FILENAME}"], env),
            Child("web", [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf"], env),
            Child("mcp", [sys.executable, str(settings.BASE_DIR / "manage.py"), "mcp", "--transport", "http"], env),
        ]

    def say(self, message: str) -> None:
        self.stdout.write(f"up: {message}")
        self.stdout.flush()

    def handle(self, *args, bind: str, no_demo: bool, restart_backoff: float, restart_backoff_max: float,
               **options):
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        if not no_demo:
            call_command("seed_demo")
        env = {**os.environ, "BIND": bind, "DATABASE_URL": settings.DATABASE_URL}
        children = self.children(env)
        for child in children:
            child.start()
            self.say(f"{child.name} started (pid {child.proc.pid})")
        key_file = settings.DATA_DIR / "demo-api-key"
        self.stdout.write(self.style.SUCCESS(
            f"\nmemory-admin is starting on http://{bind}/\n"
            f"  dashboard logins: admin / operator / auditor / member, password demo-password\n"
            f"  agent API:        http://{bind}/api/v1/docs   (admin key in {key_file})\n"
            f"  health:           curl http://{bind}/api/v1/health   (liveness: /api/v1/health/live)\n"
        ))
        self.stdout.flush()

        def stop(*_):
            for child in children:
                if child.proc is not None and child.proc.poll() is None:
                    child.signal_group(signal.SIGTERM)
            deadline = time.monotonic() + 15
            for child in children:
                if child.proc is None:
                    continue
                try:
                    child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.signal_group(signal.SIGKILL)
            self.say("stopped")
            sys.exit(0)

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while True:
            now = time.monotonic()
            for child in children:
                if child.restart_at is not None:
                    if now >= child.restart_at:
                        child.start()
                        child.restarts += 1
                        self.say(f"{child.name} restarted (pid {child.proc.pid}, restart #{child.restarts})")
                    continue
                code = child.proc.poll()
                if code is None:
                    continue
                # Whatever the child left behind in its group (pool processes of a killed worker) goes too.
                child.signal_group(signal.SIGKILL)
                ran = now - child.started_at
                child.quick_failures = 0 if ran >= STABLE_SECONDS else child.quick_failures + 1
                delay = min(restart_backoff * 2 ** max(0, child.quick_failures - 1), restart_backoff_max)
                child.restart_at = now + delay
                how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
                self.say(f"{child.name} {how} after {ran:.0f} s; restarting in {delay:.0f} s")
            time.sleep(0.5)
