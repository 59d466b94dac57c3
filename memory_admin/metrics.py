"""Prometheus metrics: the product's own series, one recording function per event, and `/metrics`.

Multi-process: every process (gunicorn workers, Celery pool children, beat) writes its counters and
histograms into files under PROMETHEUS_MULTIPROC_DIR (default `<data dir>/metrics`); a scrape sums them
(prometheus_client's multiprocess mode). Servers clean the files of processes that are gone when they
start (`clean_multiproc_dir`: gunicorn's `on_starting`, Celery's `worker_init`/`beat_init`), and gunicorn
marks a worker dead when it exits. The directory must be local to the host (pids are host-local).

Gauges about stored state (review queue, open batches, heartbeat ages) are read from the database at
scrape time, and the broker's queue depths and oldest-message ages from the broker, so every web
process answers the same figures.

Labels carry outcomes, kinds, routes and tenant ids: never content, never an identifier an agent sent.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Callable
from contextvars import ContextVar
from decimal import Decimal
from pathlib import Path

from django.http import HttpRequest, HttpResponse

from memory_admin import config
from memory_admin.embedded_db import data_dir
from memory_admin.errors import Blocked

# Before prometheus_client is imported: it picks its multi-process value class on import.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(data_dir(Path(__file__).resolve().parent.parent) / "metrics"))
Path(config.get("PROMETHEUS_MULTIPROC_DIR")).mkdir(parents=True, exist_ok=True)

from prometheus_client import (  # noqa: E402
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily  # noqa: E402

log = logging.getLogger("memory_admin.write")

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

FACT_WRITES = Counter("memory_admin_fact_writes", "Fact writes by outcome (SPEC §4) and route.", ["route", "outcome"])
PII_BLOCKS = Counter(
    "memory_admin_pii_blocks", "Secrets/PII found by the scan, by kind and what was done.", ["route", "action", "kind"]
)
QUARANTINES = Counter(
    "memory_admin_quarantines", "Facts stored for review only (poisoning guard or external source).", ["route"]
)
SEARCH_SECONDS = Histogram(
    "memory_admin_search_seconds",
    "Ranked search (fact_search), seconds; caller `context` is the search inside a context block.",
    ["caller"],
    buckets=_LATENCY,
)
CONTEXT_SECONDS = Histogram("memory_admin_context_seconds", "Context block assembly, seconds.", buckets=_LATENCY)
CONTEXT_TOKENS = Histogram(
    "memory_admin_context_tokens",
    "Tokens of each context block served.",
    buckets=(100, 250, 500, 1000, 2000, 4000, 8000, 16000, 32000),
)
EMBEDDING_SECONDS = Histogram(
    "memory_admin_embedding_seconds", "One embedding call (a text or a batch), seconds.", ["call"], buckets=_LATENCY
)
BATCHES = Counter(
    "memory_admin_extraction_batches",
    "Extraction batch runs by result (done, failed, retry = pending again, lost, not_claimed).",
    ["status"],
)
BATCH_LAG = Histogram(
    "memory_admin_extraction_lag_seconds",
    "From a batch's first message received to the batch done (includes the debounce window).",
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
TASKS = Counter(
    "memory_admin_tasks",
    "Celery tasks finished by the workers, by task name and state (SUCCESS, FAILURE, RETRY, ...): deliveries.",
    ["task", "state"],
)
LLM_CALLS = Counter(
    "memory_admin_llm_calls", "Model calls by tenant, layer, model and success.", ["tenant", "layer", "model", "ok"]
)
LLM_TOKENS = Counter(
    "memory_admin_llm_tokens", "Model tokens by tenant, layer, model and type.", ["tenant", "layer", "model", "type"]
)
LLM_COST = Counter(
    "memory_admin_llm_cost_usd", "Model cost in USD by tenant, layer and model.", ["tenant", "layer", "model"]
)


# --- Recording hooks (one line at the point where each event happens) ----------------------------------


def observe_writes(write: Callable) -> Callable:
    """Decorator for `fact_write` / `fact_write_many`: counts each outcome (a Blocked refusal too) and
    logs it with the fact's id (the request id comes with the log record)."""

    @functools.wraps(write)
    def wrapper(*args, **kwargs):
        route = kwargs.get("route", "fact")
        try:
            result = write(*args, **kwargs)
        except Blocked as exc:
            _write_outcome(route, "blocked", None, exc.extra.get("block_id"))
            raise
        for item in result if isinstance(result, list) else [result]:
            _write_outcome(route, item.outcome, item.fact.pk if item.fact else None, item.block_id)
        return result

    return wrapper


def _write_outcome(route: str, outcome: str, fact_id: object | None, block_id: str | None) -> None:
    FACT_WRITES.labels(route, outcome).inc()
    if outcome == "quarantined":
        QUARANTINES.labels(route).inc()
    log.info(
        "fact write: %s",
        outcome,
        extra={"route": route, "outcome": outcome, "fact_id": str(fact_id) if fact_id else None, "block_id": block_id},
    )


