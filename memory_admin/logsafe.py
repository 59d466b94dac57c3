"""Logs carry ids of our own rows, never memory content or identifiers an agent sent (SPEC §11).

Django logs the request path on every 4xx/5xx ("Not Found: /api/v1/users/<id>/facts"), gunicorn's
access log the request line, and an exception's message can quote a value (a database error quotes
the failing row). `install()` replaces the log record factory of the process (web, worker, beat,
management commands: every process loads the settings) so that every record, whatever the logger or
handler, is made safe when it is created:

- URL paths in the message keep only the route's own words (`/api/v1/users/*/facts`); every other
  segment and any query string is masked;
- anything the secret/PII scan finds is replaced by `[REDACTED:<kind>]`;
- an exception keeps its type and its stack frames (file, line, function, code), but not its message.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Callable

from memory_admin.services.pii import find, redact

# Literal words of the URL patterns (computed on first use from the URLconf) plus a fixed fallback.
_WORDS: set[str] | None = None
_FALLBACK = {"api", "v1", "t", "accounts", "login", "logout", "static", "favicon.ico"}
_PATH = re.compile(r"(?<![\w.:/])(/[^\s\"'<>]*)")


def _route_words() -> set[str]:
    global _WORDS
    if _WORDS is not None:
        return _WORDS
    words = set(_FALLBACK)
    try:
        from django.urls import get_resolver

        def walk(patterns, depth=0):
            for p in patterns:
                for part in re.split(r"[/^$]+", str(p.pattern)):
                    if part and "<" not in part and "(" not in part and "{" not in part:
                        words.add(part.strip("\\"))
                if hasattr(p, "url_patterns") and depth < 5:
                    walk(p.url_patterns, depth + 1)

        walk(get_resolver().url_patterns)
        # Inside: settings load this module before the URLconf and the API exist.
        from memory_admin.api import api

        for prefix, router in api._routers:
            for path in router.path_operations:
                words.update(part for part in (prefix + "/" + path).split("/") if part and "{" not in part)
    except Exception:  # noqa: BLE001 - logging must never fail; the fallback words are enough
        return words
    _WORDS = words
    return words


def mask_path(path: str) -> str:
    """`/api/v1/users/alice/facts?q=x` -> `/api/v1/users/*/facts?*`."""
    path, query = (path.split("?", 1) + [None])[:2] if "?" in path else (path, None)
    words = _route_words()
    masked = "/".join(seg if (not seg or seg in words) else "*" for seg in path.split("/"))
    return masked + ("?*" if query is not None else "")


# Our own ids: a row's UUID and a request id (32 hex digits). About one UUID in 200 holds digits the scan
# reads as a phone or card number ("…-8237-4543-9249-…"); a finding that lies wholly inside such an id is
# not redacted, so the id can still be followed through the logs.
_ID = re.compile(
    r"(?<![0-9A-Za-z])(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})(?![0-9A-Za-z-])"
)


def findings_outside_ids(text: str) -> list:
    """What the secret/PII scan finds in `text`, less what lies wholly inside one of our ids."""
    findings = find(text)
    if findings:
        ids = [m.span() for m in _ID.finditer(text)]
        findings = [f for f in findings if not any(a <= f.start and f.end <= b for a, b in ids)]
    return findings


def sanitize(text: str) -> str:
    text = _PATH.sub(lambda m: mask_path(m.group(1)), text)

    findings = findings_outside_ids(text)
    return redact(text, findings) if findings else text


def _frames_only(exc_info) -> str:
    etype, _value, tb = exc_info
    frames = "".join(traceback.format_tb(tb))
    return f"Traceback (most recent call last):\n{frames}{etype.__module__}.{etype.__qualname__}: (message withheld)"


_record_steps: set[str] = set()


def chain_record_factory(name: str, step: Callable[[logging.LogRecord], None]) -> None:
    """Run `step` on every log record as it is created, after the factories installed before it (once
    per name: a second call with the same name does nothing)."""
    if name in _record_steps:
        return
    _record_steps.add(name)
    base = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = base(*args, **kwargs)
        step(record)
        return record

    logging.setLogRecordFactory(factory)


def _clean(record: logging.LogRecord) -> None:
    try:
        # A path passed as an argument ("Not Found: %s") is masked whole, spaces and all.
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(mask_path(a) if isinstance(a, str) and a.startswith("/") else a for a in record.args)
        message = record.getMessage()
        record.msg, record.args = sanitize(message), ()
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = _frames_only(record.exc_info)
            record.exc_info = None
    except Exception:  # noqa: BLE001 - an unloggable record is dropped to its type, never raised
        record.msg, record.args, record.exc_info = f"(log record withheld: {record.name})", (), None


def install() -> None:
    """Every record is cleaned of content and identifiers when it is created, whatever handler sees it."""
    chain_record_factory("logsafe", _clean)
