"""Timing probes for `search_profile.py`, installed in a gunicorn worker by `_probe_conf.py`.

Bench-only: wraps gunicorn's request handling, the WSGI application, every middleware, Django's view
resolution, ninja's operation and the parts of the search route in functions that note (label, wall
clock, thread CPU clock) on a per-thread list. When gunicorn has written the response, the request's
marks go as one JSON line to `$PROBE_DIR/<pid>.jsonl`. `time.perf_counter` is CLOCK_MONOTONIC on Linux,
so the client's marks (another process) line up with the server's.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time

_local = threading.local()


def mark(label: str) -> None:
    marks = getattr(_local, "marks", None)
    if marks is not None:
        marks.append((label, time.perf_counter(), time.thread_time()))


class _HelperMarks:
    """The marks of a helper thread working for a request (the query embedded ahead), put on that
    request's list: labelled `helper:`, without a CPU time (another thread's clock)."""

    def __init__(self, marks: list) -> None:
        self._marks = marks

    def append(self, entry: tuple) -> None:
        label, wall, _cpu = entry
        self._marks.append((f"helper: {label}", wall, None))


def _wrap(owner, name: str, label: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        mark(f"{label}>")
        try:
            return original(*args, **kwargs)
        finally:
            mark(f"<{label}")

    setattr(owner, name, wrapper)


def install(worker) -> None:
    from django.core.handlers.base import BaseHandler
    from django.utils.deprecation import MiddlewareMixin
    from gunicorn.workers import gthread
    from ninja.operation import Operation

    from memory_admin import embeddings, middleware, requestlog
    from memory_admin.api import BearerKey, retrieval
    from memory_admin.api import api as ninja_api
    from memory_admin.retrieval import query, search

    out = open(os.path.join(os.environ["PROBE_DIR"], f"{os.getpid()}.jsonl"), "a", buffering=1)  # noqa: SIM115
    original_handle = gthread.ThreadWorker.handle

    def handle(self, conn):
        _local.marks = [("handle", time.perf_counter(), time.thread_time())]
        try:
            return original_handle(self, conn)
        finally:
            marks, _local.marks = _local.marks, None
            if len(marks) > 2:
                out.write(json.dumps({"rid": getattr(_local, "rid", ""), "marks": marks}) + "\n")

    gthread.ThreadWorker.handle = handle
    _wrap(gthread.ThreadWorker, "handle_request", "gunicorn.handle_request")

    app = worker.wsgi

    def wsgi(environ, start_response):
        _local.rid = environ.get("HTTP_X_REQUEST_ID", "")
        mark("wsgi>")
        try:
            return app(environ, start_response)
        finally:
            mark("<wsgi")

    worker.wsgi = wsgi
    _wrap(MiddlewareMixin, "__call__", "mixin-middleware")
    for cls in (
        requestlog.RequestIdMiddleware,
        middleware.DatabaseUnavailableMiddleware,
        middleware.ContentSecurityPolicyMiddleware,
    ):
        _wrap(cls, "__call__", cls.__name__)
    _wrap(BaseHandler, "resolve_request", "django.resolve")
    _wrap(BaseHandler, "_get_response", "django._get_response")
    _wrap(Operation, "run", "ninja.run")
    _wrap(Operation, "_run_authentication", "ninja.auth")
    _wrap(Operation, "_get_values", "ninja.params")
    _wrap(BearerKey, "authenticate", "key+rate SQL")
    _wrap(retrieval, "memory_user_for", "user SQL")
    _wrap(retrieval, "fact_search", "fact_search")
    _wrap(query, "embed_query", "embed_query")
    _wrap(query, "name_spans", "name_spans")
    _wrap(search, "candidates", "candidates SQL")
    _wrap(search, "score", "score")
    _wrap(search, "_facts_by_id", "facts SQL")
    if hasattr(search, "_facts_carried"):  # the facts built from the candidate rows (no statement)
        _wrap(search, "_facts_carried", "facts from rows")
    _wrap(ninja_api, "create_response", "render")
    from memory_admin.services import access_counts, facts

    _wrap(facts, "record_access", "record_access")
    _wrap(access_counts, "record_usage", "record_usage")
    embedder = embeddings.get_embedder()
    _wrap(embedder, "embed", "engine.embed")
    if hasattr(embedder, "embed_pair"):
        _wrap(embedder, "embed_pair", "engine.embed_pair")
    _wrap(requestlog.log, "info", "log line")
    from django.http import response as django_response
    from gunicorn.http import wsgi as gunicorn_wsgi

    _wrap(gunicorn_wsgi.Response, "write", "gunicorn.write")
    _wrap(gunicorn_wsgi.Response, "close", "gunicorn.close")
    _wrap(django_response.HttpResponseBase, "close", "django response.close (request_finished)")
    _wrap(type(worker.log), "access", "gunicorn.access_log")
