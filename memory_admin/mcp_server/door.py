"""The door every call passes: the agent key (http bearer or stdio), the REST API's refusals as tool
errors, the call on a worker thread within its time limit, the arguments' types shared by the tools."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
import anyio.to_thread
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections, connections, transaction
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from pydantic import ValidationError as SchemaError

from memory_admin import config
from memory_admin.api import invalid_body
from memory_admin.errors import DomainError, Invalid
from memory_admin.http_metrics import record_process
from memory_admin.selectors.access import Principal
from memory_admin.services.access_counts import reads_through_mcp
from memory_admin.services.keys import principal_for_key
from memory_admin.services.throttle import api_key_hit
from memory_admin.textnorm import unreadable_reason

_stdio_key: str | None = None  # set by `manage.py mcp --transport stdio`


def use_stdio_key(raw: str) -> Principal:
    """Check the key of a stdio server once at start; raise DomainError (401) if it is not a live key."""
    global _stdio_key
    principal = principal_for_key(raw)
    if principal is None:
        raise DomainError("MEMORY_ADMIN_API_KEY is missing, unknown or revoked.", code="unauthorized", status=401)
    _stdio_key = raw
    return principal


class AgentKeyVerifier(TokenVerifier):
    """Bearer tokens are agent keys: a request with a missing, unknown or revoked key gets 401 from the
    transport, before any tool runs."""

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = await anyio.to_thread.run_sync(_principal_for, token)
        if principal is None:
            return None
        # The principal rides along for the tools of this request: one key lookup per call, as in REST.
        return AccessToken(
            token=token, client_id=f"api-key:{principal.api_key_id}", scopes=[], claims={"principal": principal}
        )


def _principal_for(raw: str) -> Principal | None:
    close_old_connections()
    return principal_for_key(raw)


def _refusal(body: dict[str, Any]) -> ToolError:
    """A tool error whose text is the API's JSON answer (`code`, `detail`, ...)."""
    return ToolError(json.dumps(body, cls=DjangoJSONEncoder))


@contextmanager
def _door() -> Iterator[Principal]:
    """The principal of this call; domain errors and schema errors become tool errors with a code."""
    token = get_access_token()
    if token is not None:  # http: checked by AgentKeyVerifier for this very request
        principal = (token.claims or {}).get("principal")
    else:  # stdio: the key is looked up again for every call, so a revoked key stops at once
        # (Not _principal_for: the call runs in a transaction already, on a connection checked before it.)
        principal = principal_for_key(_stdio_key) if _stdio_key else None
    if principal is None:
        raise _refusal({"code": "unauthorized", "detail": "A valid agent key is required."})
    try:
        api_key_hit(principal.api_key_id)  # the REST API's per-key limit: a rate_limited tool error
        with reads_through_mcp():  # the access log names the door
            yield principal
    except DomainError as exc:
        raise _refusal(exc.as_dict()) from None
    except SchemaError as exc:
        raise _refusal(invalid_body(exc.errors(), default_field="arguments")) from None


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _user_id(principal: Principal, user_id: str | None) -> str:
    """The tool's user: the argument, or the one user the key is bound to."""
    if user_id:
        return user_id
    if len(principal.allowed_external_ids) == 1:
        return principal.allowed_external_ids[0]
    raise Invalid("user_id: name the user (this key is not bound to exactly one user).", field="user_id")


UserId = Annotated[str | None, Field(description="The user's id; omit it when the key is bound to one user.")]
FactId = Annotated[str, Field(description="A memory's id (as returned by add_memory or search_memories).")]
Full = Annotated[
    bool,
    Field(description="false (default): each memory as id, content, score and dates; true: every field and score."),
]
EntityId = Annotated[str, Field(description="An entity's id (as returned by search_entities).")]
EntityLimit = Annotated[int, Field(ge=1, le=200)]

# How long one call may run before it is answered with the error `timeout` (its database work is
# cancelled and its transaction rolled back): one slow call must not leave its client without an answer.
CALL_TIMEOUT_SECONDS = config.get("MCP_CALL_TIMEOUT_SECONDS")

_READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
_ADD = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
_CORRECT = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
_FORGET = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False)
_OVERWRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)
_CLOSE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)


