"""Ingestion knobs: a Django setting of the same name wins, then the environment (declared in
memory_admin/config.py), then the default.

`KNOWLEDGE_ALLOWED_HOSTS` (comma-separated in the environment) names hosts the fetcher may reach even
though they resolve to a private, loopback or link-local address (an intranet wiki); nothing else does.
`KNOWLEDGE_FOLDER_ROOTS` (comma-separated) are the only folders a folder source may read from.
"""

from __future__ import annotations

from django.conf import settings

from memory_admin import config


def _value(name: str, default):
    if hasattr(settings, name):
        return getattr(settings, name)
    value = config.get(name)  # declared in memory_admin/config.py, with its bounds
    return tuple(value) if isinstance(default, tuple) else value


def _knob(name: str, default):
    def read():
        return _value(name, default)

    read.__name__ = name
    return read


CHUNK_TOKENS = _knob("KNOWLEDGE_CHUNK_TOKENS", 400)
EMBED_BATCH = _knob("KNOWLEDGE_EMBED_BATCH", 64)
FETCH_TIMEOUT_SECONDS = _knob("KNOWLEDGE_FETCH_TIMEOUT_SECONDS", 15.0)
MAX_PAGE_BYTES = _knob("KNOWLEDGE_MAX_PAGE_BYTES", 5 * 1024 * 1024)
MAX_UPLOAD_BYTES = _knob("KNOWLEDGE_MAX_UPLOAD_BYTES", 10 * 1024 * 1024)
MAX_REDIRECTS = _knob("KNOWLEDGE_MAX_REDIRECTS", 5)
PAGES_PER_TASK = _knob("KNOWLEDGE_PAGES_PER_TASK", 5)
LIMIT_PAGES = _knob("KNOWLEDGE_LIMIT_PAGES", 1000)  # the most a source may ask for
LIMIT_DEPTH = _knob("KNOWLEDGE_LIMIT_DEPTH", 5)
LIMIT_BYTES = _knob("KNOWLEDGE_LIMIT_BYTES", 200 * 1024 * 1024)
STUCK_SECONDS = _knob("KNOWLEDGE_STUCK_SECONDS", 600.0)
USER_AGENT = _knob("KNOWLEDGE_USER_AGENT", "memory-admin-knowledge/1")
ALLOWED_HOSTS = _knob("KNOWLEDGE_ALLOWED_HOSTS", ())
FOLDER_ROOTS = _knob("KNOWLEDGE_FOLDER_ROOTS", ())
CONTEXT_SHARE = _knob("KNOWLEDGE_CONTEXT_SHARE", 0.25)  # the read side: retrieval/context/documents.py
