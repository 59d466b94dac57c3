"""Postgres for the project: the server named by DATABASE_URL, or an embedded one.

With no DATABASE_URL the project starts Postgres 16 with pgvector from the `pgserver` wheel, keeps its
data under the git-ignored `.data/` folder (or MEMORY_ADMIN_DATA_DIR) and talks to it over a unix
socket. The server outlives the process that started it, so the web server, the Celery worker, beat and
the test runner all share one instance; `manage.py up` stops it on exit when it was the one that
started it (`stop_if_started_here`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

from memory_admin import config

EMBEDDED_DB_NAME = "memory_admin"


def data_dir(base_dir: Path) -> Path:
    path = Path(config.get("MEMORY_ADMIN_DATA_DIR") or base_dir / ".data")
    path.mkdir(parents=True, exist_ok=True)
    return path


def embedded_server(base_dir: Path):
    """Start (or join) the embedded Postgres and return its pgserver handle."""
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        import pgserver
    except ImportError as exc:  # its wheels stop at CPython 3.12 (pyproject.toml installs it only there)
        raise ImproperlyConfigured(
            "No DATABASE_URL is set and the embedded Postgres (the pgserver wheel) is not installed: it has "
            "no wheel for this Python. Set DATABASE_URL to a Postgres 16 with pgvector, or use Python 3.11-3.12."
        ) from exc

    pgdata = data_dir(base_dir) / "pgdata"
    fresh = not (pgdata / "PG_VERSION").exists()
    was_running = _running(pgdata)
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    _size_shared_buffers(server, pgdata, fresh)
    if not was_running:
        _started_here[pgdata] = server
    return server


# The embedded servers this process started (rather than joined): pgdata -> pgserver handle.
_started_here: dict[Path, object] = {}


def _running(pgdata: Path) -> bool:
    from pgserver.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (AssertionError, ValueError, OSError):
        return True  # postmaster.pid half written: somebody else is starting it right now
    return info is not None and info.is_running()


def stop_if_started_here() -> bool:
    """Stop (fast: open sessions are cut, nothing committed is lost) the embedded servers that this
    process started; one it found already running belongs to whoever started it. Returns whether it
    stopped one."""
    import pgserver

    stopped = False
    while _started_here:
        pgdata, server = _started_here.popitem()
        if not _running(pgdata):
            continue
        pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user, timeout=60)
        stopped = True
    return stopped


def shared_buffers_mb() -> int:
    """The embedded server's `shared_buffers`: EMBEDDED_PG_SHARED_BUFFERS_MB (0: Postgres's own default),
    else an eighth of the machine's memory between 128 MB and 1 GB. Postgres's default of 128 MB cannot
    hold the facts' HNSW index at a million facts (~200 MB); search and the context block there are about
    a third slower with it (bench/README.md, round 5)."""
    configured = _configured_mb()
    if configured is not None:
        return configured
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return max(128, min(1024, total // (8 * 1024 * 1024)))


def _configured_mb() -> int | None:
    """EMBEDDED_PG_SHARED_BUFFERS_MB: whole megabytes, 0 keeps Postgres's default; None when unset."""
    return config.get("EMBEDDED_PG_SHARED_BUFFERS_MB")


# The size this project last wrote into postgresql.auto.conf. A `shared_buffers` line there that differs
# from it was written by somebody else (an operator's ALTER SYSTEM) and is left alone, unless
# EMBEDDED_PG_SHARED_BUFFERS_MB asks for a size explicitly.
_OURS = "memory_admin.shared_buffers"


def _size_shared_buffers(server, pgdata: Path, fresh: bool) -> None:
    """Set `shared_buffers` (ALTER SYSTEM, kept in postgresql.auto.conf). A server this call created
    is restarted at once, before anybody else can have connected; a running server that was already
    there takes the size at its next start (restarting it would cut the connections of the processes
    sharing it)."""
    wanted = shared_buffers_mb()
    if wanted <= 0:
        return
    setting = f"'{wanted}MB'"
    try:
        current = _auto_conf_value(pgdata / "postgresql.auto.conf")
    except OSError:
        return
    if current == setting:
        return
    if current is not None and _configured_mb() is None and current != _read(pgdata / _OURS):
        return
    server.psql(f"ALTER SYSTEM SET shared_buffers = {setting};")
    (pgdata / _OURS).write_text(setting)
    if fresh:
        import pgserver

        restart = ["-w", "-l", str(pgdata / "log"), "restart", "-m", "fast"]
        pgserver.pg_ctl(restart, pgdata=pgdata, user=server.system_user, timeout=60)


def _auto_conf_value(path: Path) -> str | None:
    value = None
    for line in path.read_text().splitlines():
        name, _, rest = line.partition("=")
        if name.strip() == "shared_buffers":
            value = rest.strip()
    return value


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def embedded_database_url(base_dir: Path) -> str:
    server = embedded_server(base_dir)
    exists = server.psql(f"select 1 from pg_database where datname = '{EMBEDDED_DB_NAME}';")
    if "(1 row)" not in exists:
        server.psql(f"create database {EMBEDDED_DB_NAME};")
    return server.get_uri(EMBEDDED_DB_NAME)


def database_from_url(url: str) -> dict:
    """Turn a postgres:// URL (TCP or `?host=/socket/dir`) into Django's DATABASES entry."""
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ValueError(f"DATABASE_URL must be a postgres URL, got scheme {parsed.scheme!r}")
    query = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
    host = query.pop("host", None) or parsed.hostname or ""
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": host,
        "PORT": str(parsed.port or ""),
        "OPTIONS": query,
        "CONN_MAX_AGE": config.get("DB_CONN_MAX_AGE"),
        "CONN_HEALTH_CHECKS": True,
    }
