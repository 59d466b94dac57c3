"""Fetching a URL without becoming a way into the private network (SSRF).

Every hop (the URL and each redirect) is checked the same way: http or https only; the host is resolved
once, every address it resolves to must be a public one (not private, loopback, link-local, multicast,
reserved or unspecified) unless the operator allowed that host (`KNOWLEDGE_ALLOWED_HOSTS`, by name or
`name:port`); and the connection goes to the address that was checked, never to a second lookup of the
name (DNS rebinding). TLS still verifies the certificate against the host name. The body is read up to a
byte limit within a time limit; conditional headers (ETag, Last-Modified) let an unchanged page answer
304 without a body.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

from memory_admin.knowledge import conf
from memory_admin.knowledge.errors import FetchRefused, KnowledgeError

REDIRECTS = (301, 302, 303, 307, 308)


@dataclass
class Fetched:
    url: str  # after redirects
    status: int
    body: bytes
    media_type: str
    charset: str
    etag: str
    last_modified: str

    @property
    def not_modified(self) -> bool:
        return self.status == 304


def _host_allowed(host: str, port: int) -> bool:
    allowed = {h.lower() for h in conf.ALLOWED_HOSTS()}
    return host.lower() in allowed or f"{host.lower()}:{port}" in allowed


def check_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL the fetcher may try, or FetchRefused/KnowledgeError saying why not."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise KnowledgeError("The URL is malformed.", code="invalid_url") from exc
    if parts.scheme not in ("http", "https"):
        raise KnowledgeError("Only http and https URLs can be fetched.", code="invalid_url")
    if not parts.hostname:
        raise KnowledgeError("The URL has no host.", code="invalid_url")
    if parts.username or parts.password:
        raise KnowledgeError("A URL may not carry a user name or password.", code="invalid_url")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def resolve_checked(host: str, port: int) -> str:
    """The address to connect to: the host's first address, once every address it resolves to was checked."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise KnowledgeError(f"The host {host!r} could not be resolved.", code="host_unresolvable") from exc
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise KnowledgeError(f"The host {host!r} could not be resolved.", code="host_unresolvable")
    if not _host_allowed(host, port):
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                ip = ip.ipv4_mapped
            if not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_unspecified:
                raise FetchRefused(
                    f"{host} resolves to a private, loopback or link-local address; the fetcher does not go "
                    "there unless an operator allows the host (KNOWLEDGE_ALLOWED_HOSTS).",
                    code="address_not_allowed",
                )
    return addresses[0]


class _PinnedHTTP(http.client.HTTPConnection):
    """Connects to the checked address; the Host header still names the host."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def _headers(etag: str, last_modified: str) -> dict[str, str]:
    headers = {
        "User-Agent": conf.USER_AGENT(),
        "Accept": "text/html,text/markdown,text/plain,application/pdf,*/*;q=0.1",
        "Accept-Encoding": "identity",
    }
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    return headers


def _read_body(response: http.client.HTTPResponse, limit: int, deadline: float, timeout: float) -> bytes:
    size = response.getheader("Content-Length")
    if size and size.isdigit() and int(size) > limit:
        raise KnowledgeError(f"The page is over the {limit}-byte limit.", code="too_large", limit=limit)
    pieces, total = [], 0
    while piece := response.read(65536):
        if time.monotonic() > deadline:
            raise KnowledgeError(f"The page took longer than {timeout:g} s.", code="fetch_timeout")
        total += len(piece)
        if total > limit:
            raise KnowledgeError(f"The page is over the {limit}-byte limit.", code="too_large", limit=limit)
        pieces.append(piece)
    return b"".join(pieces)


def _fetched(url: str, response: http.client.HTTPResponse, body: bytes) -> Fetched:
    media, _, params = (response.getheader("Content-Type") or "").partition(";")
    charset = ""
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "charset":
            charset = value.strip().strip('"')
    return Fetched(
        url=url,
        status=response.status,
        body=body,
        media_type=media.strip().lower(),
        charset=charset,
        etag=(response.getheader("ETag") or "")[:300],
        last_modified=(response.getheader("Last-Modified") or "")[:100],
    )


def _hop(url: str, headers: dict[str, str], limit: int, deadline: float, timeout: float) -> Fetched | str:
    """One request: the answer, or the URL a redirect points to."""
    scheme, host, port = check_url(url)
    address = resolve_checked(host, port)
    conn = (_PinnedHTTPS if scheme == "https" else _PinnedHTTP)(host, port, address, timeout)
    parts = urlsplit(url)
    try:
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
        response = conn.getresponse()
        if response.status in REDIRECTS:
            location = response.getheader("Location")
            if not location:
                raise KnowledgeError("A redirect without a Location.", code="fetch_failed")
            return urljoin(url, location.strip())
        body = b"" if response.status == 304 else _read_body(response, limit, deadline, timeout)
        return _fetched(url, response, body)
    except TimeoutError as exc:
        raise KnowledgeError(f"The page took longer than {timeout:g} s.", code="fetch_timeout") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise KnowledgeError(f"The page could not be fetched ({type(exc).__name__}).", code="fetch_failed") from exc
    finally:
        conn.close()


def fetch(url: str, *, etag: str = "", last_modified: str = "", max_bytes: int | None = None) -> Fetched:
    """GET `url` under the rules above, following up to KNOWLEDGE_MAX_REDIRECTS redirects (each checked)."""
    limit = max_bytes if max_bytes is not None else conf.MAX_PAGE_BYTES()
    timeout = float(conf.FETCH_TIMEOUT_SECONDS())
    deadline = time.monotonic() + timeout
    headers = _headers(etag, last_modified)
    for _hop_number in range(int(conf.MAX_REDIRECTS()) + 1):
        got = _hop(url, headers, limit, deadline, timeout)
        if isinstance(got, Fetched):
            return got
        url = got
    raise KnowledgeError("Too many redirects.", code="too_many_redirects")


def robots_for(url: str) -> RobotFileParser:
    """The site's robots.txt (fetched under the same rules); missing or unreadable: everything allowed,
    401/403: nothing allowed (as urllib's own parser reads them)."""
    parts = urlsplit(url)
    parser = RobotFileParser(f"{parts.scheme}://{parts.netloc}/robots.txt")
    try:
        got = fetch(parser.url, max_bytes=512 * 1024)
    except FetchRefused:
        raise
    except KnowledgeError:
        parser.parse([])
        return parser
    if got.status in (401, 403):
        parser.disallow_all = True
    elif got.status >= 400:
        parser.allow_all = True
    else:
        parser.parse(got.body.decode("utf-8", "replace").splitlines())
    return parser
