"""Multi-host rehearsal on one machine: web x 2, worker x 2, beat x 1 against one Postgres over TCP and one
Redis, behind a round-robin proxy, under a steady client load; one web and one worker are SIGKILLed mid-run.

    python bench/multihost.py                    # 12 s before the kills, 15 s after
    python bench/multihost.py --clients 6 --before 20 --after 20

Every process is the one a deployment runs (gunicorn with the product's config, `celery worker`,
`celery beat`), started with the environment docs/deployment.md gives, each in its own session so a
SIGKILL to its group is a host dying. The proxy (asyncio, in this process) hands each new TCP connection
to the next backend in turn; a backend that refuses a connection is skipped for a second and the
connection goes to the next one, the way a load balancer's passive health check does. Clients (threads,
one connection per request) write facts, search and post messages for extraction; a request that fails
(connection reset, no answer, 5xx) is retried through the proxy, which sends it to a live backend.

Prints requests/s and failed attempts before, during (the 5 s after the kills) and after, per-process
memory (RSS and PSS) and Postgres connections, then the losses: acknowledged fact writes missing from
Postgres and acknowledged messages never extracted (both must be 0). tests/ops/test_multihost.py runs
the same rehearsal and asserts on it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.ops.cluster import (  # noqa: E402
    CELERY,
    Processes,
    TcpPostgres,
    embedder_cache,
    free_port,
    manage,
    wait_until,
)

DURING_SECONDS = 5.0  # "during the kills": this long after them
DEBOUNCE_SECONDS = 1


# --- the proxy ---------------------------------------------------------------------------------------


class RoundRobinProxy:
    """A TCP proxy on 127.0.0.1:<port>: each accepted connection goes to the next backend in turn; a
    backend whose connect fails is marked down for `down_seconds` and the next one is tried."""

    def __init__(self, backends: list[tuple[str, int]], down_seconds: float = 1.0):
        self.backends = backends
        self.down_seconds = down_seconds
        self.down_until: dict[tuple[str, int], float] = {}
        self.connections: dict[tuple[str, int], int] = dict.fromkeys(backends, 0)
        self.refused = 0
        self._turn = itertools.cycle(range(len(backends)))
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="proxy")

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        # One turn per connection, then the others in order (concurrent connections share the turn).
        first = next(self._turn)
        for step in range(len(self.backends)):
            backend = self.backends[(first + step) % len(self.backends)]
            if self.down_until.get(backend, 0) > time.monotonic():
                continue
            try:
                upstream = await asyncio.wait_for(asyncio.open_connection(*backend), 2)
            except (OSError, TimeoutError):
                self.refused += 1
                self.down_until[backend] = time.monotonic() + self.down_seconds
                continue
            self.connections[backend] += 1
            return upstream
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._connect()
        if upstream is None:
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        up_reader, up_writer = upstream
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while chunk := await source.read(65536):
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                sink.close()
            except RuntimeError:  # the loop is closing
                pass


# --- the load ----------------------------------------------------------------------------------------


@dataclass
class Load:
    """What the clients saw: (time, ok) per attempt, and what the service acknowledged."""

    attempts: list[tuple[float, bool]] = field(default_factory=list)
    failures: list[tuple[float, str]] = field(default_factory=list)  # (time, what went wrong)
    failed_requests: int = 0  # gave up after every retry
    fact_ids: set[str] = field(default_factory=set)  # acknowledged fact writes (the stored or the kept fact)
    messages: int = 0  # acknowledged messages (202)
    lock: threading.Lock = field(default_factory=threading.Lock)


def request(method: str, url: str, key: str, body: dict | None = None, timeout: float = 15) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        raw = err.read()[:300]
        code = json.loads(raw).get("code", "") if raw.startswith(b"{") else "no body"
        return err.code, {"failure": f"HTTP {err.code} {code}"}
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
        return 0, {"failure": type(getattr(exc, "reason", exc)).__name__}


def client(index: int, base: str, key: str, load: Load, stop: threading.Event) -> None:
    """Writes a fact, searches, every fifth turn posts a message; retries a failed request (no answer or
    5xx) up to 5 times, 0.2 s apart, each retry a new connection the proxy sends to a live backend."""
    user = f"load-{index}"
    for n in itertools.count():
        if stop.is_set():
            return
        if n % 5 == 4:
            call = (
                "POST",
                f"users/{user}/messages",
                {
                    "thread_id": f"t{n // 25}",
                    "messages": [{"role": "user", "content": f"I keep crate number {index}-{n} in the shed."}],
                },
            )
        elif n % 2:
            call = ("GET", f"users/{user}/search?q=crate+{n % 97}&k=5", None)
        else:
            call = ("POST", f"users/{user}/facts", {"content": f"Client {index} noted item {n} in ledger {n * 7919}."})
        for _ in range(6):
            status, body = request(call[0], base + call[1], key, call[2])
            ok = 200 <= status < 500
            with load.lock:
                load.attempts.append((time.monotonic(), ok))
                if not ok:
                    load.failures.append(
                        (time.monotonic(), f"{call[0]} {call[1].split('/')[-1][:8]}: {body.get('failure')}")
                    )
            if ok:
                break
            time.sleep(0.2)
        else:
            with load.lock:
                load.failed_requests += 1
            continue
        with load.lock:
            if call[1].endswith("/facts") and status in (200, 201):
                load.fact_ids.add((body.get("fact") or {}).get("id") or body.get("other_fact_id"))
            elif call[1].endswith("/messages") and status == 202:
                load.messages += 1


# --- the cluster -------------------------------------------------------------------------------------


class Rehearsal:
    """Redis, Postgres over TCP, web x 2 (gunicorn), worker x 2, beat, the proxy; `close()` ends them all."""

    def __init__(self, data: Path, web_workers: int = 1):
        self.data = data
        self.fake = FakeOpenAI().start()
        self.pg = TcpPostgres()
        self.redis_port = free_port()
        self.webs = [("127.0.0.1", free_port()), ("127.0.0.1", free_port())]
        redis_url = f"redis://127.0.0.1:{self.redis_port}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DATABASE_URL": self.pg.url,
            "CELERY_BROKER_URL": f"{redis_url}/0",
            "CELERY_RESULT_BACKEND": f"{redis_url}/1",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "PII_FINGERPRINT_KEY": secrets.token_urlsafe(50),
            "MEMORY_ADMIN_DATA_DIR": str(data),
            "EMBEDDER_CACHE_DIR": embedder_cache(),
            "OPENAI_API_KEY": "sk-test-not-a-real-key",
            "OPENAI_BASE_URL": self.fake.base_url,
            "OPENAI_TIMEOUT_SECONDS": "4",
            "CONTRADICTION_JUDGE": "rules",
            "GUARD_JUDGE": "rules",
            "EXTRACTION_SWEEP_SECONDS": "0.5",
            "EXTRACTION_LEASE_MARGIN_SECONDS": "1",
            "EXTRACTION_REDISPATCH_SECONDS": "3",
            "WORKER_HEARTBEAT_SECONDS": "2",
            "API_RATE_LIMIT": "0",  # one key drives the whole load
            "WEB_WORKERS": str(web_workers),
            "LOG_LEVEL": "WARNING",
        }
        for name in ("TEST_DB_NAME", "BIND", "PROMETHEUS_MULTIPROC_DIR"):
            self.env.pop(name, None)
        self.procs = Processes(self.env, data)
        self.proxy: RoundRobinProxy | None = None
        self.key = ""

    def start(self) -> Rehearsal:
        self.procs.start(
            "redis",
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.data),
            ],
        )
        manage(self.env, "migrate", "--verbosity=0")
        manage(self.env, "create_tenant", "multihost")
        self.key = manage(self.env, "create_agent_key", "multihost", "loader", "--admin").splitlines()[-1]
        for name, (host, port) in zip(("web-a", "web-b"), self.webs, strict=True):
            self.procs.start(
                name,
                [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf", f"--bind={host}:{port}"],
            )
        for name in ("worker-a", "worker-b"):
            self.procs.start(
                name,
                CELERY + ["worker", "--loglevel=INFO", "--pool=prefork", "--concurrency=1", f"--hostname={name}@%h"],
            )
        self.procs.start("beat", CELERY + ["beat", "--loglevel=INFO", "-s", str(self.data / "beat-schedule")])

        def ready() -> bool:
            for name, proc in self.procs.procs.items():
                assert proc.poll() is None, f"{name} exited\n{self.procs.logs()}"
            workers = all("embedding model warm" in self.procs.log(n) for n in ("worker-a", "worker-b"))
            webs = all(request("GET", f"http://{h}:{p}/api/v1/health/live", "")[0] == 200 for h, p in self.webs)
            return workers and webs

        wait_until(ready, 180, "two webs and two workers", self.procs.logs, every=1)
        self.proxy = RoundRobinProxy(self.webs).start()
        status, _ = request("PATCH", self.base + "settings", self.key, {"debounce_seconds": DEBOUNCE_SECONDS})
        assert status == 200, status
        return self

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}/api/v1/"

    def close(self) -> None:
        if self.proxy:
            self.proxy.stop()
        self.procs.stop_all()
        self.pg.destroy()
        self.fake.stop()

    # --- what each piece takes ----------------------------------------------------------------------

    def footprint(self) -> list[dict]:
        """One row per process of every role (its process group) and of Postgres: role, what it is, RSS and
        PSS (MiB), and the Postgres connections it holds (TCP connections to the Postgres port)."""
        import psutil

        groups = {name: proc.pid for name, proc in self.procs.procs.items() if proc.poll() is None}
        postmaster = int((self.pg.pgdata / "postmaster.pid").read_text().split()[0])
        rows = []
        for p in psutil.process_iter(["pid", "ppid", "cmdline"]):
            pgid = _pgid(p.pid)
            role = next((name for name, pid in groups.items() if pid == pgid), None)
            if role is None and postmaster in (p.pid, p.info["ppid"]):
                role = "postgres"
            if role is None:
                continue
            try:
                rollup = _smaps_rollup(p.pid)
                cpu = sum(p.cpu_times()[:2])
                conns = sum(1 for c in p.net_connections("tcp") if c.raddr and c.raddr.port == self.pg.port)
            except (psutil.Error, OSError):
                continue
            what = " ".join(p.info["cmdline"] or [])
            rows.append(
                {
                    "role": role,
                    "what": _kind(role, what, p.pid in (groups.get(role), postmaster)),
                    "rss_mib": rollup.get("Rss", 0) / 1024,
                    "pss_mib": rollup.get("Pss", 0) / 1024,
                    "pg_connections": conns,
                    "cpu_seconds": cpu,
                }
            )
        return sorted(rows, key=lambda row: (row["role"], row["what"]))

    def database_errors(self) -> list[str]:
        """ERROR lines of the Postgres log (a deadlock, a dropped client), with the statement that failed."""
        log = (self.pg.dir / "log").read_text(errors="replace").splitlines()
        return [line.split("UTC ", 1)[-1][:200] for line in log if " ERROR: " in line or "STATEMENT:" in line]

    def unextracted(self, posted: int) -> int:
        return posted - int(self.pg.psql("SELECT count(*) FROM memory_admin_message WHERE status = 'extracted'"))

    def missing_facts(self, ids: set[str]) -> int:
        if not ids:
            return 0
        listed = ",".join(f"'{uuid.UUID(str(i))}'" for i in ids)  # UUIDs, checked before they reach SQL
        present = int(self.pg.psql(f"SELECT count(*) FROM memory_admin_fact WHERE id IN ({listed})"))
        return len(ids) - present


def _kind(role: str, cmdline: str, leader: bool) -> str:
    if role == "postgres":
        return "postmaster" if leader else "backend" if "127.0.0.1(" in cmdline else "auxiliary"
    if role.startswith("web"):
        return "gunicorn master" if leader else "gunicorn worker"
    if role.startswith("worker"):
        return "celery main" if leader else "celery pool child"
    return role


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def _smaps_rollup(pid: int) -> dict[str, int]:
    """kB per field of /proc/<pid>/smaps_rollup (Rss, Pss, ...)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0])
    return fields


