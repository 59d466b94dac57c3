"""Fixtures: every test runs on the real embedded Postgres (pgvector) through Django's test database."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from django.db import connection
from django.test import Client

from memory_admin.services.keys import api_key_create
from memory_admin.services.tenants import tenant_create

_counter = itertools.count(1)

# The fast inner loop: a bare `pytest` leaves out the tests that start processes or a browser. `--all`
# (what .ci/run and the README's test command pass) runs them too, and so does any `-m` expression, so
# `pytest -m slow` still selects them.
_LEFT_OUT_BY_DEFAULT = ("slow", "browser", "scaleout")


def pytest_addoption(parser):
    parser.addoption(
        "--all",
        action="store_true",
        default=False,
        help="also run the tests marked " + ", ".join(_LEFT_OUT_BY_DEFAULT) + " (left out by default)",
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--all") or config.option.markexpr:
        return
    kept, left_out = [], []
    for item in items:
        (left_out if any(item.get_closest_marker(m) for m in _LEFT_OUT_BY_DEFAULT) else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


def pytest_report_header(config):
    if not (config.getoption("--all") or config.option.markexpr):
        return f"fast loop: tests marked {', '.join(_LEFT_OUT_BY_DEFAULT)} are left out (--all runs everything)"
    return None


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database as a fresh one would be, even when it is reused (`--reuse-db` is in addopts).

    A transactional test empties the tables at its teardown; a run stopped in the middle of one (Ctrl-C,
    a killed CI job) leaves its rows behind, and the next run would then fail by the hundred on unique
    keys and counts. So a reused database holding rows beyond what migrating it writes is emptied the way
    that teardown does (Django's flush), once, before the first test."""
    from django.apps import apps
    from django.core.management import call_command

    written_by_migrating = {"django_migrations", "django_content_type", "auth_permission"}
    tables = sorted({m._meta.db_table for m in apps.get_models() if m._meta.managed} - written_by_migrating)
    with django_db_blocker.unblock():
        with connection.cursor() as cursor:
            quoted = [connection.ops.quote_name(t) for t in tables]
            cursor.execute("SELECT " + " OR ".join(f"EXISTS (SELECT 1 FROM {q})" for q in quoted))
            left_over = cursor.fetchone()[0]
        if left_over:
            call_command("flush", interactive=False, verbosity=0)
    return django_db_setup


def wait_until_database_quiet(timeout: float = 30.0) -> None:
    """Wait until no other session of the test database is inside a transaction at two looks 0.25 s apart.

    A real worker or server can still be writing after a test's assertions (e.g. the entity drawing a
    batch's facts queue); the test database's flush at teardown (TRUNCATE of every table) would then
    deadlock with it and fail the teardown, leaving rows for the next test. Call it before that flush."""
    busy = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND state IS NOT NULL AND state <> 'idle'"
    )
    deadline, quiet = time.monotonic() + timeout, 0
    while quiet < 2 and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(busy)
            quiet = quiet + 1 if cursor.fetchone()[0] == 0 else 0
        time.sleep(0.25)


class Api:
    """An HTTP client for the agent API with a bearer key, speaking JSON."""

    def __init__(self, raw_key: str | None, client: Client | None = None):
        self.client = client or Client()
        self.key = raw_key

    def _headers(self) -> dict:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.key}"} if self.key else {}

    def _send(self, method: str, path: str, body=None, **params):
        kwargs = self._headers()
        url = path if path.startswith("/") else f"/api/v1/{path}"
        if method == "get":
            return self.client.get(url, params, **kwargs)
        data = body if isinstance(body, str | bytes) else json.dumps(body) if body is not None else ""
        return getattr(self.client, method)(url, data, content_type="application/json", **kwargs)

    def get(self, path, **params):
        return self._send("get", path, **params)

    def post(self, path, body=None):
        return self._send("post", path, body)

    def put(self, path, body=None):
        return self._send("put", path, body)

    def patch(self, path, body=None):
        return self._send("patch", path, body)

    def delete(self, path, body=None):
        return self._send("delete", path, body)


@pytest.fixture(autouse=True)
def _access_counts_in_request(settings):
    """Reads write their access counts at once, inside the test's transaction (production defers them
    to a background flush, which would not see the test's uncommitted rows); a write's entity-drawing
    task is sent at commit, in the request, rather than by the process's sender thread."""
    settings.ACCESS_COUNT_FLUSH_SECONDS = 0
    settings.ENTITY_DRAW_SEND_IN_REQUEST = True


@pytest.fixture(autouse=True)
def _no_random_throttle_housekeeping(monkeypatch):
    """The rate limiter deletes old windows in one request of 500, at random: a test that counts a
    request's statements would fail one time in 500. Off here; tests/api/test_throttle.py tests it."""
    from memory_admin.services import throttle

    monkeypatch.setattr(throttle, "_SWEEP_ONE_IN", 10**12)


@pytest.fixture(autouse=True)
def _backlog_rule_off(settings):
    """The suite's own processes publish tasks to the development broker (ENTITY_DRAW_SEND_IN_REQUEST)
    with no worker consuming them, so its queues hold old messages that say nothing about a test's own
    background work: readiness would answer `degraded` in whichever test runs after them. The backlog rule
    is tested with a threshold of its own in tests/ops/test_backlog.py."""
    settings.HEALTH_BACKLOG_SECONDS = 10**9


@pytest.fixture
def tenant(db):
    return tenant_create(slug=f"tenant-{next(_counter)}")


@pytest.fixture
def other_tenant(db):
    return tenant_create(slug=f"other-{next(_counter)}")


@pytest.fixture
def make_api(db):
    def make(tenant, *, admin: bool = False, users: list[str] | None = None, agent: str = "agent") -> Api:
        _, raw = api_key_create(tenant_id=tenant.pk, agent_name=agent, is_admin=admin, allowed_user_ids=users)
        return Api(raw)

    return make


@pytest.fixture
def api(tenant, make_api) -> Api:
    return make_api(tenant)


@pytest.fixture
def admin_api(tenant, make_api) -> Api:
    return make_api(tenant, admin=True, agent="admin-agent")
