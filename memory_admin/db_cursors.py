"""Cursors for fixed, hot statements (search's candidates, the key statement, the write path's lookups,
INSERT, locks and cap): pgvector values sent in binary, rows optionally loaded in binary, and statements
prepared once per connection. One home for the selectors and the services alike."""

from __future__ import annotations

import functools
import sys
from weakref import WeakKeyDictionary

from django.db import connection
from pgvector import Vector

_vector_dumpers: WeakKeyDictionary = WeakKeyDictionary()


def vector_cursor(*, binary_results: bool = False, prepared: bool = False):
    """A server-binding cursor that sends pgvector values in binary (1.5 kB, instead of 4 kB of text
    inlined into the SQL), wrapped like Django's own cursors (so query logging and counting see it).
    The dumper is registered on this cursor only: Django's VectorField reads and writes as before.
    `binary_results`: rows come back in binary (the candidate rows: numbers, uuids, arrays, text; no
    type without a binary loader), which psycopg loads in a third of the time it parses their text.
    `prepared`: each statement is a named prepared statement of the connection (parsed once per
    connection instead of once per execution; see `_PreparingCursor`)."""
    from django.db.backends.postgresql.base import ServerBindingCursor
    from pgvector.psycopg.vector import VectorBinaryDumper, VectorDumper
    from psycopg.pq import Format
    from psycopg.types import TypeInfo

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
    if prepared and raw_connection.prepare_threshold is None:
        # Django turns psycopg's automatic preparing off (None), which also refuses prepare=True. A
        # threshold no statement reaches keeps it off for every other statement of the connection.
        raw_connection.prepare_threshold = sys.maxsize
    raw = (_preparing_cursor_class() if prepared else ServerBindingCursor)(raw_connection)
    if binary_results:
        raw.format = Format.BINARY
        raw.adapters.register_loader("jsonb", _jsonb_as_text())
    for dumper in dumpers:
        raw.adapters.register_dumper(Vector, dumper)
    return connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)


def prepared_cursor():
    """A Django cursor (server-side binding) whose statements are prepared statements of the connection:
    for a fixed statement every request sends (the API key statement)."""
    return vector_cursor(prepared=True)


@functools.cache
def _jsonb_as_text() -> type:
    """A binary jsonb loader giving the JSON text, as Django's own text loader does (JSONField's
    from_db_value decodes it), instead of psycopg's parsed value."""
    from psycopg.types.json import JsonbBinaryLoader

    return type("JsonbText", (JsonbBinaryLoader,), {"_loads": staticmethod(bytes.decode)})


@functools.cache
def _preparing_cursor_class() -> type:
    """Django's server-binding cursor, preparing every statement it executes (psycopg's prepare=True: a
    named statement, parsed and analysed once per connection; Postgres then plans each execution for
    its parameters, or reuses a generic plan when that plan is estimated no dearer than theirs)."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparingCursor(ServerBindingCursor):
        _query_cls = _fixed_query_class()

        def execute(self, query, params=None, *, prepare=None, binary=None):  # noqa: ANN001 - psycopg's
            return super().execute(query, params, prepare=True, binary=binary)

        def _send_query_prepared(self, name, pgq, *, binary=None):  # noqa: ANN001 - psycopg's
            # psycopg records the statement sent (what Django's query log reads) only when unprepared.
            self._query = pgq
            return super()._send_query_prepared(name, pgq, binary=binary)

    return PreparingCursor


@functools.cache
def _fixed_query_class() -> type:
    """psycopg's conversion of a query (its `%s` placeholders found by scanning the SQL, then numbered),
    cached for the prepared cursors' fixed statements whatever their length. psycopg caches it only for
    statements up to 4 kB, so search's candidate statement (13 kB with the entity CTEs) was scanned again
    on every request (0.17 ms). Keyed by the statement's text: the callers pass the same string object
    every time (each builds its statement once), whose hash Python keeps."""
    from psycopg._queries import PostgresQuery, _query2pg_nocache

    @functools.lru_cache(maxsize=128)
    def converted(query: str, encoding: str) -> tuple:
        return _query2pg_nocache(query.encode(encoding), encoding)

    class FixedQuery(PostgresQuery):
        def convert(self, query, vars):  # noqa: ANN001, A002 - psycopg's
            if vars is None or not isinstance(query, str):
                return super().convert(query, vars)
            self.query, self._want_formats, self._order, self._parts = converted(query, self._tx.encoding)
            self.dump(vars)
            return None

    FixedQuery.converted = converted
    return FixedQuery
