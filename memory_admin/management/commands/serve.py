"""`manage.py serve ROLE`: run one role of the product in the foreground, for a container or a process
manager (systemd, compose, Kubernetes) that supervises it: `web`, `worker`, `worker-bulk`, `beat`, `mcp`,
or `migrate`.

The roles' command lines are `up`'s own (Command.children in up.py): a role runs here exactly as it runs
under `up`, only without `up`'s embedded Postgres, demo and supervisor. `migrate` applies migrations,
collects static files and builds the embedding model, then exits: run it once before the other roles
(compose does, as a one-shot service they depend on)."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from memory_admin.embedding import ENGINES
from memory_admin.management.commands.up import Command as Up
from memory_admin.management.commands.up import worker_lanes
from memory_admin.supervisor import Child

PREPARE = "migrate"


def roles(env: dict[str, str]) -> list[Child]:
    """`up`'s children, with the workers `up` would split WORKER_CONCURRENCY into."""
    return Up.children(env, worker_lanes(settings.WORKER_CONCURRENCY))


def role_names() -> list[str]:
    """Every role `serve` runs: `up`'s children, then the one-shot preparation."""
    return [child.name for child in roles(dict(os.environ))] + [PREPARE]


class Command(BaseCommand):
    help = "Run one role (web, worker, beat, mcp) in the foreground, or `migrate` once before them."

    def add_arguments(self, parser) -> None:
        parser.add_argument("role", help="one of: " + ", ".join(role_names()))

    def handle(self, *args: Any, role: str, **options: Any) -> None:
        if role == PREPARE:
            call_command("migrate", interactive=False, verbosity=1)
            call_command("collectstatic", interactive=False, verbosity=0)
            if settings.EMBEDDER == "onnx" or settings.EMBEDDER not in ENGINES:  # static: refused, as by `up`
                call_command("build_embedder")
            return
        env = {**os.environ, "DATABASE_URL": settings.DATABASE_URL}
        env.setdefault("BIND", "127.0.0.1:8000")
        children = {child.name: child for child in roles(env)}
        if role not in children:
            raise CommandError(f"Unknown role {role!r}: serve runs one of {', '.join(role_names())}.")
        argv = children[role].argv
        sys.stdout.flush()
        # The role replaces this process (no shell): signals from the container runtime reach it directly.
        os.execvpe(argv[0], argv, children[role].env)  # noqa: S606
