"""The MCP door (SPEC §13): memory-admin as a Model Context Protocol server (official `mcp` SDK).

A thin adapter, like the REST handlers it stands beside: every tool authenticates with an agent key
(the same `principal_for_key`), checks its input with the REST API's own schemas, calls the same
services and selectors, and answers the same shapes. A refusal is a tool error whose text is the JSON
the REST API would answer (`{"code": "blocked", "detail": ..., "block_id": ...}`), never the value.

Keys: over http, the bearer token of each request (checked by the SDK's token verifier before any tool
runs); over stdio, `MEMORY_ADMIN_API_KEY` (checked when the server starts, and again for every call).
Either way the key is looked up once per call, so revoking it takes effect at once.

The package, read top to bottom: `door` (the key, the call's thread and time limit, refusals as tool
errors, the arguments' types), the tools by topic (`memories`, `retrieval`, `threads`, `notebooks`,
`entities`), and `server` (the server with its tools registered in order, and its transports).
"""

from memory_admin.mcp_server.door import (
    CALL_THREADS,
    CALL_TIMEOUT_SECONDS,
    AgentKeyVerifier,
    EntityId,
    EntityLimit,
    FactId,
    Full,
    MemoryMCPServer,
    UserId,
    use_stdio_key,
)
from memory_admin.mcp_server.memories import MemoryItem
from memory_admin.mcp_server.server import (
    INSTRUCTIONS,
    build_http_server,
    build_server,
    serve_http,
    transport_security,
)
from memory_admin.mcp_server.threads import MessageItem

__all__ = [
    "CALL_THREADS",
    "CALL_TIMEOUT_SECONDS",
    "INSTRUCTIONS",
    "AgentKeyVerifier",
    "EntityId",
    "EntityLimit",
    "FactId",
    "Full",
    "MemoryItem",
    "MemoryMCPServer",
    "MessageItem",
    "UserId",
    "build_http_server",
    "build_server",
    "serve_http",
    "transport_security",
    "use_stdio_key",
]
