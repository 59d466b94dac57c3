"""Moved to `memory_admin.db.cursors` (issue 30): this module re-exports its names while callers outside
the project move; nothing inside the project imports it."""

from memory_admin.db.cursors import prepared_cursor, vector_cursor  # noqa: F401
