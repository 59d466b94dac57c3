"""Start the whole product on embedded defaults: Postgres (pgserver), migrations, demo data,
the web server (gunicorn), two Celery workers, the beat scheduler and the MCP server. Ctrl-C or
SIGTERM stops all of them cleanly (in-flight requests and the running batch finish first), and then
the embedded Postgres if this `up` started it.

The two workers split WORKER_CONCURRENCY (default: the machine's cores) between them (`worker_lanes`):
`worker` consumes the `control` queue (heartbeats, sweeps) and `interactive` (batches, thread closes)
on threads, `worker-bulk` consumes `bulk` (entity drawing, re-embedding, imports), `interactive` and
Celery's default `celery` in processes. A backlog of bulk work therefore never holds up a sweep, a
heartbeat or a batch.

`up` supervises its children (memory_admin/supervisor.py): one that exits (crash, OOM kill, a beat
giving up after an outage) or is wedged for `--wedged-after` seconds is started again after a backoff
that doubles on each quick failure (1 s, 2 s, 4 s ... up to 60 s) and resets once the child has stayed
up for a minute. Wedged: web or MCP not answering; a worker that started or finished no task while a
queue it consumes had a message waiting that long (a worker making progress is never wedged, however
long its queue); no sweep while the workers are fine. Each exit, wedge and restart is printed.
To add a child, add an entry to `children()`.

Models are built and the demo seeded by a child process (`up --prepare-only`), so `up` itself holds
no embedding model while it supervises.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from memory_admin import config, embedded_db
from memory_admin.embedding import ENGINES
from memory_admin.selectors.health import heartbeat_ages, queue_backlogs, worker_age
from memory_admin.services.heartbeats import SWEEP, WORKER, progress_name
from memory_admin.supervisor import Backoff, Child, LivenessProbe, Supervisor

__all__ = ["Child", "Command"]


def _env_float(name: str, default: float) -> float:
    return config.get(name)


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


class _Prefixed:
    """A stream that prefixes each line written to it (what a step's own command prints)."""

    def __init__(self, out: Any, prefix: str):
        self.out, self.prefix = out, prefix

    def write(self, text: str) -> None:
        lines = text.rstrip("\n").splitlines()
        self.out.write("".join(f"{self.prefix}{line.strip()}\n" for line in lines if line.strip()), ending="")
        self.out.flush()

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return False


def _answers(url: str, stop: threading.Event, *, any_status: bool = False) -> bool:
    """Wait until `url` answers 200 (or, with `any_status`, answers at all); False when `stop` is set."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own child, http
                if response.status == 200 or any_status:
                    return True
        except urllib.error.HTTPError:
            if any_status:
                return True
        except OSError:
            pass
        stop.wait(0.5)
    return False


def _exit_on_signal(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


MCP_PORT_OFFSET = 765  # BIND 127.0.0.1:8000 -> MCP on 127.0.0.1:8765


def claim_data_dir(data: Path):
    """Hold `up.lock` in the data folder for as long as this `up` runs (the children do not inherit it),
    so that a second `up` on the same folder stops at once instead of fighting the first for its ports,
    its schedule file and its database. CommandError naming the running one's pid."""
    lock = open(data / "up.lock", "a+")  # noqa: SIM115 - held open until the process ends
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        pid = lock.read().strip() or "?"
        lock.close()
        raise CommandError(
            f"another `manage.py up` (pid {pid}) is running on the data folder {data}: stop it first (Ctrl-C or "
            "SIGTERM), or give this one its own MEMORY_ADMIN_DATA_DIR and --bind. Nothing was started."
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def refuse_taken_ports(binds: dict[str, str]) -> None:
    """CommandError when something already answers on an address `up` is about to listen on (another
    server on :8000 is a newcomer's most common clash): said before anything starts, not found out by a
    child that exits and is restarted in a loop."""
    for what, bind in binds.items():
        url = local_url(bind, "")
        if url is None:
            continue
        host, _, port = url.removeprefix("http://").rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
                pass
        except OSError:
            continue
        flag = "--bind HOST:PORT" if what == "web" else "MCP_BIND=HOST:PORT"
        raise CommandError(
            f"{bind} ({what}) is already in use by another program: stop it, or start on another address "
            f"with {flag}. Nothing was started."
        )


def mcp_bind(bind: str) -> str:
    """MCP_BIND when set; else the web server's host, 765 ports above its port (8000 -> 8765), so two
    instances with different BINDs never share the MCP server's port either."""
    configured = config.get("MCP_BIND")
    if configured:
        return configured
    host, _, port = bind.rpartition(":")
    if bind.startswith("unix:") or not port.isdigit():
        return "127.0.0.1:8765"
    return f"{host or '127.0.0.1'}:{int(port) + MCP_PORT_OFFSET}"


@dataclass(frozen=True)
class WorkerLane:
    """One Celery worker `up` runs: its child name, the queues it consumes, its pool and pool size."""

    name: str
    queues: tuple[str, ...]
    pool: str
    concurrency: int

    @property
    def nodename(self) -> str:
        return f"{self.name}@{socket.gethostname()}"


def worker_lanes(total: int) -> list[WorkerLane]:
    """Two workers. `worker` takes control and interactive work on threads in one process: a sweep or
    a heartbeat never waits for a free process behind a batch's slow LLM call, and no pool process
    costs another copy of the interpreter. `worker-bulk` takes bulk and interactive work on half the
    cores in processes (entity drawing is CPU work), so a backlog of bulk work never sits in front of
    a sweep, and interactive work has both workers."""
    processes = max(1, total // 2)
    return [
        # Threads wait on the LLM and on Postgres more than they compute; twice the cores left, at least
        # four, so that a sweep finds a free thread while batches run.
        WorkerLane("worker", ("control", "interactive"), "threads", max(4, 2 * (total - processes))),
        # One process runs its tasks itself (solo): a prefork parent would be one more interpreter
        # holding the model (~85 MB) to supervise a single child.
        # Also Celery's default queue: what a client that knows no routes sends (memory_admin/celery.py).
        WorkerLane("worker-bulk", ("bulk", "interactive", "celery"), "prefork" if processes > 1 else "solo", processes),
    ]


class Heartbeats:
    """The background's liveness as `up` sees it: ops_heartbeat (heartbeats, sweeps and each
    worker's progress) and the broker's queues, read at most once a second.

    Says nothing (None) while the database is unreachable and for `wedged_after` seconds after it
    came back: an outage is not a wedge. A child that has not been seen moving since it started gets
    `start_grace` seconds to come up."""

    def __init__(self, wedged_after: float, start_grace: float):
        self.wedged_after, self.start_grace = wedged_after, max(start_grace, wedged_after)
        self.db_ok_since: float | None = None
        self.fresh_since: dict[str, float] = {}  # since when the workers have stayed fresh
        self._ages: dict[str, float] | None = None
        self._waiting: dict[str, float] | None = None
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
            self._ages, self.db_ok_since, self._waiting = None, None, None
            self.fresh_since.clear()
            return None
        backlogs = queue_backlogs()
        self._waiting = None if backlogs is None else {q.name: q.oldest_age_seconds or 0.0 for q in backlogs}
        self.db_ok_since = now if self.db_ok_since is None else self.db_ok_since
        # Workers run tasks as long as they move (a heartbeat, a task started or finished) at least
        # every two heartbeat periods.
        age = worker_age(self._ages)
        if age is None or age > min(self.wedged_after, 3 * settings.WORKER_HEARTBEAT_SECONDS):
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

    def worker_probe(self, lane: WorkerLane) -> Callable[[Child, float], str | None]:
        """Wedged: the worker started or finished no task for `wedged_after` seconds while one of its
        queues had a message waiting longer than that. Busy on a backlog is alive; idle with empty
        queues is alive; only work waiting that nobody takes is a wedge."""

        def probe(child: Child, now: float) -> str | None:
            ages = self.ages(now)
            if ages is None or self._waiting is None or now - self.db_ok_since < self.wedged_after:
                return None  # the database or the broker cannot be read: cannot tell
            moved, up_for = ages.get(progress_name(lane.nodename)), now - child.started_at
            if moved is not None and moved < up_for:  # moved since this child started
                if moved <= self.wedged_after:
                    return None
                silent = f"for {moved:.0f} s"
            elif up_for <= self.start_grace:
                return None
            else:
                silent = f"in the {up_for:.0f} s since it started"
            queue, waited = max(((q, self._waiting.get(q, 0.0)) for q in lane.queues), key=lambda item: item[1])
            if waited <= self.wedged_after:
                return None
            return f"no task started or finished {silent} while queue {queue} has a message waiting for {waited:.0f} s"

        return probe

    def beat_probe(self, child: Child, now: float) -> str | None:
        # No sweep while workers have been running tasks all along and nothing waits in `control`
        # (where beat's sweeps go): beat is not scheduling. Without a working worker, or with sweeps
        # waiting (or expiring) in a backed-up control queue, a missing sweep is not beat's fault.
        reason = self.stale(SWEEP, child, now)
        workers_fine = now - self.fresh_since.get(WORKER, now) >= self.wedged_after
        control_waits = (self._waiting or {}).get("control", 0.0) > min(5.0, self.wedged_after / 2)
        return reason if workers_fine and not control_waits else None


class Command(BaseCommand):
    help = "Run server, workers, scheduler and MCP server together (embedded Postgres unless DATABASE_URL is set)."
    # The checks import every URL, view and API module (~40 MB `up` would keep for its whole life);
    # the preparing child runs them instead (`prepare`).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--bind", default=config.get("BIND"))
        parser.add_argument("--no-demo", action="store_true", help="skip seeding the demo tenant")
        parser.add_argument(
            "--prepare-only",
            action="store_true",
            help="migrate, collect static files, build the embedder and seed the demo, then exit "
            "(what `up` runs in a child before starting the rest)",
        )
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
            help="restart a child that has not answered or moved this long (0: never)",
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
    def children(env: dict[str, str], lanes: list[WorkerLane]) -> list[Child]:
        # --quiet: no banner and task list per worker (up says what started; the logs say the rest).
        celery = [sys.executable, "-m", "celery", "-A", "memory_admin", "--quiet"]
        workers = [
            Child(
                lane.name,
                celery
                + [
                    "worker",
                    "--loglevel=INFO",
                    f"--concurrency={lane.concurrency}",
                    f"--pool={lane.pool}",
                    f"--queues={','.join(lane.queues)}",
                    f"--hostname={lane.nodename}",
                ],
                env,
            )
            for lane in lanes
        ]
        return workers + [
            Child(
                "beat",
                celery + ["beat", "--loglevel=INFO", f"--schedule={settings.CELERY_BEAT_SCHEDULE_FILENAME}"],
                env,
            ),
            Child("web", [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf"], env),
            Child("mcp", [sys.executable, str(settings.BASE_DIR / "manage.py"), "mcp", "--transport", "http"], env),
        ]

    @staticmethod
    def attach_probes(
        children: list[Child], lanes: list[WorkerLane], env: dict[str, str], wedged_after: float, start_grace: float
    ) -> None:
        """How each child is found wedged: web and MCP by answering HTTP, workers by their progress
        against their queues, beat by its sweeps."""
        if wedged_after <= 0:
            return
        heartbeats = Heartbeats(wedged_after, start_grace)
        urls = {
            "web": local_url(env["BIND"], "/api/v1/health/live"),
            "mcp": local_url(env["MCP_BIND"], "/mcp"),
        }
        probes = {lane.name: heartbeats.worker_probe(lane) for lane in lanes} | {"beat": heartbeats.beat_probe}
        for child in children:
            if urls.get(child.name):
                child.probe = LivenessProbe(urls[child.name], wedged_after, start_grace)
            else:
                child.probe = probes.get(child.name)

    def say(self, message: str) -> None:
        self.stdout.write(f"up: {message}")
        self.stdout.flush()

    def prepare(self, *, demo: bool) -> None:
        """One `up: <step>: ...` line per step as it happens (what the steps' own commands print is
        prefixed the same way)."""
        call_command("check", stdout=_Prefixed(self.stdout, "up: checks: "))
        pending = self.pending_migrations()
        call_command("migrate", interactive=False, verbosity=0)
        self.say(f"migrations: {pending} applied" if pending else "migrations: up to date")
        call_command("collectstatic", interactive=False, verbosity=0)
        if settings.EMBEDDER == "onnx" or settings.EMBEDDER not in ENGINES:
            # Once, before the workers start; a no-op when the cache verifies. An engine that is gone
            # (EMBEDDER=static) stops here: build_embedder refuses it with what to do instead.
            call_command("build_embedder", stdout=_Prefixed(self.stdout, "up: embedding model: "))
        if demo:
            call_command("seed_demo", stdout=_Prefixed(self.stdout, "up: demo: "))

    @staticmethod
    def pending_migrations() -> int:
        from django.db.migrations.executor import MigrationExecutor

        executor = MigrationExecutor(connection)
        return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))

    def say_database(self) -> None:
        if config.get("DATABASE_URL"):
            where = connection.settings_dict
            self.say(f"database: Postgres at {where.get('HOST') or 'local socket'} (DATABASE_URL)")
            return
        pgdata = embedded_db.data_dir(settings.BASE_DIR) / "pgdata"
        version = (pgdata / "PG_VERSION").read_text().strip() if (pgdata / "PG_VERSION").exists() else "?"
        state = "started" if pgdata in embedded_db._started_here else "already running"
        self.say(f"database: embedded Postgres {version} at {pgdata} ({state})")

    def prepare_in_child(self, env: dict[str, str], *, demo: bool) -> None:
        """`prepare` in a process of its own: building the embedder and seeding the demo load the
        model (~150 MB), which `up` must not keep for the rest of its life."""
        argv = [sys.executable, str(settings.BASE_DIR / "manage.py"), "up", "--prepare-only"]
        subprocess.run(argv + ([] if demo else ["--no-demo"]), env=env, check=True)

    def say_urls_when_up(self, env: dict[str, str], stop: threading.Event, *, demo: bool) -> None:
        """Each role's URL, once it answers (or once it is started, for a unix socket)."""
        bind = env["BIND"]
        health = local_url(bind, "/api/v1/health/live")
        mcp = local_url(env["MCP_BIND"], "/mcp")
        root = local_url(bind, "") or bind
        if health is None or _answers(health, stop):
            logins = " (dashboard logins admin / operator / auditor / member, password demo-password)"
            self.say(f"web: {root}/{logins if demo else ''}")
            key = f" (admin key in {settings.DATA_DIR / 'demo-api-key'})"
            self.say(f"API docs: {root}/api/v1/docs{key if demo else ''}")
            self.say(f"health: {root}/api/v1/health (liveness: /api/v1/health/live)")
        if mcp is None or _answers(mcp, stop, any_status=True):
            self.say(f"MCP: {mcp or env['MCP_BIND']}")
        if not stop.is_set():
            self.say("ready (Ctrl-C or SIGTERM stops everything)")

    def handle(
        self,
        *args: Any,
        bind: str,
        no_demo: bool,
        prepare_only: bool,
        restart_backoff: float,
        restart_backoff_max: float,
        wedged_after: float,
        start_grace: float,
        stop_timeout: float,
        **options: Any,
    ) -> None:
        if prepare_only:
            self.prepare(demo=not no_demo)
            return
        env = {
            # ONNX Runtime's telemetry keeps a SQLite file per user (~/.cache/Microsoft/DeveloperTools/
            # .onnxruntime/onnxruntime.db) that every process on the host using it opens: off.
            "ORT_DISABLE_TELEMETRY": "1",
            # Celery runs Django's system checks in each worker and in beat, which imports every URL, view
            # and API module (~23 MB a process, for good); the preparing child has just run them.
            "CELERY_SKIP_CHECKS": "1",
            # glibc gives each thread that allocates an arena of its own (up to 8 per core), which a
            # threaded web worker, the threads worker and MCP each fill and keep; two per process.
            "MALLOC_ARENA_MAX": "2",
            # The MCP server loads the embedding model and the token counter on its first call that
            # needs them, not at start (memory_admin/management/commands/mcp.py).
            "MCP_WARM_UP": "0",
            **os.environ,
            # Celery warns each worker at length when it runs as root (a container's default user);
            # `up` says it once instead (`handle`).
            "PYTHONWARNINGS": ",".join(
                filter(None, [os.environ.get("PYTHONWARNINGS"), "ignore:You're running the worker with superuser"])
            ),
            "BIND": bind,
            "MCP_BIND": mcp_bind(bind),
            "DATABASE_URL": settings.DATABASE_URL,
        }
        code = 1
        # Until the supervisor takes the signals over: a SIGTERM during the preparation still ends in
        # the `finally` below (the child preparing is killed by subprocess.run on the way out).
        signal.signal(signal.SIGTERM, _exit_on_signal)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            self.say("note: running as root; a dedicated user is safer outside a container")
        try:
            lock = claim_data_dir(embedded_db.data_dir(Path(settings.BASE_DIR)))
            try:
                refuse_taken_ports({"web": bind, "MCP": env["MCP_BIND"]})
            except CommandError:
                lock.close()
                raise
        except CommandError:
            connection.close()
            embedded_db.stop_if_started_here()  # the settings started it for this `up`: stopped again
            raise
        try:
            self.say_database()
            self.prepare_in_child(env, demo=not no_demo)
            lanes = worker_lanes(settings.WORKER_CONCURRENCY)
            children = self.children(env, lanes)
            self.attach_probes(children, lanes, env, wedged_after, start_grace)
            supervisor = Supervisor(
                children,
                say=self.say,
                backoff=Backoff(restart_backoff, restart_backoff_max),
                stop_timeout=stop_timeout,
                check_every=min(5.0, max(1.0, wedged_after / 4)),
            )
            supervisor.start_all()
            urls_said = threading.Event()
            threading.Thread(
                target=self.say_urls_when_up, args=(env, urls_said), kwargs={"demo": not no_demo}, daemon=True
            ).start()
            try:
                code = supervisor.run()
            finally:
                urls_said.set()
        finally:
            connection.close()
            if embedded_db.stop_if_started_here():
                self.say("embedded Postgres stopped")
            lock.close()
        sys.exit(code)
