"""gunicorn settings for `manage.py up` and production (`gunicorn -c python:memory_admin.gunicorn_conf`)."""

import gc
import os

from gunicorn.glogging import Logger as _GunicornLogger

from memory_admin import config as _config  # not `config`: gunicorn takes every name here for a setting
from memory_admin import metrics
from memory_admin.celery import app
from memory_admin.embedded_db import data_dir
from memory_admin.tokens import count_tokens

# ONNX Runtime's telemetry store is one SQLite file per user that every process using it opens, shared
# by every instance on the host; set before a worker loads the runtime.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
# numpy's OpenBLAS starts a thread per extra core when it is imported; here numpy only takes dot products
# of single vectors, and the master must hold no thread when it forks the workers (`load_shared`).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
bind = _config.get("BIND")
workers = _config.get("WEB_WORKERS")
threads = _config.get("WEB_THREADS")
# gthread, with a request too large for gunicorn to read answered in the API's JSON (gunicorn_worker).
worker_class = "memory_admin.gunicorn_worker.JsonErrorThreadWorker"
# The application, the embedding model, the token counter and the secret scan's rules are loaded once
# in the master and the workers forked from it share those pages (copy on write) instead of each
# loading its own: ~170 MB a worker before, see `load_shared`. WEB_PRELOAD=0 loads them per worker
# (gunicorn's default), e.g. to reload code with HUP.
preload_app = _config.get("WEB_PRELOAD")
timeout = 60
# The longest request line a valid search or context asks for: a query of MAX_QUERY_CHARS characters
# that all need escaping (%XX) is ~6,000 bytes, over gunicorn's default 4,094, which answered such a
# query with an HTML 414 instead of the API's JSON. 8,190 is the most gunicorn allows short of no limit;
# a longer line (a long query in a non-Latin script) gets a JSON 414, `request_line_too_long`.
limit_request_line = 8190
accesslog = _config.get("ACCESS_LOG")
if _config.get("LOG_FORMAT") != "text":
    # gunicorn's own lines (start, workers booted or lost) in the same JSON as the application's.
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "memory_admin.requestlog.JsonFormatter"}},
        "handlers": {
            "error_console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"},
            "console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": False},
        },
    }
wsgi_app = "memory_admin.wsgi:application"


def _control_socket() -> str | None:
    """gunicorn's control socket (`gunicornc`) in this installation's data directory, so two instances
    on one host never share one (gunicorn's default is one per user: $XDG_RUNTIME_DIR/gunicorn.ctl or
    ~/.gunicorn/gunicorn.ctl). None (no socket) when the path is too long for a unix socket."""
    from pathlib import Path

    path = data_dir(Path(__file__).resolve().parent.parent) / "gunicorn.ctl"
    return str(path) if len(str(path).encode()) < 100 else None


_socket = _control_socket()
if _socket:
    control_socket = _socket
else:
    control_socket_disable = True


class Logger(_GunicornLogger):
    """gunicorn's logger, whose access line is written only when ACCESS_LOG asks for one. gunicorn
    turns its access log on whenever `logconfig_dict` is set (above, for JSON), which wrote one more line
    per request at every LOG_LEVEL and cost ~0.3-0.5 ms of CPU per request to format; the application's
    own request line (`memory_admin.request`, LOG_LEVEL=INFO) already names each request, with its id."""

    def access(self, resp, req, environ, request_time) -> None:
        if self.cfg.accesslog:
            super().access(resp, req, environ, request_time)


logger_class = Logger


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux: nothing to count
        return 1


def load_shared() -> None:
    """In the master, after the application is loaded and before the first fork: what every worker
    would otherwise build for itself. Forking is only safe if none of it started a thread (a thread's
    lock held at fork stays held in the child): onnxruntime on one intra-op thread runs on the
    caller's thread and starts none, the tokenizers' parallelism is off (TOKENIZERS_PARALLELISM),
    tiktoken and the scan's rules are data. tests/ops/test_web_preload.py holds this true. Nothing
    here runs the model: its scratch memory (onnxruntime's arena) is each worker's own, so it is
    allocated after the fork (`post_worker_init`)."""
    from django.conf import settings
    from django.urls import get_resolver

    # Inside the hook: the model's and the scan's modules load after the environment above is set.
    from memory_admin.embedding import get_embedder
    from memory_admin.services.pii import find  # inside the hook, as the line above

    before = _threads()
    get_resolver().url_patterns  # noqa: B018 - imports every URL, view and API module
    if settings.EMBEDDER == "onnx" and _config.get("EMBED_THREADS") == 1:
        get_embedder()  # more intra-op threads are a pool of threads: each worker builds its own then
    count_tokens("warm-up")
    find("warm-up")
    started = _threads() - before
    if started > 0:
        raise RuntimeError(f"loading the shared state started {started} thread(s): not safe to fork; WEB_PRELOAD=0")
    # No database connection may be inherited (two processes on one socket); none is opened above.
    from django.db import connections

    connections.close_all()
    # Objects that exist now are never collected: the workers' collector does not write to their pages.
    gc.freeze()


def when_ready(server):
    if server.cfg.preload_app:
        load_shared()


def post_worker_init(worker):
    # Load the embedding model and the tokenizer before the first request, not during it (with
    # preload_app the model is built already: this runs it once, in the worker).
    # Inside the hook, as in load_shared: loaded after the environment above is set.
    from memory_admin.embedding import embed_one

    embed_one("warm-up")
    count_tokens("warm-up")
    # The secret scan's second detector (detect-secrets' plugins) loads on first use: 0.5-2.5 s that
    # would otherwise fall on a worker's first write, outside its screening budget.
    from memory_admin.services.pii import find  # inside the hook, as above

    find("warm-up")
    # The broker's transport too (on embedded defaults extraction/broker.py),
    # so that a worker's first write does not pay for it when it sends its entity drawing. Not connected.

    with app.connection_for_write() as connection:
        connection.transport  # noqa: B018 - creating it imports the transport's module


def on_starting(server):
    # Metric files of processes gone since the last run (metrics.py); those of running ones are kept.

    metrics.clean_multiproc_dir()


def child_exit(server, worker):
    metrics.process_exited(worker.pid)