def pii_found(route: str, action: str, kinds: list[str]) -> None:
    for kind in kinds:
        PII_BLOCKS.labels(route, action, kind).inc()


def timed(histogram: Histogram) -> Callable[[Callable], Callable]:
    """Decorator: the call's duration into `histogram`."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with histogram.time():
                return fn(*args, **kwargs)

        return wrapper

    return decorate


_in_context: ContextVar[bool] = ContextVar("metrics_in_context", default=False)


def observe_search(search: Callable) -> Callable:
    """Decorator for `fact_search`: its duration, labelled by whether a context block asked."""

    @functools.wraps(search)
    def wrapper(*args, **kwargs):
        with SEARCH_SECONDS.labels("context" if _in_context.get() else "search").time():
            return search(*args, **kwargs)

    return wrapper


def observe_context(build: Callable) -> Callable:
    """Decorator for `context_block`: its duration and the tokens of the block it returns."""

    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        token = _in_context.set(True)
        try:
            block = build(*args, **kwargs)
        finally:
            _in_context.reset(token)
        CONTEXT_SECONDS.observe(time.perf_counter() - started)
        CONTEXT_TOKENS.observe(block["tokens"])
        return block

    return wrapper


def observe_batch(run: Callable) -> Callable:
    """Decorator for `run_batch(batch_id)`: the run's result, and the lag of a batch that got done."""

    @functools.wraps(run)
    def wrapper(batch_id: int, *args, **kwargs):
        outcome = run(batch_id, *args, **kwargs)
        BATCHES.labels(outcome.status).inc()
        if outcome.status == "done":
            _observe_lag(batch_id)
        return outcome

    return wrapper


def _observe_lag(batch_id: int) -> None:
    from django.db.models import Min

    # Inside: memory_admin/__init__ loads this module (through celery) before Django's apps.
    from memory_admin.models import ExtractionBatch

    row = (
        ExtractionBatch.objects.filter(pk=batch_id)
        .annotate(first=Min("messages__received_at"))
        .values("first", "finished_at")
        .first()
    )
    if row and row["first"] and row["finished_at"]:
        BATCH_LAG.observe(max(0.0, (row["finished_at"] - row["first"]).total_seconds()))


def llm_call(
    *,
    tenant_id: int,
    layer: str,
    model: str,
    ok: bool,
    prompt_tokens: int,
    completion_tokens: int,
    cost_usd: Decimal | float,
) -> None:
    tenant = str(tenant_id)
    LLM_CALLS.labels(tenant, layer, model, "true" if ok else "false").inc()
    LLM_TOKENS.labels(tenant, layer, model, "prompt").inc(prompt_tokens)
    LLM_TOKENS.labels(tenant, layer, model, "completion").inc(completion_tokens)
    LLM_COST.labels(tenant, layer, model).inc(float(cost_usd))


# --- Scrape-time gauges from the database ---------------------------------------------------------------


