"""The fetcher's HTTPS path connects to the address it checked, never to a second lookup of the name (DNS
rebinding), and still verifies the certificate against the host name. A real TLS server on 127.0.0.1 with
a self-signed certificate made here by the openssl command; the name `docs.test` resolves (through a
stand-in resolver) to 127.0.0.1 the first time and to 127.0.0.2, where a decoy answers, every time after."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memory_admin.knowledge.errors import KnowledgeError
from memory_admin.knowledge.fetch import fetch

HOST = "docs.test"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.fail("the openssl command is needed to make the test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(  # noqa: S603 - fixed arguments
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={HOST}",
            "-addext",
            f"subjectAltName=DNS:{HOST}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


class _Server:
    def __init__(self, address: str, port: int, body: bytes, certificate):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer((address, port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*certificate)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers(certificate):
    """The real server on 127.0.0.1 and a decoy on 127.0.0.2, on the same port."""
    for _attempt in range(20):
        decoy = _Server("127.0.0.2", 0, b"decoy: the name was looked up again", certificate)
        try:
            real = _Server("127.0.0.1", decoy.port, b"the page at the checked address", certificate)
        except OSError:
            decoy.stop()
            continue
        yield real, decoy
        real.stop()
        decoy.stop()
        return
    pytest.fail("no port free on both loopback addresses")


@pytest.fixture
def rebinding_resolver(monkeypatch):
    """docs.test (and other.test) resolve to 127.0.0.1 the first time, to 127.0.0.2 after; records lookups."""
    real_getaddrinfo = socket.getaddrinfo
    lookups: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host in (HOST, "other.test"):
            lookups.append(host)
            address = "127.0.0.1" if lookups.count(host) == 1 else "127.0.0.2"
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port)))]
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


@pytest.fixture
def trusted(monkeypatch, settings, certificate, servers):
    # OpenSSL reads SSL_CERT_FILE when a default context loads its verify paths: the test CA is trusted.
    monkeypatch.setenv("SSL_CERT_FILE", certificate[0])
    port = servers[0].port
    settings.KNOWLEDGE_ALLOWED_HOSTS = (f"{HOST}:{port}", f"other.test:{port}")
    return port


def test_https_fetch_connects_to_the_checked_address_not_a_second_lookup(trusted, rebinding_resolver):
    got = fetch(f"https://{HOST}:{trusted}/guide")
    assert got.status == 200
    assert got.body == b"the page at the checked address"
    assert rebinding_resolver == [HOST]  # resolved once, for the check; the connection used that answer
    # Without the pin the same call would have reached the decoy: a second lookup answers 127.0.0.2.
    second = socket.getaddrinfo(HOST, trusted)[0][4][0]
    assert second == "127.0.0.2"


def test_https_still_verifies_the_certificate_against_the_host_name(trusted, rebinding_resolver):
    with pytest.raises(KnowledgeError) as refused:
        fetch(f"https://other.test:{trusted}/guide")  # the certificate names docs.test only
    assert refused.value.code == "fetch_failed"
    assert "SSLCertVerificationError" in refused.value.detail


def test_https_to_a_loopback_name_not_allowed_is_refused_before_connecting(
    settings, certificate, servers, rebinding_resolver
):
    settings.KNOWLEDGE_ALLOWED_HOSTS = ()
    with pytest.raises(KnowledgeError) as refused:
        fetch(f"https://{HOST}:{servers[0].port}/guide")
    assert refused.value.code == "address_not_allowed"
