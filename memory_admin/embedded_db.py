"""Postgres for the project: the server named by DATABASE_URL, or an embedded one.

With no DATABASE_URL the project starts Postgres 16 with pgvector from the `pgserver` wheel, keeps its
data under the git-ignored `.data/` folder (or MEMORY_ADMIN_DATA_DIR) and talks to it over a unix
socket. The server outlives the process that started it, so the web server, the Celery worker, beat and
the test runner all share one instance.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

EMBEDDED_DB_NAME = "memory_admin"


def data_dir(base_dir: Path) -> Path:
    path = Path(os.environ.get("MEMORY_ADMIN_DATA_DIR") or base_dir / ".data")
    path.mkdir(parents=True, exist_ok=True)
    return path


def embedded_server(base_dir: Path):
    """Start (or join) the embedded Postgres and return its pgserver handle."""
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    import pgserver

    return pgserver.get_server(data_dir(base_dir) / "pgdata", cleanup_mode=None)


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
        "CONN_MAX_AGE": int(os.environ.get("DB_CONN_MAX_AGE", "60")),
        "CONN_HEALTH_CHECKS": True,
    }
