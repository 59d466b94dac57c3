"""A test run stopped in the middle does not break the next one, though the test database is reused.

pyproject's addopts pass `--reuse-db`. A transactional test commits its rows and empties the tables at
teardown; a run killed before that teardown used to leave the rows, and the next run failed by the
hundred. This runs pytest twice on a test database of its own: the first run commits a tenant and dies
inside the test; the second, reusing the database, must start from empty tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from memory_admin.models import Tenant

ROOT = Path(__file__).resolve().parent.parent
PROBE_DB = "test_memory_admin_reuse_probe"


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(os.environ.get("REUSE_PROBE") != "die", reason="run by test_a_killed_run_leaves_nothing")
def test_probe_commits_a_tenant_and_dies():
    from memory_admin.services.tenants import tenant_create

    tenant_create(slug="left-by-a-killed-run")
    os._exit(3)  # as a kill would: no teardown, no flush


@pytest.mark.skipif(os.environ.get("REUSE_PROBE") != "check", reason="run by test_a_killed_run_leaves_nothing")
def test_probe_sees_empty_tables(db):
    assert not Tenant.objects.filter(slug="left-by-a-killed-run").exists()
    assert Tenant.objects.count() == 0


def _run(probe: str, *options: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "REUSE_PROBE": probe, "TEST_DB_NAME": PROBE_DB}
    return subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "--all", *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_killed_run_leaves_nothing_for_the_next_run():
    try:
        died = _run("die", "--create-db", "-k", "dies")
        assert died.returncode == 3, died.stdout + died.stderr
        checked = _run("check", "-k", "empty_tables")  # --reuse-db, from addopts
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "1 passed" in checked.stdout
    finally:
        params = connection.get_connection_params()
        admin = {k: v for k, v in params.items() if k in ("host", "port", "user", "password")}
        with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{PROBE_DB}" WITH (FORCE)')