@dataclass
class _Running:
    """One call on its worker thread: its database connection (to cancel its query), whether its client
    was already answered `timeout` (then its transaction is rolled back, whatever it did), and whether
    it got past that point (it commits: its client gets its answer, however late)."""

    abandoned: bool = False
    committing: bool = False
    db: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def abandon(self) -> bool:
        """Give the call up: false when it is committing already (nothing can be given up then)."""
        with self.lock:
            if self.committing:
                return False
            self.abandoned = True
            raw = getattr(self.db, "connection", None) if self.db is not None else None
        if raw is not None:
            try:
                raw.cancel()  # the running statement fails, the transaction rolls back
            except Exception:  # noqa: BLE001, S110 - the connection may have closed meanwhile
                pass
        return True


def _in_thread(fn: Callable[..., Any], kwargs: dict[str, Any], running: _Running) -> Any:
    """The tool in one transaction: committed unless the call was abandoned; a refusal (a tool error)
    commits what it recorded (a block, a quarantined fact) before it is raised, as on the REST door."""
    close_old_connections()
    running.db = connections["default"]
    refusal = None
    with transaction.atomic():
        try:
            result = fn(**kwargs)
        except ToolError as exc:
            refusal, result = exc, None
        with running.lock:
            if running.abandoned:
                transaction.set_rollback(True)
            else:
                running.committing = True
    if refusal is not None:
        raise refusal
    return result


# The threads tool calls run on. A call given up at its time limit keeps its thread until its work
# stops (a cancelled statement stops it at once; screening or a model's answer only when done), so the
# threads, and the database connections they hold, are counted until then: a burst of slow calls
# waits for a thread (within its own limit) instead of opening one connection more per call.
CALL_THREADS = config.get("MCP_CALL_THREADS")
_CALLS = ThreadPoolExecutor(max_workers=CALL_THREADS, thread_name_prefix="mcp-call")


async def _bounded(fn: Callable[..., Any], kwargs: dict[str, Any], timeout: float) -> Any:
    running = _Running()
    # The call's context goes with it (the http door's access token is a context variable).
    future = _CALLS.submit(contextvars.copy_context().run, _in_thread, fn, kwargs, running)
    try:
        with anyio.fail_after(timeout):
            return await asyncio.wrap_future(future)  # cancelled at the limit: a call still queued never runs
    except TimeoutError:
        if not running.abandon():  # it passed the limit while committing: what it did is kept, say so
            return await asyncio.wrap_future(future)
        raise _refusal(
            {
                "code": "timeout",
                "detail": f"The call took longer than {timeout:g} s and was stopped; nothing of it was kept.",
                "limit": timeout,
            }
        ) from None


def _answer(body: Any) -> CallToolResult:
    """A tool's answer: its JSON without the SDK's indentation (what a model reads, and pays for, is the
    text), and the same value as structured content."""
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body, ensure_ascii=False, separators=(",", ":")))],
        structured_content=body,
    )


def _unreadable(value: Any, path: str) -> tuple[str, str] | None:
    """The first string of a tool's arguments (keys included) that cannot be stored as text."""
    if isinstance(value, str):
        reason = unreadable_reason(value)
        return (path, reason) if reason else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _unreadable(str(key), path) or _unreadable(item, f"{path}.{key}")
            if found:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _unreadable(item, f"{path}.{i}")
            if found:
                return found
    return None


class MemoryMCPServer(MCPServer):
    """MCPServer whose every refused call answers the API's JSON with a stable code: arguments the SDK's
    schema refuses (`invalid`, naming the field), text that cannot be stored (`invalid`), a call past
    the time limit (`timeout`)."""

    def __init__(self, *args: Any, call_timeout: float = CALL_TIMEOUT_SECONDS, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.call_timeout = call_timeout

    def tool_of(self, annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a synchronous tool, run on a worker thread within the call time limit."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            async def bounded(**kwargs: Any) -> Any:
                return _answer(await _bounded(fn, kwargs, self.call_timeout))

            self.add_tool(bounded, annotations=annotations)
            return fn

        return register

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        record_process()  # this process's memory, CPU and files on /metrics, as web's requests do
        found = _unreadable(arguments or {}, "")
        if found:
            where, reason = found
            field_name = where.lstrip(".") or "arguments"
            body = {
                "code": "invalid",
                "detail": f"{field_name}: {reason}",
                "field": field_name,
                "errors": [{"field": field_name, "reason": reason}],
            }
            raise ToolError(f"Error executing tool {name}: {json.dumps(body)}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, SchemaError):
                raise
            body = invalid_body(exc.__cause__.errors(), default_field="arguments")
            raise ToolError(f"Error executing tool {name}: {json.dumps(body)}") from exc.__cause__
