"""Start the whole product on embedded defaults: Postgres (pgserver), migrations, demo data,
the web server (gunicorn), a Celery worker and the beat scheduler. Ctrl-C stops all of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run server, worker and scheduler together (embedded Postgres unless DATABASE_URL is set)."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default=os.environ.get("BIND", "127.0.0.1:8000"))
        parser.add_argument("--no-demo", action="store_true", help="skip seeding the demo tenant")

    def handle(self, *args, bind: str, no_demo: bool, **options):
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        if settings.EMBEDDER == "onnx":
            call_command("build_embedder")  # once, before the workers start; a no-op when the cache verifies
        if not no_demo:
            call_command("seed_demo")
        env = {**os.environ, "BIND": bind, "DATABASE_URL": settings.DATABASE_URL}
        celery = [sys.executable, "-m", "celery", "-A", "memory_admin"]
        children = [
            subprocess.Popen(celery + ["worker", "--loglevel=INFO", "--concurrency=1", "--pool=prefork",
                                       "--hostname=worker@%h"], env=env),
            subprocess.Popen(celery + ["beat", "--loglevel=INFO",
                                       f"--schedule={settings.CELERY_BEAT_SCHEDULE_FILENAME}"], env=env),
            subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf"], env=env),
        ]
        key_file = settings.DATA_DIR / "demo-api-key"
        self.stdout.write(self.style.SUCCESS(
            f"\nmemory-admin is starting on http://{bind}/\n"
            f"  dashboard logins: admin / operator / auditor / member, password demo-password\n"
            f"  agent API:        http://{bind}/api/v1/docs   (admin key in {key_file})\n"
            f"  health:           curl http://{bind}/api/v1/health\n"
        ))

        def stop(*_):
            for child in children:
                if child.poll() is None:
                    child.terminate()
            deadline = time.monotonic() + 15
            for child in children:
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
            sys.exit(0)

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while True:
            for child in children:
                if child.poll() is not None:
                    self.stderr.write(f"{child.args[2:4]} exited with {child.returncode}; stopping everything")
                    stop()
            time.sleep(1)
