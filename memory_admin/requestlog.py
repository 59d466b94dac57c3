"""Request ids and JSON logs: one id follows a request into the Celery tasks it sends, the extraction
batch its messages end up in, and the log lines that name the facts that batch produced.

- `RequestIdMiddleware` keeps a safe incoming `X-Request-ID` (8-64 characters of letters, digits and
  `. _ : -`, in which the secret/PII scan finds nothing) or makes one, answers it in the same header,
  and binds it for the request's log lines (and its trace span, when tracing is on).
- Messages store the id of the request that posted them (`Message.request_id`); the sweeper copies the
  ids of a batch's messages onto the batch (`ExtractionBatch.request_ids`), and `batch_request_ids`
  binds them while the batch runs, so the worker's lines (the facts written, the batch done) carry
  them. A task sent during a request carries the id in a message header (`request_id`).
- Every line is one JSON object (`JsonFormatter`): time, level, logger, message, request_id, process
  and whatever ids the call passed as `extra`. Messages are made safe by `logsafe` when created;
  `extra` fields must hold ids only.
"""

from __future__ import annotations

import functools
import logging
import re
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar, Token

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from memory_admin import tracing
from memory_admin.logsafe import chain_record_factory, findings_outside_ids, mask_path, sanitize

HEADER = "X-Request-ID"
_current: ContextVar[str] = ContextVar("request_id", default="")
_SAFE = re.compile(r"^[A-Za-z0-9._:-]{8,64}$")
log = logging.getLogger("memory_admin.request")


def current() -> str:
    """The request id bound to this request, task or batch ("" outside of one)."""
    return _current.get()


def bind(request_id: str) -> Token:
    """Bind `request_id` to the current context; returns the token `unbind` takes."""
    return _current.set(request_id or "")


def unbind(token: Token) -> None:
    _current.reset(token)


def accept(incoming: str | None) -> str:
    """The client's request id when it is safe to log and store as given, else a new one."""
    if incoming and _SAFE.match(incoming):
        if not findings_outside_ids(incoming):
            return incoming
    return uuid.uuid4().hex


def _stamp(record: logging.LogRecord) -> None:
    record.request_id = _current.get() or "-"


def install() -> None:
    """Every record gets the bound request id when it is created, whatever handler sees it."""
    chain_record_factory("request_id", _stamp)


