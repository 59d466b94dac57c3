"""Cursors for fixed, hot statements (search's candidates, the key statement, the write path's lookups,
INSERT, locks and cap): pgvector values sent in binary, rows optionally loaded in binary, and statements
prepared once per connection. One home for the selectors and the services alike.

Only public hooks: psycopg's `execute(prepare=True)`, `Connection.prepare_threshold`, `Cursor.format`,
`set_json_loads` and adapters; pgvector's dumpers with the connection's `vector` oid; Django's
`close_if_health_check_failed`, `make_cursor`/`make_debug_cursor` and its server-binding cursor class.
tests/db/test_cursors.py holds the rows of these cursors equal to Django's own cursor's and the query log
complete; tests/test_request_overhead.py, a dropped connection replaced.
"""

from __future__ import annotations

import sys
from weakref import WeakKeyDictionary

from django.db import connection
from django.db.backends.postgresql.base import ServerBindingCursor
from pgvector import Vector
from pgvector.psycopg.vector import VectorBinaryDumper, VectorDumper
from psycopg.pq import Format
from psycopg.types import TypeInfo
from psycopg.types.json import set_json_loads

_vector_dumpers: WeakKeyDictionary = WeakKeyDictionary()


class _Cursor(ServerBindingCursor):
    """Django's server-binding cursor, whose statements are prepared or not as the class says (psycopg's
    prepare=True: a named statement, parsed and analysed once per connection; Postgres then plans each
    execution for its parameters, or reuses a generic plan when that plan is estimated no dearer than
    theirs). Never psycopg's default: that would run a statement this connection prepared before as the
    prepared one even when asked not to prepare."""

    prepare = False

    def execute(self, query, params=None, *, prepare=None, binary=None):  # noqa: ANN001 - psycopg's
        return super().execute(query, params, prepare=self.prepare, binary=binary)


class _PreparingCursor(_Cursor):
    prepare = True


def vector_cursor(*, binary_results: bool = False, prepared: bool = False):
    """A server-binding cursor that sends pgvector values in binary (1.5 kB, instead of 4 kB of text
    inlined into the SQL), wrapped like Django's own cursors (so query logging and counting see it).
    The dumper is registered on this cursor only: Django's VectorField reads and writes as before.
    `binary_results`: rows come back in binary (the candidate rows: numbers, uuids, arrays, text; no
    type without a binary loader), which psycopg loads in a third of the time it parses their text;
    jsonb comes back as its text, as Django's own loader gives it (JSONField's from_db_value decodes it).
    `prepared`: each statement is a named prepared statement of the connection (parsed once per
    connection instead of once per execution). While Django logs queries (DEBUG, a test capturing them)
    statements are not prepared, not even one prepared before: psycopg records the statement Django's
    log reads only for unprepared ones, and the answer is the same either way."""
    # What Django's own cursor() does first (BaseDatabaseWrapper._cursor): with CONN_HEALTH_CHECKS, a
    # connection reused from an earlier request is checked, and replaced when Postgres dropped it.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw_connection = connection.connection
    dumpers = _vector_dumpers.get(raw_connection)
    if dumpers is None:
        oid = TypeInfo.fetch(raw_connection, "vector").oid
        # Text first, then binary: the last one registered is what a %s placeholder uses.
        dumpers = _vector_dumpers[raw_connection] = (
            type("VectorText", (VectorDumper,), {"oid": oid}),
            type("VectorBinary", (VectorBinaryDumper,), {"oid": oid}),
        )
    prepared = prepared and not connection.queries_logged
    if prepared and raw_connection.prepare_threshold is None:
        # Django turns psycopg's automatic preparing off (None), which also refuses prepare=True. A
        # threshold no statement reaches keeps it off for every other statement of the connection.
        raw_connection.prepare_threshold = sys.maxsize
    raw = (_PreparingCursor if prepared else _Cursor)(raw_connection)
    if binary_results:
        raw.format = Format.BINARY
        set_json_loads(bytes.decode, raw)
    for dumper in dumpers:
        raw.adapters.register_dumper(Vector, dumper)
    return connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)


def prepared_cursor():
    """A Django cursor (server-side binding) whose statements are prepared statements of the connection:
    for a fixed statement every request sends (the API key statement)."""
    return vector_cursor(prepared=True)
