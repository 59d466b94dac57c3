"""Soak: the real stack (`manage.py up` on its own data directory: embedded Postgres, gunicorn, two
Celery workers, beat, MCP) under a sustained burst, then the drain.

Three clients replay the dev LoCoMo conversations (/work/shared/eval/locomo-dev) at once, each its own
share of the sessions, in order: the session's turns as fact batches (every fact write queues entity
drawing on the `bulk` queue) and as messages in a thread, the thread closed (an extraction batch on
`interactive`), and a few of the conversation's questions searched. When the data runs out a client
starts over under new user ids. After `--seconds` the clients stop and the bench waits for every
queue to empty and every extraction batch to finish.

Printed: broker deliveries per second (tasks finished by the workers, from /metrics), requests,
acknowledged writes, 5xx, supervisor restarts, the longest run of readiness not answering 200, queue
depths over time, the drain time (queues empty, no batch open, no message waiting for extraction),
acknowledged facts and messages missing afterwards, messages not extracted, extraction batches failed
or stuck, and the RSS/PSS of every process of `up` (Postgres included) after the soak; then `up` is
stopped with SIGTERM and any process left behind is named.

    PYTHONPATH=$PWD .venv/bin/python bench/soak.py                  # 4 minutes, the embedded broker
    PYTHONPATH=$PWD .venv/bin/python bench/soak.py --redis          # the same on a Redis broker
    PYTHONPATH=$PWD .venv/bin/python bench/soak.py --seconds 60     # shorter

tests/ops/test_soak.py runs the same (shorter) with assertions; tests/ops/test_faults_under_burst.py
runs it with a worker SIGKILLed, and then Postgres stopped, in the middle of the burst (`soak(fault=...)`).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
LOCOMO = Path("/work/shared/eval/locomo-dev")
FACTS_PER_BATCH = 20
MESSAGES_PER_POST = 10
SEARCHES_PER_SESSION = 2


# --- The data ---------------------------------------------------------------------------------------------


@dataclass
class Session:
    sample_id: str
    number: int
    turns: list[dict]
    questions: list[str] = field(default_factory=list)


def load_sessions(data: Path = LOCOMO) -> list[Session]:
    turns = [json.loads(line) for line in (data / "locomo_dev_turns.jsonl").open()]
    questions = defaultdict(list)
    for line in (data / "locomo_dev_qa.jsonl").open():
        row = json.loads(line)
        questions[row["sample_id"]].append(row["question"])
    sessions: dict[tuple[str, int], Session] = {}
    for turn in turns:
        key = (turn["sample_id"], int(turn["session"]))
        sessions.setdefault(key, Session(*key, []))
        sessions[key].turns.append(turn)
    out = sorted(sessions.values(), key=lambda s: (s.sample_id, s.number))
    for i, session in enumerate(out):
        asked = questions[session.sample_id]
        session.questions = [asked[(i * SEARCHES_PER_SESSION + k) % len(asked)] for k in range(SEARCHES_PER_SESSION)]
    return out


# --- HTTP -------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(method: str, url: str, body: Any = None, key: str | None = None, timeout: float = 30) -> tuple[int, Any]:
    """(status, JSON body or text); status 0 when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as err:
        raw, status = err.read(), err.code
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
        return 0, {"error": str(err)}
    try:
        return status, json.loads(raw or b"{}")
    except ValueError:
        return status, raw.decode(errors="replace")


# --- The stack --------------------------------------------------------------------------------------------


