"""The basics every dashboard and alert starts from, beside the product's own series (metrics.py):
HTTP requests per route template (rate, latency histogram, status class) and each process's memory,
CPU and open files.

Routes are Django's URL patterns (`api/v1/users/<user_id>/facts`), never the path an agent sent, so the
label set stays small and holds no identifier. A request no pattern matched counts as `unmatched`, a
static file as `static`. Process series carry the process's role and pid (prometheus_client's `liveall`
multi-process mode drops a process's series once it is marked dead)."""

from __future__ import annotations

import atexit
import os
import resource
import sys
import time

from prometheus_client import Counter, Gauge, Histogram

from memory_admin import metrics  # first: sets PROMETHEUS_MULTIPROC_DIR before prometheus_client loads

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

HTTP_REQUESTS = Counter(
    "memory_admin_http_requests", "HTTP requests answered, by route template, method and status class.",
    ["route", "method", "status"],
)  # fmt: skip
HTTP_SECONDS = Histogram(
    "memory_admin_http_request_seconds", "Time to answer an HTTP request, by route template and method.",
    ["route", "method"], buckets=_SECONDS,
)  # fmt: skip
RESIDENT = Gauge(
    "memory_admin_process_resident_memory_bytes", "Resident memory of each process.", ["role"],
    multiprocess_mode="liveall",
)  # fmt: skip
CPU = Gauge(
    "memory_admin_process_cpu_seconds", "CPU time (user + system) each process has used.", ["role"],
    multiprocess_mode="liveall",
)  # fmt: skip
OPEN_FDS = Gauge(
    "memory_admin_process_open_fds", "Open file descriptors of each process.", ["role"], multiprocess_mode="liveall"
)
STARTED = Gauge(
    "memory_admin_process_start_time_seconds", "When each process started (Unix time).", ["role"],
    multiprocess_mode="liveall",
)  # fmt: skip

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PROCESS_EVERY_SECONDS = 5.0
_process = {"pid": 0, "at": 0.0}


def process_role() -> str:
    """web, worker, beat, mcp or other: what this process is, from its command line."""
    argv = " ".join(sys.argv)
    if "gunicorn" in argv:
        return "web"
    if "celery" in argv:
        return "beat" if " beat" in argv else "worker"
    if " mcp" in argv:
        return "mcp"
    return "other"


def record_process(force: bool = False) -> None:
    """This process's memory, CPU and files, at most every PROCESS_EVERY_SECONDS (a forked child starts
    its own series at once)."""
    now, pid = time.monotonic(), os.getpid()
    if not force and _process["pid"] == pid and now - _process["at"] < PROCESS_EVERY_SECONDS:
        return
    role = process_role()
    if _process["pid"] != pid:
        STARTED.labels(role).set(time.time() - _uptime())
        # A process that ends normally takes its series with it (gunicorn's child_exit and Celery's
        # worker_process_shutdown do this for the processes they fork; this covers beat, a solo or
        # threads worker and the MCP server). A killed one's go when a server next starts (clean_multiproc_dir).
        atexit.register(_exited, pid)
    _process.update(pid=pid, at=now)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    CPU.labels(role).set(usage.ru_utime + usage.ru_stime)
    try:
        with open("/proc/self/statm") as statm:
            RESIDENT.labels(role).set(int(statm.read().split()[1]) * _PAGE_SIZE)
        OPEN_FDS.labels(role).set(len(os.listdir("/proc/self/fd")))
    except OSError:  # not Linux: usage's peak is what there is
        RESIDENT.labels(role).set(usage.ru_maxrss * 1024)


def _exited(pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child that inherited the handler
        metrics.process_exited(pid)


def _uptime() -> float:
    """Seconds since this process started (from /proc; 0 where there is none)."""
    try:
        with open("/proc/self/stat") as stat:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            return float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def route_of(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is not None and match.route:
        return match.route
    from django.conf import settings

    return "static" if request.path_info.startswith("/" + settings.STATIC_URL.lstrip("/")) else "unmatched"


class HttpMetricsMiddleware:
    """Counts and times every request, first in and last out, so the time covers all other middleware."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        route = route_of(request)
        method = request.method if request.method in _METHODS else "other"
        HTTP_REQUESTS.labels(route, method, f"{response.status_code // 100}xx").inc()
        HTTP_SECONDS.labels(route, method).observe(elapsed)
        record_process()
        return response


def connect_celery() -> None:
    """Worker and beat processes report their process series after tasks and at start."""
    from celery.signals import beat_init, task_postrun, worker_process_init

    task_postrun.connect(lambda **_: record_process(), weak=False)
    worker_process_init.connect(lambda **_: record_process(force=True), weak=False)
    beat_init.connect(lambda **_: record_process(force=True), weak=False)
