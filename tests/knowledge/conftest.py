"""A real HTTP server on 127.0.0.1 serving a small site the tests change between crawls, and the setting
that allows the fetcher to reach it (and nothing else private)."""

from __future__ import annotations

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memory_admin.models import KnowledgeSource
from memory_admin.selectors.access import Principal


class Site:
    """Pages by path: (status, content type, body) or a redirect; records every request it answered."""

    def __init__(self):
        self.pages: dict[str, tuple[int, str, bytes]] = {}
        self.redirects: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []  # (path, If-None-Match sent)
        self.delay = 0.0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def page(self, path: str, html: str, content_type: str = "text/html; charset=utf-8") -> None:
        self.pages[path] = (200, content_type, html.encode())

    def remove(self, path: str) -> None:
        self.pages.pop(path, None)

    def paths_requested(self) -> list[str]:
        return [p for p, _ in self.requests]

    def _handler(self):
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                site.requests.append((self.path, self.headers.get("If-None-Match", "")))
                if site.delay:
                    time.sleep(site.delay)
                if self.path in site.redirects:
                    self.send_response(302)
                    self.send_header("Location", site.redirects[self.path])
                    self.end_headers()
                    return
                if self.path not in site.pages:
                    self.send_response(404)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    self.wfile.write(b"not found")
                    return
                status, content_type, body = site.pages[self.path]
                etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", etag)
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site(settings):
    server = Site()
    # Only this server's own address and port: a redirect to another loopback name or port is refused.
    settings.KNOWLEDGE_ALLOWED_HOSTS = (f"127.0.0.1:{server.port}",)
    yield server
    server.stop()


def crawl_all(source: KnowledgeSource) -> KnowledgeSource:
    """What the worker's chain of `knowledge.crawl` tasks does, in-process."""
    from memory_admin.knowledge.crawl import crawl_step

    for _ in range(200):
        if not crawl_step(source.pk):
            break
    source.refresh_from_db()
    return source


def recrawl(source: KnowledgeSource) -> KnowledgeSource:
    from memory_admin.knowledge.services import source_crawl_now

    source_crawl_now(Principal.system(source.tenant_id), source.pk)
    return crawl_all(source)