# --- the run -----------------------------------------------------------------------------------------


def _cpu_by_role(rows: list[dict]) -> dict[str, float]:
    """CPU seconds (user + system) so far, per kind of process: web, worker, beat, postgres, redis."""
    total: dict[str, float] = {}
    for row in rows:
        kind = row["role"].split("-")[0]
        total[kind] = total.get(kind, 0.0) + row["cpu_seconds"]
    return total


@dataclass
class Figures:
    cpu_ms_per_request: dict[str, float]  # before the kills: CPU ms each kind of process spent per request
    rps: dict[str, float]  # median completed requests per second in each phase
    slowest: dict[str, int]  # the fewest requests completed in any one second of each phase
    failed_attempts: dict[str, int]
    failure_times: list[tuple[float, str]]  # seconds after the kills and what, each failed attempt
    failed_requests: int
    acknowledged_facts: int
    missing_facts: int
    acknowledged_messages: int
    unextracted_messages: int
    extracted_in: float  # seconds after the load stopped until every acknowledged message was extracted
    footprint: list[dict]
    proxy_refused: int
    database_errors: list[str]

    def lines(self) -> list[str]:
        out = [
            "phase    req/s (median of 1 s buckets)   slowest second   failed attempts",
            *(
                f"{phase:<8} {self.rps[phase]:>8.1f} {self.slowest[phase]:>30} {self.failed_attempts[phase]:>17}"
                for phase in ("before", "during", "after")
            ),
            "failed attempts (s after the kills): "
            + ("; ".join(f"{t:+.2f} {what}" for t, what in self.failure_times) or "none"),
            f"requests failed after every retry: {self.failed_requests}; connections the proxy found refused: "
            f"{self.proxy_refused}",
            f"acknowledged fact writes: {self.acknowledged_facts}, missing from Postgres: {self.missing_facts}",
            f"acknowledged messages: {self.acknowledged_messages}, never extracted: {self.unextracted_messages} "
            f"(all extracted {self.extracted_in:.1f} s after the load stopped)",
            "CPU ms per request before the kills (all processes of the kind): "
            + ", ".join(f"{kind} {ms:.1f}" for kind, ms in self.cpu_ms_per_request.items()),
            f"Postgres errors: {len(self.database_errors)}",
            *(f"  {line}" for line in self.database_errors[:12]),
            "role       process              RSS MiB  PSS MiB  Postgres conns   (before the kills)",
            *(
                f"{r['role']:<10} {r['what']:<20} {r['rss_mib']:>7.0f}  {r['pss_mib']:>7.0f}  {r['pg_connections']:>5}"
                for r in self.footprint
            ),
        ]
        return out