class RedisServer:
    """A throwaway redis-server on a free port: no persistence, loopback only."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ma-soak-redis-"))
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class UpStack:
    """`manage.py up --no-demo` on a data directory of its own (so `up` starts, and must stop, its own
    embedded Postgres), in its own session, its output in up.log."""

    def __init__(self, workdir: Path, *, env: dict[str, str], wedged_after: float = 120):
        self.workdir = workdir
        self.data = workdir / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        bind = f"127.0.0.1:{free_port()}"
        self.base = f"http://{bind}/api/v1/"
        self.root = f"http://{bind}"
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DB_NAME", "CELERY_BROKER_URL")},
            "PYTHONPATH": str(ROOT),
            "MEMORY_ADMIN_DATA_DIR": str(self.data),
            "MCP_BIND": f"127.0.0.1:{free_port()}",
            "OPENAI_API_KEY": "",  # the offline rules extractor: real extraction, no model
            "LOG_LEVEL": "WARNING",
            **env,
        }
        self.logfile = workdir / "up.log"
        with open(self.logfile, "wb") as log:
            self.proc = subprocess.Popen(
                [PYTHON, "manage.py", "up", "--no-demo", f"--bind={bind}", f"--wedged-after={wedged_after}"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.key = ""

    def output(self) -> str:
        return self.logfile.read_text(errors="replace")

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-n:])

    def up_lines(self) -> list[str]:
        return [line for line in self.output().splitlines() if line.startswith("up: ")]

    def restarts(self) -> list[str]:
        return [line for line in self.up_lines() if " wedged: " in line or re.search(r" restarted \(pid ", line)]

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"up exited with {self.proc.returncode}\n{self.tail()}")
            status, body = http("GET", self.base + "health/ready", timeout=5)
            if status == 200 and body.get("background", {}).get("worker", {}).get("status") == "ok":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the stack did not become ready in {timeout:.0f} s\n{self.tail()}")

    def manage(self, *args: str) -> str:
        return subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=180,
        ).stdout.strip()

    def create_tenant(self, slug: str) -> str:
        self.manage("create_tenant", slug)
        self.key = self.manage("create_agent_key", slug, "soak", "--admin").splitlines()[-1]
        status, body = http("PATCH", self.base + "settings", {"debounce_seconds": 2}, self.key)
        if status != 200:
            raise RuntimeError(f"settings: {status} {body}")
        return self.key

    def pgdata(self) -> Path:
        return self.data / "pgdata"

    def postmaster(self) -> psutil.Process | None:
        try:
            pid = int((self.pgdata() / "postmaster.pid").read_text().split()[0])
            return psutil.Process(pid)
        except (OSError, ValueError, IndexError, psutil.NoSuchProcess):
            return None

    def _pg_ctl(self, *args: str) -> None:
        import pgserver

        # Run as the owner of the data directory (pgserver's own user when `up` runs as root).
        owner = pwd.getpwuid(self.pgdata().stat().st_uid).pw_name
        user = owner if os.geteuid() == 0 and owner != "root" else None
        pgserver.pg_ctl(["-w", *args], pgdata=self.pgdata(), user=user, timeout=60)

    def postgres_stop(self) -> list[str]:
        """Stop `up`'s embedded Postgres (fast: sessions cut, nothing committed lost), as an outage
        would; returns the options it ran with, for `postgres_start`."""
        argv = shlex.split((self.pgdata() / "postmaster.opts").read_text())
        options = [a for i, a in enumerate(argv[1:], 1) if a != "-D" and argv[i - 1] != "-D"]
        self._pg_ctl("-m", "fast", "stop")
        return options

    def postgres_start(self, options: list[str]) -> None:
        """Start the embedded Postgres again, on the same socket, as after an outage."""
        self._pg_ctl("-l", str(self.pgdata() / "log"), "-o", shlex.join(options), "start")

    def database_url(self) -> str:
        from pgserver.utils import PostmasterInfo

        return PostmasterInfo.read_from_pgdata(self.pgdata()).get_uri(database="memory_admin")

    def processes(self) -> list[tuple[str, psutil.Process]]:
        """Every process of the stack: `up`, its children and theirs, and Postgres (postmaster and backends)."""
        found: list[tuple[str, psutil.Process]] = []
        try:
            up = psutil.Process(self.proc.pid)
            found.append(("up", up))
            found += [(_role(p), p) for p in up.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
        postmaster = self.postmaster()
        if postmaster is not None:
            found.append(("postgres", postmaster))
            found += [("postgres", p) for p in postmaster.children(recursive=True)]
        return found

    def stop(self, timeout: float = 90) -> tuple[int | None, list[str]]:
        """SIGTERM to `up`; its exit status and any process of the stack left behind afterwards."""
        before = self.processes()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        time.sleep(1)
        left = []
        for role, proc in before:
            try:
                if not gone(proc):
                    left.append(f"{role} (pid {proc.pid}: {' '.join(proc.cmdline())[:80]})")
            except psutil.NoSuchProcess:
                pass
        return self.proc.returncode, left

    def kill_everything(self) -> None:
        """Teardown whatever happened (the bench or the test failed half way)."""
        for _, proc in self.processes():
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        postmaster = self.postmaster()
        if postmaster is not None:
            try:
                postmaster.kill()
            except psutil.NoSuchProcess:
                pass


def gone(proc: psutil.Process) -> bool:
    """The process has exited (a zombie waiting for a parent that does not reap it counts as gone)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _role(proc: psutil.Process) -> str:
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"
    for needle, role in (
        ("--queues=control", "worker"),
        ("--queues=bulk", "worker-bulk"),
        (" beat ", "beat"),
        ("gunicorn", "web"),
        ("mcp", "mcp"),
        ("postgres", "postgres"),
    ):
        if needle in cmd + " ":
            return role
    return cmd[:40]


