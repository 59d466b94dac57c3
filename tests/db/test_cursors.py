"""The driver-level cursors (memory_admin.db.cursors) answer what Django's own cursor answers, and Django's
query log sees their statements. These pin the public hooks the module builds on (psycopg's prepare=True,
`Cursor.format`, `set_json_loads`, pgvector's dumpers, Django's cursor wrappers): a release that changes
one fails here, not in a search."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pgvector import Vector

from memory_admin.db.cursors import prepared_cursor, vector_cursor

pytestmark = pytest.mark.django_db

# Every kind of value the hot statements return: uuid, text, float8, int, bool, text[], jsonb, NULL, a
# timestamp, and a vector bound as a parameter.
STATEMENT = (
    "SELECT gen_random_uuid() IS NOT NULL, 'crêpes'::text, 0.25::float8, 7::bigint, true,"
    " ARRAY['bee', 'hive']::text[], '{\"n\": [1, \"x\"]}'::jsonb, NULL::text,"
    " '2024-05-01 10:04:05.123+00'::timestamptz, %s::vector <=> '[1, 0, 0]'::vector, %s::text"
)
PARAMS = [Vector([0.0, 1.0, 0.0]), "tea"]


def django_rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(STATEMENT.replace("%s::vector", "'[0, 1, 0]'::vector"), PARAMS[1:])
        return cursor.fetchall()


@pytest.mark.parametrize("binary_results", [False, True])
@pytest.mark.parametrize("prepared", [False, True])
def test_a_fast_cursor_gives_the_rows_djangos_cursor_gives(binary_results, prepared):
    expected = django_rows()
    for _ in range(2):  # the second time through the prepared statement
        with vector_cursor(binary_results=binary_results, prepared=prepared) as cursor:
            cursor.execute(STATEMENT, PARAMS)
            assert cursor.fetchall() == expected
    assert expected[0][6] == '{"n": [1, "x"]}'  # jsonb as its text, as Django's JSONField reads it


def test_a_prepared_statement_is_parsed_once_per_connection():
    def prepared_here() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT 41 +%%'")
            return cursor.fetchone()[0]

    for n in (1, 2):
        with prepared_cursor() as cursor:
            cursor.execute("SELECT 41 + %s::int", [n])
            assert cursor.fetchone() == (41 + n,)
    assert prepared_here() == 1


def test_djangos_query_log_sees_the_statements_of_the_fast_cursors():
    with vector_cursor(binary_results=True, prepared=True) as cursor:  # prepared before the log starts
        cursor.execute("SELECT %s::text AS marker", ["unlogged"])
    with CaptureQueriesContext(connection) as ctx:
        with vector_cursor(binary_results=True, prepared=True) as cursor:
            cursor.execute("SELECT %s::text AS marker", ["logged-marker"])
            assert cursor.fetchone() == ("logged-marker",)
    assert "AS marker" in (ctx.captured_queries[-1]["sql"] or "")