class RequestIdFilter(logging.Filter):
    """Puts the bound request id on every record (a record given one in `extra` keeps its own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", "-") == "-":  # created before `install`, or not bound then
            record.request_id = _current.get() or "-"
        return True


# Beat's heartbeat tasks (memory_admin.celery: the extraction sweep and message index every 2 s, the
# episode, entity and knowledge sweeps): Celery logs every send, receipt and success of each at INFO, three
# lines a task, ~3 lines a second from an idle installation, in which a real event is lost. Those lines
# are kept for LOG_LEVEL=DEBUG; a heartbeat's failure, retry or warning is logged like any other task's.
_heartbeats: re.Pattern | None = None
_CELERY_CHATTER = frozenset({"celery.beat", "celery.worker.strategy", "celery.app.trace"})


def quiet_heartbeats(tasks: frozenset[str]) -> None:
    global _heartbeats
    names = "(?:" + "|".join(map(re.escape, sorted(tasks))) + ")"
    # Beat's send, the worker's receipt, the task's success: nothing else (a retry, a failure) matches.
    _heartbeats = re.compile(
        rf"Scheduler: Sending due task \S+ \({names}\)$|Task {names}\[[^\]]*\] (?:received$|succeeded in )"
    )


class HeartbeatFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _heartbeats is None or record.levelno != logging.INFO or record.name not in _CELERY_CHATTER:
            return True
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            return True
        return not _heartbeats.match(record.getMessage())


class JsonFormatter(_JsonFormatter):
    def __init__(self, **kwargs):
        kwargs.setdefault("rename_fields", {"asctime": "time", "levelname": "level", "name": "logger"})
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(process)d", **kwargs)

    def add_fields(self, log_data, record, message_dict) -> None:
        super().add_fields(log_data, record, message_dict)
        # `logsafe` cleans the message; a library's `extra` (Django puts the request in, whose repr
        # shows the path) is cleaned here. Our own extras are ids and numbers.
        for key, value in log_data.items():
            if key == "request" and hasattr(value, "method"):
                log_data[key] = f"{value.method} {_route(value)}"
            elif not isinstance(value, int | float | bool | list | type(None)) and key != "message":
                log_data[key] = sanitize(str(value))


def _route(request) -> str:
    """The URL pattern that answered (`api/v1/users/<user_id>/facts`), never the values in it."""
    match = getattr(request, "resolver_match", None)
    if match is not None and match.route:
        return match.route

    return mask_path(request.path)


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = accept(request.META.get(_META_KEY))  # not request.headers: built from all of META
        request.request_id = request_id
        token = _current.set(request_id)
        if tracing.enabled_here():
            _tag_span(request_id)
        started = time.monotonic()
        try:
            response = self.get_response(request)
            response[HEADER] = request_id
            if log.isEnabledFor(logging.INFO):  # LOG_LEVEL=INFO; the line's parts cost nothing otherwise
                took_ms = round(1000 * (time.monotonic() - started), 1)
                log.info(
                    "%s %s %s",
                    request.method,
                    _route(request),
                    response.status_code,
                    extra={"status": response.status_code, "duration_ms": took_ms},
                )
            return response
        finally:
            _current.reset(token)


_META_KEY = "HTTP_" + HEADER.upper().replace("-", "_")


def _tag_span(request_id: str) -> None:
    from opentelemetry import trace

    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute("memory_admin.request_id", request_id)


def batch_request_ids(run: Callable) -> Callable:
    """Decorator for `run_batch(batch_id)`: binds the ids of the requests whose messages the batch
    holds while it runs (comma-separated when several requests fed one batch)."""

    @functools.wraps(run)
    def wrapper(batch_id: int, *args, **kwargs):
        # Inside: settings load this module (LOGGING) before Django's apps are ready.
        from memory_admin.models import ExtractionBatch

        ids = ExtractionBatch.objects.filter(pk=batch_id).values_list("request_ids", flat=True).first() or []
        token = _current.set(",".join(ids))
        try:
            return run(batch_id, *args, **kwargs)
        finally:
            _current.reset(token)

    return wrapper


# --- Celery ------------------------------------------------------------------------------------------


def _publish_with_request_id(headers=None, **_kwargs) -> None:
    if headers is not None and _current.get():
        headers.setdefault("request_id", _current.get())


_task_tokens: dict[str, object] = {}


def _task_started(task_id=None, task=None, **_kwargs) -> None:
    request_id = getattr(task.request, "request_id", None) if task is not None else None
    _task_tokens[task_id] = _current.set(request_id or "")


def _task_finished(task_id=None, **_kwargs) -> None:
    token = _task_tokens.pop(task_id, None)
    if token is not None:
        _current.reset(token)


def _format_celery_handlers(logger=None, **_kwargs) -> None:
    """Celery installs its own handlers on the root and task loggers: give them our format and ids."""
    from django.conf import settings

    for handler in getattr(logger, "handlers", []):
        handler.addFilter(RequestIdFilter())
        handler.addFilter(HeartbeatFilter())
        if settings.LOG_FORMAT == "json":
            handler.setFormatter(JsonFormatter())
        else:
            handler.setFormatter(logging.Formatter(settings.LOGGING["formatters"]["text"]["format"]))


def connect_celery() -> None:
    from celery.signals import (
        after_setup_logger,
        after_setup_task_logger,
        before_task_publish,
        task_postrun,
        task_prerun,
    )

    before_task_publish.connect(_publish_with_request_id, weak=False)
    task_prerun.connect(_task_started, weak=False)
    task_postrun.connect(_task_finished, weak=False)
    after_setup_logger.connect(_format_celery_handlers, weak=False)
    after_setup_task_logger.connect(_format_celery_handlers, weak=False)