def rehearse(rig: Rehearsal, clients: int = 4, before: float = 12, after: float = 15) -> Figures:
    load, stop = Load(), threading.Event()
    threads = [threading.Thread(target=client, args=(i, rig.base, rig.key, load, stop)) for i in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(2)  # warm-up
    cpu_from = _cpu_by_role(rig.footprint())
    time.sleep(before - 4)
    footprint = rig.footprint()
    time.sleep(2)
    cpu_to = _cpu_by_role(rig.footprint())
    killed_at = time.monotonic()
    rig.procs.kill("web-a")
    rig.procs.kill("worker-a")
    time.sleep(after)
    stop.set()
    for t in threads:
        t.join(30)
    stopped = time.monotonic()
    wait_until(
        lambda: rig.unextracted(load.messages) <= 0,
        60,
        "every acknowledged message to be extracted",
        rig.procs.logs,
        every=0.5,
    )
    extracted_in = time.monotonic() - stopped

    phases = {
        "before": (started + 2, killed_at),  # the first 2 s warm up
        "during": (killed_at, killed_at + DURING_SECONDS),
        "after": (killed_at + DURING_SECONDS, stopped),
    }
    rps, slowest, failed = {}, {}, {}
    for phase, (start, end) in phases.items():
        buckets = [0] * max(1, int(end - start))
        for at, ok in load.attempts:
            if ok and start <= at < start + len(buckets):
                buckets[int(at - start)] += 1
        rps[phase] = statistics.median(buckets)
        slowest[phase] = min(buckets)
        failed[phase] = sum(1 for at, ok in load.attempts if not ok and start <= at < end)
    served = sum(1 for at, ok in load.attempts if ok and started + 2 <= at < killed_at)
    return Figures(
        cpu_ms_per_request={
            role: 1000 * (cpu_to[role] - cpu_from.get(role, 0)) / max(1, served) for role in sorted(cpu_to)
        },
        rps=rps,
        slowest=slowest,
        failed_attempts=failed,
        failure_times=sorted((at - killed_at, what) for at, what in load.failures),
        failed_requests=load.failed_requests,
        acknowledged_facts=len(load.fact_ids),
        missing_facts=rig.missing_facts(load.fact_ids),
        acknowledged_messages=load.messages,
        unextracted_messages=max(0, rig.unextracted(load.messages)),
        extracted_in=extracted_in,
        footprint=footprint,
        proxy_refused=rig.proxy.refused,
        database_errors=rig.database_errors(),
    )


def main() -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--before", type=float, default=12)
    parser.add_argument("--after", type=float, default=15)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    rig = Rehearsal(Path(tempfile.mkdtemp(prefix="ma-multihost-")))
    try:
        rig.start()
        figures = rehearse(rig, clients=args.clients, before=args.before, after=args.after)
    finally:
        rig.close()
    print(
        f"multi-host rehearsal: web x 2 (1 gunicorn worker, 4 threads each), worker x 2 (concurrency 1), beat, "
        f"Redis, Postgres over TCP, {args.clients} clients through a round-robin proxy; web-a and worker-a "
        f"SIGKILLed after {args.before:.0f} s"
    )
    for line in figures.lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
