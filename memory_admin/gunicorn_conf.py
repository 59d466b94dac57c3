"""gunicorn settings for `manage.py up` and production (`gunicorn -c python:memory_admin.gunicorn_conf`)."""

import os

from gunicorn.glogging import Logger as _GunicornLogger

# ONNX Runtime's telemetry store is one SQLite file per user that every process using it opens, shared
# by every instance on the host; set before a worker loads the runtime.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_WORKERS", "2"))
threads = int(os.environ.get("WEB_THREADS", "4"))
worker_class = "gthread"
timeout = 60
accesslog = os.environ.get("ACCESS_LOG") or None
if os.environ.get("LOG_FORMAT", "json").strip().lower() != "text":
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

    from memory_admin.embedded_db import data_dir

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


def post_worker_init(worker):
    # Load the embedding model and the tokenizer before the first request, not during it.
    from memory_admin.embedding import embed_one
    from memory_admin.tokens import count_tokens

    embed_one("warm-up")
    count_tokens("warm-up")
    # The secret scan's second detector (detect-secrets' plugins) loads on first use: 0.5-2.5 s that
    # would otherwise fall on a worker's first write, outside its screening budget.
    from memory_admin.services.pii import find

    find("warm-up")
    # The broker's transport too (on embedded defaults extraction/broker.py),
    # so that a worker's first write does not pay for it when it sends its entity drawing. Not connected.
    from memory_admin.celery import app

    with app.connection_for_write() as connection:
        connection.transport  # noqa: B018 - creating it imports the transport's module


def on_starting(server):
    # Metric files of processes gone since the last run (metrics.py); those of running ones are kept.
    from memory_admin import metrics

    metrics.clean_multiproc_dir()


def child_exit(server, worker):
    from memory_admin import metrics

    metrics.process_exited(worker.pid)
