"""The web server's gunicorn worker: gunicorn's gthread worker, except that a request gunicorn refuses
before it can read it (a request line or headers over its limits: gunicorn_conf.limit_request_line,
gunicorn's limit_request_fields and limit_request_field_size) is answered like every other API error
(JSON, a stable `code`, the `limit`) instead of gunicorn's HTML page, which an agent's client cannot
read. Such a request never reaches Django; nothing was done for it. Every other error is gunicorn's own
handling."""

from __future__ import annotations

import json

from gunicorn import util
from gunicorn.http.errors import LimitRequestHeaders, LimitRequestLine
from gunicorn.workers.gthread import ThreadWorker

_REST_OF_LINE = 300  # the method, the path with a long user id, `?q=`, ` HTTP/1.1`


def _answer(exc: Exception, cfg) -> tuple[int, str, dict]:  # noqa: ANN001 - gunicorn's Config
    if isinstance(exc, LimitRequestLine):
        limit = cfg.limit_request_line

        def fits(utf8_bytes: int) -> int:
            """Characters of `utf8_bytes` UTF-8 bytes each that fit once escaped, beside ~300 bytes of the rest."""
            return (limit - _REST_OF_LINE) // (3 * utf8_bytes) // 50 * 50

        return (
            414,
            "URI Too Long",
            {
                "code": "request_line_too_long",
                "detail": (
                    f"The request line (method, path and query string) is over {limit:,} bytes, the most this "
                    "server reads; nothing was done. In a URL a character takes 3 bytes for each of its UTF-8 "
                    f"bytes once escaped: a search's q or a context block's task fits up to about {fits(2):,} "
                    f"characters of Cyrillic or Greek and about {fits(3):,} of Chinese or Japanese. POST the same "
                    "parameters as a JSON body to the same path instead (both clients do for a long query)."
                ),
                "limit": limit,
            },
        )
    return (
        431,
        "Request Header Fields Too Large",
        {
            "code": "headers_too_large",
            "detail": (
                f"The request's headers are over this server's limits ({cfg.limit_request_fields} headers, "
                f"{cfg.limit_request_field_size:,} bytes each); nothing was done."
            ),
            "limit": cfg.limit_request_field_size,
        },
    )


class JsonErrorThreadWorker(ThreadWorker):
    def handle_error(self, req, client, addr, exc):  # noqa: ANN001, ANN201 - gunicorn's Worker.handle_error
        if not isinstance(exc, LimitRequestLine | LimitRequestHeaders):
            return super().handle_error(req, client, addr, exc)
        status, reason, body = _answer(exc, self.cfg)
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        payload = json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        try:
            util.write_nonblock(client, head.encode("latin-1") + payload)
        except Exception:  # noqa: BLE001 - as gunicorn's own handler: the client may be gone
            self.log.debug("Failed to send error message.")
        return None
