"""An API request's statements outside the search itself, through the WSGI application exactly as
gunicorn calls it (Django's request signals run, so a connection reused from the previous request is
health-checked by Django, as in a gunicorn thread).

One key statement opens the request (the key, its rate count and the memory user), and a connection that
Postgres dropped between two requests is replaced without the client noticing."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import connection

from memory_admin.services.keys import api_key_create
from memory_admin.services.tenants import tenant_create
from tests.wsgi_call import wsgi_get

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def statements(monkeypatch):
    """Every statement psycopg sends, in order (Django's own health check goes to psycopg directly, so
    it is seen here too)."""
    sent: list[str] = []
    original = psycopg.Cursor.execute

    def execute(self, query, *args, **kwargs):
        sent.append(query if isinstance(query, str) else str(query))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return sent


@pytest.fixture
def admin_key() -> str:
    tenant = tenant_create(slug="overhead")
    return api_key_create(tenant_id=tenant.pk, agent_name="overhead", is_admin=True)[1]


def _get(path: str, key: str, query: str = "") -> tuple[int, dict]:
    status, body, _ = wsgi_get(path, key, query)
    return status, json.loads(body)


def test_one_key_statement_answers_a_search_for_an_unknown_user(admin_key, statements):
    assert _get("/api/v1/settings", admin_key)[0] == 200
    backend = connection.connection.info.backend_pid
    statements.clear()
    status, _ = _get("/api/v1/users/nobody/search", admin_key, "q=tea")
    assert status == 404  # no such memory user: the key statement looked the user up too
    assert connection.connection.info.backend_pid == backend  # the connection was reused
    ours = [s for s in statements if s != "SELECT 1"]  # Django's own health check of a reused connection
    assert len(ours) == 1 and "key_hash" in ours[0] and "memory_admin_memoryuser" in ours[0]


def test_a_connection_postgres_dropped_is_replaced_without_an_error(admin_key, statements):
    assert _get("/api/v1/settings", admin_key)[0] == 200
    dropped = connection.connection.info.backend_pid
    # Postgres drops the connection between two requests (a restart, an idle timeout, an operator):
    with psycopg.connect(connection.connection.info.dsn, password=connection.settings_dict["PASSWORD"]) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [dropped])
    statements.clear()
    status, body = _get("/api/v1/settings", admin_key)
    assert status == 200, body  # answered on a new connection: Django's health check found it dropped
    assert connection.connection.info.backend_pid != dropped
    assert sum("key_hash" in s for s in statements) == 1
    assert _get("/api/v1/settings", admin_key)[0] == 200


def test_other_errors_of_the_key_statement_are_not_retried(admin_key, statements, monkeypatch):
    """A failure that is not a broken connection (here a statement timeout) is answered as before:
    an error, and the statement is not sent twice."""
    assert _get("/api/v1/settings", admin_key)[0] == 200
    from memory_admin.services import keys

    monkeypatch.setattr(keys, "_KEY_SQL", keys._KEY_SQL.replace("SELECT k.id", "SELECT pg_sleep(0.3), k.id", 1))
    monkeypatch.setattr(keys, "api_key_count_sql", lambda column: None)  # the plain key statement
    original = keys._key_principal

    def with_timeout(raw):
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = '50ms'")
        try:
            return original(raw)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET statement_timeout = 0")

    monkeypatch.setattr(keys, "_key_principal", with_timeout)
    statements.clear()
    status, _ = _get("/api/v1/settings", admin_key)
    assert status >= 500
    assert sum("pg_sleep" in s for s in statements) == 1
