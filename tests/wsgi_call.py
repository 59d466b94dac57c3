"""A request through the WSGI application exactly as gunicorn calls it (Django's request signals run, and
the WSGI entry of memory_admin.wsgi too), for tests that need what Django's test client skips."""

from __future__ import annotations

import io
import sys


def wsgi_get(path: str, key: str, query: str = "") -> tuple[int, bytes, dict]:
    """GET `path?query` with a bearer key: (status, body, the environ after the call)."""
    from memory_admin.wsgi import application

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "localhost",
        "HTTP_AUTHORIZATION": f"Bearer {key}",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    status: list[int] = []
    body = b"".join(application(environ, lambda s, headers, exc_info=None: status.append(int(s.split()[0]))))
    return status[0], body, environ