# --- Load and watchers ------------------------------------------------------------------------------------


class Client(threading.Thread):
    """One agent replaying its share of the sessions until `stop` is set."""

    def __init__(self, index: int, sessions: list[Session], base: str, key: str, stop: threading.Event):
        super().__init__(daemon=True, name=f"client-{index}")
        self.index, self.sessions, self.base, self.key, self.stop = index, sessions, base, key, stop
        self.requests = 0
        self.statuses: dict[int, int] = defaultdict(int)
        self.fact_ids: list[str] = []
        self.messages_accepted = 0
        self.closes = 0
        self.searches = 0
        self.errors: list[str] = []
        self.failures: list[tuple[float, int, str]] = []  # (monotonic time, status, request) of each 5xx or none

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, answer = http(method, self.base + path, body, self.key)
        self.requests += 1
        self.statuses[status] += 1
        if status >= 500 or status == 0:
            self.failures.append((time.monotonic(), status, f"{method} {path.split('?')[0]}"))
        if status >= 500 or status == 0 or (status >= 400 and len(self.errors) < 5):
            self.errors.append(f"{method} {path.split('?')[0]} -> {status} {str(answer)[:160]}")
        return status, answer

    def run(self) -> None:
        round_ = 0
        while not self.stop.is_set():
            for session in self.sessions:
                if self.stop.is_set():
                    return
                self.replay(session, f"{session.sample_id}-c{self.index}-r{round_}")
            round_ += 1

    def replay(self, session: Session, user: str) -> None:
        thread = f"session-{session.number}"
        texts = [turn["memory_text"] for turn in session.turns]
        for start in range(0, len(texts), FACTS_PER_BATCH):
            facts = [{"content": text, "confidence": 0.9} for text in texts[start : start + FACTS_PER_BATCH]]
            status, body = self.call("POST", f"users/{user}/facts/batch", {"facts": facts})
            if status == 200:
                self.fact_ids += [r["fact"]["id"] for r in body["results"] if r.get("fact")]
            if self.stop.is_set():
                return
        for start in range(0, len(session.turns), MESSAGES_PER_POST):
            chunk = session.turns[start : start + MESSAGES_PER_POST]
            messages = [
                {
                    "role": "user" if turn["speaker"] == session.turns[0]["speaker"] else "assistant",
                    "content": turn["text"],
                }
                for turn in chunk
            ]
            status, body = self.call("POST", f"users/{user}/messages", {"thread_id": thread, "messages": messages})
            if status == 202:
                self.messages_accepted += body.get("accepted", 0)
        status, _ = self.call("POST", f"users/{user}/threads/{thread}/close", {})
        self.closes += status == 202
        for question in session.questions:
            status, _ = self.call("GET", f"users/{user}/search?q={urllib.parse.quote(question[:200])}&k=10")
            self.searches += status == 200


class Watch(threading.Thread):
    """Every `every` seconds: /health/ready's status and its queues."""

    def __init__(self, base: str, every: float = 0.5):
        super().__init__(daemon=True, name="watch")
        self.base, self.every = base, every
        self.stopped = threading.Event()
        self.samples: list[tuple[float, int, dict]] = []

    def run(self) -> None:
        while not self.stopped.is_set():
            status, body = http("GET", self.base + "health/ready", timeout=5)
            self.samples.append((time.monotonic(), status, body if isinstance(body, dict) else {}))
            self.stopped.wait(self.every)

    def longest_red(self) -> float:
        """The longest run of answers other than 200 (seconds, first to last bad sample + one period)."""
        longest, since = 0.0, None
        for at, status, _ in self.samples:
            if status != 200:
                since = at if since is None else since
                longest = max(longest, at - since + self.every)
            else:
                since = None
        return longest

    def statuses(self) -> dict[str, int]:
        seen: dict[str, int] = defaultdict(int)
        for _, status, body in self.samples:
            seen[f"{status} {body.get('status', '')}".strip()] += 1
        return dict(seen)

    def depth_series(self, start: float, step: float = 15.0) -> list[str]:
        """Queue depths (and the oldest message's age) every `step` seconds since `start`."""
        out, next_at = [], start
        for at, _, body in self.samples:
            if at < next_at or not body.get("queues"):
                continue
            next_at = at + step
            cells = ", ".join(
                f"{name} {q['depth']}" + (f" ({q['oldest_age_seconds']:.0f} s)" if q.get("oldest_age_seconds") else "")
                for name, q in sorted(body["queues"].items())
            )
            out.append(f"t+{at - start:5.0f} s: {cells}")
        return out


