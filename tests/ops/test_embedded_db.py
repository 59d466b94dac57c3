"""The embedded Postgres is sized for the index it serves: `shared_buffers` is set when the server is
created (and applied at once, by a restart nobody else can be connected to yet), kept across restarts,
and a server that was already running is never restarted under the processes sharing it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pgserver
import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "from pathlib import Path\n"
    "from memory_admin.embedded_db import embedded_server\n"
    "server = embedded_server(Path('.'))\n"
    "pid = (Path(server.pgdata) / 'postmaster.pid').read_text().split()[0]\n"
    "print(server.psql('SHOW shared_buffers;').split()[2], pid)\n"
)


def probe(data: Path, mb: str) -> tuple[str, int]:
    """A new process joins (or creates) the embedded server under `data`: (shared_buffers, postmaster pid)."""
    env = {**os.environ, "MEMORY_ADMIN_DATA_DIR": str(data), "EMBEDDED_PG_SHARED_BUFFERS_MB": mb}
    env.pop("DATABASE_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    value, pid = out.stdout.split()
    return value, int(pid)


@pytest.fixture
def data(tmp_path):
    yield tmp_path
    pgdata = tmp_path / "pgdata"
    if (pgdata / "postmaster.pid").exists():
        user = "pgserver" if os.geteuid() == 0 else None
        pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)


def test_a_new_embedded_server_starts_with_its_shared_buffers_and_keeps_them(data):
    value, pid = probe(data, "256")
    assert value == "256MB"
    assert "shared_buffers = '256MB'" in (data / "pgdata" / "postgresql.auto.conf").read_text()
    # Another process joining the running server changes nothing and restarts nothing.
    assert probe(data, "256") == ("256MB", pid)


@pytest.mark.slow
def test_a_running_server_is_never_restarted_to_resize_it(data):
    _, pid = probe(data, "256")
    # Asked for more while it runs: recorded for its next start, the processes using it keep their server.
    value, same = probe(data, "384")
    assert (value, same) == ("256MB", pid)
    assert "shared_buffers = '384MB'" in (data / "pgdata" / "postgresql.auto.conf").read_text()
    user = "pgserver" if os.geteuid() == 0 else None
    pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data / "pgdata", user=user, timeout=60)
    value, restarted = probe(data, "384")
    assert value == "384MB" and restarted != pid


def test_zero_leaves_postgres_default(data):
    assert probe(data, "0")[0] == "128MB"


@pytest.mark.slow
def test_an_operators_own_setting_is_kept_unless_the_variable_asks_for_a_size(data):
    probe(data, "256")
    pgdata = data / "pgdata"
    user = "pgserver" if os.geteuid() == 0 else None
    # The operator sizes the server by hand; the project's own default must not undo it at the next start.
    pgserver.get_server(pgdata, cleanup_mode=None).psql("ALTER SYSTEM SET shared_buffers = '200MB';")
    pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
    assert probe(data, "")[0] == "200MB"
    assert "shared_buffers = '200MB'" in (pgdata / "postgresql.auto.conf").read_text()
    # An explicit EMBEDDED_PG_SHARED_BUFFERS_MB is the operator's word too, and the newer one wins.
    probe(data, "320")
    pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
    assert probe(data, "320")[0] == "320MB"


@pytest.mark.parametrize("value", ["12x", "-5", "1.5", "½", "１２８", "256MB"])
def test_a_size_that_is_not_a_whole_number_of_megabytes_is_refused_by_name(monkeypatch, value):
    from django.core.exceptions import ImproperlyConfigured

    from memory_admin.embedded_db import shared_buffers_mb

    monkeypatch.setenv("EMBEDDED_PG_SHARED_BUFFERS_MB", value)
    with pytest.raises(ImproperlyConfigured, match="EMBEDDED_PG_SHARED_BUFFERS_MB=.*: a whole number, 0 or more"):
        shared_buffers_mb()


def test_without_database_url_or_the_pgserver_wheel_the_start_says_what_to_set(tmp_path):
    """pgserver has no wheel for CPython 3.13 (pyproject.toml installs it on 3.11-3.12 only): there, a start
    with no DATABASE_URL stops at the settings with what to do, not with a ModuleNotFoundError."""
    script = "import sys; sys.modules['pgserver'] = None\nimport memory_admin.settings\n"
    env = {**os.environ, "MEMORY_ADMIN_DATA_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured: No DATABASE_URL is set and the embedded Postgres" in done.stderr
    assert "Set DATABASE_URL to a Postgres 16 with pgvector" in done.stderr
