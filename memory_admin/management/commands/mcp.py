"""`manage.py mcp --transport stdio|http [--bind 127.0.0.1:8765]`: the MCP server (memory_admin.mcp_server)."""

from __future__ import annotations

import sys

import anyio
from django.core.management.base import BaseCommand, CommandError

from memory_admin import config, mcp_server
from memory_admin.embedding import embed_one
from memory_admin.errors import DomainError
from memory_admin.tokens import count_tokens


def _split(name: str) -> list[str]:
    return config.get(name)


class Command(BaseCommand):
    help = (
        "Serve memory-admin over the Model Context Protocol: stdio (the key in MEMORY_ADMIN_API_KEY) "
        "or streamable http at /mcp (each request's bearer key)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
        parser.add_argument(
            "--bind", default=config.get("MCP_BIND") or "127.0.0.1:8765", help="host:port for --transport http"
        )

    def handle(self, *args, transport: str, bind: str, **options):

        if transport == "stdio":
            try:
                mcp_server.use_stdio_key(config.get("MEMORY_ADMIN_API_KEY"))
            except DomainError as exc:
                raise CommandError(f"{exc.detail} Create one with manage.py create_agent_key.") from exc
        # Load the embedding model and the tokenizer before the first call, not during it; unless
        # MCP_WARM_UP=0 (what `up` sets unless told otherwise): an MCP server nobody calls then holds
        # ~75 MB less, and the first call that searches or counts tokens loads them (~1 s).
        if config.get("MCP_WARM_UP"):
            embed_one("warm-up")
            count_tokens("warm-up")
        if transport == "stdio":
            mcp_server.build_server().run("stdio")
            return
        host, _, port_text = bind.rpartition(":")
        if not host or not port_text.isdigit():
            raise CommandError(f"--bind wants host:port, not {bind!r}")
        port = int(port_text)
        security = mcp_server.transport_security(
            host=host, port=port, extra_hosts=_split("MCP_ALLOWED_HOSTS"), extra_origins=_split("MCP_ALLOWED_ORIGINS")
        )
        server = mcp_server.build_http_server(host=host, port=port)
        sys.stderr.write(f"memory-admin MCP server on http://{bind}/mcp\n")
        anyio.run(lambda: mcp_server.serve_http(server, host=host, port=port, security=security))