def deliveries(root: str) -> float:
    """Tasks finished by the workers so far (memory_admin_tasks_total summed over tasks and states)."""
    status, text = http("GET", root + "/metrics", timeout=20)
    if status != 200 or not isinstance(text, str):
        return float("nan")
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("memory_admin_tasks_total{")
    )


def drained(stack: UpStack, conn) -> tuple[bool, str]:
    status, body = http("GET", stack.base + "health/ready", timeout=5)
    queues = body.get("queues") if isinstance(body, dict) else None
    waiting = sum(q["depth"] for q in queues.values()) if queues else None
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM memory_admin_extractionbatch WHERE status IN ('pending', 'running')")
        open_batches = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM memory_admin_message WHERE status = 'pending'")
        unextracted = cur.fetchone()[0]
    done = waiting == 0 and open_batches == 0 and unextracted == 0
    return done, f"queued {waiting}, open batches {open_batches}, messages not extracted {unextracted}"


def rss_table(stack: UpStack) -> tuple[list[str], int, int]:
    rows, rss_total, pss_total = [], 0, 0
    for role, proc in stack.processes():
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss_total += info.rss
        pss_total += getattr(info, "pss", info.rss)
        pss = getattr(info, "pss", 0) / 2**20
        rows.append(f"  {role:<12} pid {proc.pid:<7} rss {info.rss / 2**20:7.1f} MB  pss {pss:7.1f} MB")
    return rows, rss_total, pss_total


@dataclass
class Figures:
    seconds: float
    deliveries_per_second: float
    requests: int
    statuses: dict[int, int]
    acknowledged_facts: int
    acknowledged_messages: int
    closes: int
    searches: int
    server_errors: int
    unanswered: int
    restarts: list[str]
    longest_red: float
    readiness: dict[str, int]
    depths: list[str]
    drain_seconds: float | None
    missing_facts: int
    missing_messages: int
    unextracted_messages: int
    failed_batches: int
    stuck_batches: int
    rss_rows: list[str]
    rss_total: int
    pss_total: int
    up_rss: int
    errors: list[str]
    failures: list[tuple[float, int, str]]

    def report(self, label: str) -> str:
        lines = [
            f"soak ({label}): {self.seconds:.0f} s burst, 3 clients",
            f"  broker deliveries: {self.deliveries_per_second:.1f} tasks/s over the burst and the drain",
            f"  requests {self.requests} ({dict(sorted(self.statuses.items()))}), "
            f"acknowledged writes: {self.acknowledged_facts} facts, {self.acknowledged_messages} messages, "
            f"{self.closes} thread closes; {self.searches} searches",
            f"  5xx {self.server_errors}, unanswered {self.unanswered}; "
            f"supervisor restarts/wedges {len(self.restarts)}",
            f"  readiness: longest not-200 run {self.longest_red:.1f} s; answers {self.readiness}",
            "  queue depth over time:",
            *[f"    {line}" for line in self.depths],
            "  drain after the burst: "
            + ("not drained" if self.drain_seconds is None else f"{self.drain_seconds:.1f} s"),
            f"  acknowledged facts missing: {self.missing_facts}; acknowledged messages missing "
            f"{self.missing_messages}, not extracted {self.unextracted_messages}; batches failed "
            f"{self.failed_batches}, stuck {self.stuck_batches}",
            f"  memory after the soak: RSS sum {self.rss_total / 2**20:.0f} MB, PSS sum {self.pss_total / 2**20:.0f} MB"
            f" (up itself {self.up_rss / 2**20:.0f} MB)",
            *self.rss_rows,
        ]
        lines += [f"  restart: {line}" for line in self.restarts]
        lines += [f"  error: {line}" for line in self.errors[:10]]
        return "\n".join(lines)