class DatabaseCollector:
    """Review-queue depth and age per tenant, open extraction batches and the oldest one's age, and the
    age of beat's last sweep and of the last worker heartbeat (the rows /health/ready reads)."""

    def collect(self):
        up = GaugeMetricFamily("memory_admin_metrics_database_up", "1 when the scrape could read the database.")
        try:
            families = list(self._families())
        except Exception:  # noqa: BLE001 - a scrape during an outage still answers, with up = 0
            logging.getLogger(__name__).warning("metrics: the database could not be read", exc_info=True)
            families = []
        up.add_metric([], 1 if families else 0)
        yield up
        yield from families

    def _families(self):
        from django.db.models import Count, Min
        from django.utils import timezone

        # Inside: memory_admin/__init__ loads this module (through celery) before Django's apps.
        from memory_admin.models import Contradiction, EntityMergeReview, ExtractionBatch, Fact

        now = timezone.now()
        depth = GaugeMetricFamily(
            "memory_admin_review_queue_depth", "Items waiting for a reviewer.", labels=["tenant", "queue"]
        )
        oldest = GaugeMetricFamily(
            "memory_admin_review_queue_oldest_seconds", "Age of the oldest waiting item.", labels=["tenant", "queue"]
        )
        queues = {
            "contradictions": Contradiction.objects.filter(status=Contradiction.Status.OPEN),
            "quarantine": Fact.objects.filter(status=Fact.Status.QUARANTINED),
            "entity_merges": EntityMergeReview.objects.filter(status=EntityMergeReview.Status.OPEN),
        }
        for queue, qs in queues.items():
            for row in qs.values("tenant_id").annotate(n=Count("pk"), first=Min("created_at")).order_by():
                depth.add_metric([str(row["tenant_id"]), queue], row["n"])
                oldest.add_metric([str(row["tenant_id"]), queue], (now - row["first"]).total_seconds())
        yield depth
        yield oldest
        yield from self._batches(now, ExtractionBatch)
        yield from self._heartbeats()
        yield from self._queues()

    @staticmethod
    def _batches(now, batch_model):
        from django.db.models import Count, Min

        open_ = GaugeMetricFamily(
            "memory_admin_extraction_batches_open", "Batches waiting or running.", labels=["status"]
        )
        lag = GaugeMetricFamily(
            "memory_admin_extraction_oldest_open_seconds", "Age of the oldest batch waiting or running (0 when none)."
        )
        rows = {
            r["status"]: r
            for r in batch_model.objects.filter(status__in=["pending", "running"])
            .values("status")
            .annotate(n=Count("pk"), first=Min("created_at"))
            .order_by()
        }
        for status in ("pending", "running"):
            open_.add_metric([status], rows[status]["n"] if status in rows else 0)
        firsts = [r["first"] for r in rows.values()]
        lag.add_metric([], (now - min(firsts)).total_seconds() if firsts else 0.0)
        yield open_
        yield lag

    @staticmethod
    def _heartbeats():
        # Inside: memory_admin/__init__ loads this module (through celery) before Django's apps.
        from memory_admin.selectors.health import background_status

        status, _ = background_status()
        names = {
            "sweep": ("memory_admin_beat_sweep_age_seconds", "Seconds since beat's last completed sweep."),
            "worker": (
                "memory_admin_worker_heartbeat_age_seconds",
                "Seconds since a worker last ran a heartbeat task or started or finished any task.",
            ),
        }
        for component, (name, doc) in names.items():
            age = status.get(component, {}).get("age_seconds")
            if age is not None:  # never recorded on this database: no sample rather than a made-up one
                family = GaugeMetricFamily(name, doc)
                family.add_metric([], age)
                yield family

    @staticmethod
    def _queues():
        """The broker's queues (control, interactive, bulk): how many messages wait, and for how long
        the oldest has (0 when the queue is empty). No samples when the broker cannot be read."""
        # Inside: memory_admin/__init__ loads this module (through celery) before Django's apps.
        from memory_admin.selectors.health import queue_backlogs

        backlogs = queue_backlogs()
        if backlogs is None:
            return
        depth = GaugeMetricFamily("memory_admin_queue_depth", "Messages waiting in a broker queue.", labels=["queue"])
        oldest = GaugeMetricFamily(
            "memory_admin_queue_oldest_seconds",
            "How long the oldest message of a broker queue has waited (0 when empty).",
            labels=["queue"],
        )
        for queue in backlogs:
            depth.add_metric([queue.name], queue.depth)
            oldest.add_metric([queue.name], queue.oldest_age_seconds or 0.0)
        yield depth
        yield oldest


# --- The endpoint ---------------------------------------------------------------------------------------


def scrape_allowed(request: HttpRequest) -> bool:
    """METRICS_TOKEN as a bearer token when set; and the client's socket address in
    METRICS_ALLOWED_NETWORKS (never a forwarded header: it is the client's to write)."""
    from django.conf import settings

    if settings.METRICS_TOKEN:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {settings.METRICS_TOKEN}".encode()):
            return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(net, strict=False) for net in settings.METRICS_ALLOWED_NETWORKS)


def metrics_view(request: HttpRequest) -> HttpResponse:
    from django.http import JsonResponse

    if not scrape_allowed(request):
        # The answer of any unknown route: nothing says that something is here.
        return JsonResponse({"code": "not_found", "detail": "No such route."}, status=404)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


# --- Process lifecycle ----------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_multiproc_dir() -> int:
    """Remove the files of processes that no longer run (a server starting after a stop or a crash);
    the files of running processes (another server on this host) are kept. Returns how many went."""
    path = Path(config.get("PROMETHEUS_MULTIPROC_DIR"))
    path.mkdir(parents=True, exist_ok=True)
    removed = 0
    for file in path.glob("*.db"):
        pid = file.stem.rsplit("_", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            file.unlink(missing_ok=True)
            removed += 1
    return removed


def process_exited(pid: int) -> None:
    """A worker process ended (gunicorn `child_exit`, Celery `worker_process_shutdown`)."""
    multiprocess.mark_process_dead(pid)


def task_finished(task: object = None, state: str | None = None, **_kwargs: object) -> None:
    """Celery's task_postrun, in the process that ran the task (eager runs in tests are not counted)."""
    request = getattr(task, "request", None)
    if request is None or request.is_eager:
        return
    TASKS.labels(getattr(task, "name", "?"), state or "?").inc()


def connect_celery() -> None:
    from celery.signals import beat_init, task_postrun, worker_init, worker_process_shutdown

    task_postrun.connect(task_finished, weak=False, dispatch_uid="memory_admin.metrics.tasks")
    worker_init.connect(lambda **_: clean_multiproc_dir(), weak=False)
    beat_init.connect(lambda **_: clean_multiproc_dir(), weak=False)
    worker_process_shutdown.connect(lambda pid=None, **_: process_exited(pid or os.getpid()), weak=False)