def soak(
    stack: UpStack,
    seconds: float,
    *,
    drain_timeout: float = 300,
    clients: int = 3,
    fault: Callable[[], None] | None = None,
    fault_after: float = 0.0,
) -> Figures:
    """Drive the burst against a ready stack with a tenant, then the drain; collect the figures.
    `fault`, when given, is called `fault_after` seconds into the burst while the clients keep going
    (tests/ops/test_faults_under_burst.py: a worker killed, Postgres stopped and started); the burst
    still lasts `seconds` in all."""
    import psycopg

    sessions = load_sessions()
    stop = threading.Event()
    share = [sessions[i::clients] for i in range(clients)]
    workers = [Client(i, share[i], stack.base, stack.key, stop) for i in range(clients)]
    watch = Watch(stack.base)
    delivered_before = deliveries(stack.root)
    with psycopg.connect(stack.database_url(), autocommit=True) as conn:
        messages_before = conn.execute("SELECT count(*) FROM memory_admin_message").fetchone()[0]
    watch.start()
    started = time.monotonic()
    for client in workers:
        client.start()
    if fault is not None:
        time.sleep(min(fault_after, seconds))
        fault()
    time.sleep(max(0.0, started + seconds - time.monotonic()))
    stop.set()
    for client in workers:
        client.join(60)
    burst_end = time.monotonic()

    drain_seconds = None
    with psycopg.connect(stack.database_url(), autocommit=True) as conn:
        deadline = burst_end + drain_timeout
        while time.monotonic() < deadline:
            done, _ = drained(stack, conn)
            if done:
                drain_seconds = time.monotonic() - burst_end
                break
            time.sleep(1)
        delivered = deliveries(stack.root) - delivered_before
        elapsed = time.monotonic() - started
        fact_ids = [fid for client in workers for fid in client.fact_ids]
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM memory_admin_fact WHERE id = ANY(%s::uuid[])", [fact_ids])
            found = cur.fetchone()[0]
            cur.execute(
                "SELECT count(*) FILTER (WHERE status = 'failed'), "
                "count(*) FILTER (WHERE status IN ('pending', 'running')) FROM memory_admin_extractionbatch"
            )
            failed, stuck = cur.fetchone()
            # Messages are acknowledged by count (202 `accepted`), not by id: every one of them stored
            # since the burst began (a request that failed stored nothing, so more is never a loss).
            cur.execute("SELECT count(*), count(*) FILTER (WHERE status = 'pending') FROM memory_admin_message")
            messages_after, unextracted = cur.fetchone()
    watch.stopped.set()
    watch.join(10)
    rows, rss_total, pss_total = rss_table(stack)
    statuses: dict[int, int] = defaultdict(int)
    for client in workers:
        for status, n in client.statuses.items():
            statuses[status] += n
    return Figures(
        seconds=burst_end - started,
        deliveries_per_second=delivered / elapsed,
        requests=sum(c.requests for c in workers),
        statuses=dict(statuses),
        acknowledged_facts=len(fact_ids),
        acknowledged_messages=sum(c.messages_accepted for c in workers),
        closes=sum(c.closes for c in workers),
        searches=sum(c.searches for c in workers),
        server_errors=sum(n for status, n in statuses.items() if status >= 500),
        unanswered=statuses.get(0, 0),
        restarts=stack.restarts(),
        longest_red=watch.longest_red(),
        readiness=watch.statuses(),
        depths=watch.depth_series(started),
        drain_seconds=drain_seconds,
        missing_facts=len(set(fact_ids)) - found,
        missing_messages=max(0, sum(c.messages_accepted for c in workers) - (messages_after - messages_before)),
        unextracted_messages=unextracted,
        failed_batches=failed,
        stuck_batches=stuck,
        rss_rows=rows,
        rss_total=rss_total,
        pss_total=pss_total,
        up_rss=psutil.Process(stack.proc.pid).memory_info().rss if stack.proc.poll() is None else 0,
        errors=[e for c in workers for e in c.errors],
        failures=sorted(f for c in workers for f in c.failures),
    )


def embedder_env() -> dict[str, str]:
    """This checkout's embedder cache, so that the fresh data directory does not build its own."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    import django

    django.setup()
    from memory_admin.embedding.onnx_recipe import cache_dir

    return {"EMBEDDER_CACHE_DIR": str(cache_dir())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=240)
    parser.add_argument("--redis", action="store_true", help="Redis as the broker (CELERY_BROKER_URL)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, data)")
    args = parser.parse_args()

    env = embedder_env()
    redis = RedisServer() if args.redis else None
    if redis:
        env["CELERY_BROKER_URL"] = redis.url
    workdir = Path(tempfile.mkdtemp(prefix="ma-soak-"))
    stack = UpStack(workdir, env=env)
    try:
        t0 = time.monotonic()
        stack.wait_ready()
        print(
            f"stack ready in {time.monotonic() - t0:.0f} s; "
            f"up's own RSS {psutil.Process(stack.proc.pid).memory_info().rss / 2**20:.0f} MB",
            flush=True,
        )
        stack.create_tenant("soak")
        figures = soak(stack, args.seconds)
        print(figures.report("Redis broker" if redis else "embedded broker"), flush=True)
        code, left = stack.stop()
        print(f"SIGTERM: up exited with {code}; left behind: {left or 'nothing'}")
    finally:
        stack.kill_everything()
        if redis:
            redis.stop()
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
