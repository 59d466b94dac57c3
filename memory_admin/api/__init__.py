"""The agent API (SPEC §8): django-ninja, bearer keys, JSON errors with stable codes."""

from __future__ import annotations

import functools
import re
import time

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, JsonResponse
from django.urls import re_path
from django.views import defaults
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from memory_admin.api import (
    checkpoints,
    entities,
    entity_curation,
    facts,
    knowledge,
    memory,
    messages,
    retrieval,
    store,
    system,
)
from memory_admin.api.docs import OfflineSwagger
from memory_admin.api.schemas import IDENTIFIER_MAX, IDENTIFIER_PATTERN, ErrorOut
from memory_admin.errors import DomainError, Forbidden, RateLimited
from memory_admin.services.keys import principal_for_request

_USER_ID = re.compile(IDENTIFIER_PATTERN.removeprefix("^").removesuffix("$"))
# The POST routes whose handler takes the user the key statement found: the writes of facts, and the body
# forms of search and the context block (which only read).
_USER_READS = ("<user_id>/search", "<user_id>/context")
_USER_POSTS = ("/facts", "/facts/batch", *_USER_READS)
# POST routes that only read (a read-only key may call them); every other POST, PUT, PATCH, DELETE writes.
_READING_POSTS = ("/store/get", "/store/search", "/store/namespaces", "/checkpoints/query", *_USER_READS)


class BearerKey(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        # A read of one memory user, or a write of facts for one: the key statement looks the user up too
        # (see principal_for_request), if the id is one the route's validation will accept (anything
        # else is answered by it, unread).
        match = request.resolver_match
        looked_up = request.method == "GET" or (
            request.method == "POST" and match and match.route.endswith(_USER_POSTS)
        )
        user_id = match.kwargs.get("user_id") if match is not None and looked_up else None
        if user_id is not None and not (len(user_id) <= IDENTIFIER_MAX and _USER_ID.fullmatch(user_id)):
            user_id = None
        principal, known = principal_for_request(token, user_id)  # counted too: RateLimited, 429 with Retry-After
        if principal is not None and principal.read_only and request.method != "GET" and match is not None:
            if not match.route.endswith(_READING_POSTS):
                raise Forbidden("This API key is read-only: it may search and read, not write.", code="read_only_key")
        if principal is not None:
            request.principal = principal
            request.known_user = known
        return principal


# Error answers each operation can give besides its own (SPEC §11: every status code a route can return
# is in its OpenAPI entry). Documented here once for all routes rather than on every decorator.
_ERRORS_ALWAYS = {
    400: "Refused before any route ran (`bad_request`), e.g. a Host header the server does not serve.",
    422: "Invalid input: `field` names what was wrong, `errors` lists every problem.",
    503: "The database cannot be reached; nothing was written.",
}
_ERRORS_AUTHENTICATED = {
    401: "Missing, invalid or revoked API key.",
    403: "The key's role may not do this.",
    404: "No such object visible to this key (another tenant's objects look the same).",
    429: "Too many requests: retry after the `Retry-After` header's seconds.",
}
_ERRORS_WITH_BODY = {413: "The request body or a field in it is over its size limit (`limit`)."}
_ERRORS_ON_WRITE = {409: "A version conflict or a state that no longer allows this (`current_version`...)."}


class AgentApi(NinjaAPI):
    """NinjaAPI with stable operation ids, every error answer documented, and JSON 404/405 answers."""

    def get_openapi_operation_id(self, operation) -> str:
        # The handler's name (unique across the API): clients generated from the schema keep their
        # method names when a module is renamed.
        return operation.view_func.__name__

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["ErrorOut"] = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
        error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}}
        for path, methods in schema["paths"].items():
            for method, operation in methods.items():
                codes = dict(_ERRORS_ALWAYS)
                if operation.get("security"):
                    codes |= _ERRORS_AUTHENTICATED
                if "requestBody" in operation:
                    codes |= _ERRORS_WITH_BODY
                if method != "get" and operation.get("security") and not _reading_post(method, path):
                    codes |= _ERRORS_ON_WRITE
                responses = operation.setdefault("responses", {})
                for status, description in sorted(codes.items()):
                    responses.setdefault(status, {"description": description, **error})
        return schema

    def _get_urls(self):
        urls = super()._get_urls()
        for pattern in urls:
            pattern.callback = _json_method_not_allowed(_known_query_only(self, pattern.callback))
        # Last: any other path under the API is a JSON 404, never Django's HTML page.
        urls.append(re_path(r"^[\s\S]*$", _unknown_route, name="unknown-route"))  # any path, even with a newline
        return urls


_ROUTE_PARAM = re.compile(r"<(?:[^>:]+:)?([^>]+)>")


def _reading_post(method: str, path: str) -> bool:
    """An OpenAPI path and method that only reads though it is a POST (_READING_POSTS)."""
    return method == "post" and _ROUTE_PARAM.sub(r"{\1}", path).endswith(
        tuple(_ROUTE_PARAM.sub(r"{\1}", route) for route in _READING_POSTS)
    )


@functools.cache
def _query_names(api: NinjaAPI) -> dict[tuple[str, str], frozenset[str]]:
    """(OpenAPI path, method) → the query parameters the schema documents for that operation."""
    schema = api.get_openapi_schema()
    return {
        (path, method.upper()): frozenset(p["name"] for p in op.get("parameters", []) if p["in"] == "query")
        for path, methods in schema["paths"].items()
        for method, op in methods.items()
    }


@functools.lru_cache(maxsize=1024)
def _known_names(api: NinjaAPI, route: str, method: str) -> frozenset[str] | None:
    """The documented query parameters of a Django route pattern and method (None: not an operation)."""
    return _query_names(api).get(("/" + _ROUTE_PARAM.sub(r"{\1}", route), method))


def _known_query_only(api: NinjaAPI, view):
    """Refuse query parameters an operation does not document, as bodies refuse unknown fields: a
    misspelt filter (`?stauts=stale`) must not silently answer the unfiltered list."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        route = request.resolver_match.route if request.resolver_match else ""
        known = _known_names(api, route, request.method)
        unknown = [name for name in request.GET if known is not None and name not in known]
        if unknown:
            field = unknown[0][:100] or "query"
            return api.create_response(
                request, _invalid([{"field": field, "reason": "unknown query parameter"}]), status=422
            )
        return view(request, *args, **kwargs)

    return wrapper


def _json_method_not_allowed(view):
    @functools.wraps(view)  # keeps csrf_exempt
    def wrapper(request, *args, **kwargs):
        started = time.perf_counter()
        response = view(request, *args, **kwargs)
        # The whole API view (key check, rate count, handler, rendering) for Server-Timing, beside the
        # parts a handler reports itself (bench/: server time of the request, not only of the query).
        view_ms = f"view_ms;dur={(time.perf_counter() - started) * 1000:.3f}"
        timing = response.get("Server-Timing")
        response["Server-Timing"] = f"{timing}, {view_ms}" if timing else view_ms
        if response.status_code == 405:
            allowed = response.get("Allow", "")
            response = JsonResponse(
                {
                    "code": "method_not_allowed",
                    "detail": f"{request.method} is not allowed here; use {allowed}.",
                    "allowed": [m.strip() for m in allowed.split(",") if m.strip()],
                },
                status=405,
            )
            response["Allow"] = allowed
        return response

    return wrapper


def _unknown_route(request, *args, **kwargs):
    return JsonResponse({"code": "not_found", "detail": "No such API route; see /api/v1/docs."}, status=404)


_unknown_route.csrf_exempt = True


def bad_request(request: HttpRequest, exception: Exception | None = None):
    """Django's answer (urls.handler400) to a request it refuses before or around any view
    (SuspiciousOperation: more query parameters than DATA_UPLOAD_MAX_NUMBER_FIELDS, a Host header not
    allowed, ...): under /api/ JSON with a stable code like every other API error, elsewhere Django's page."""
    if not request.path_info.startswith("/api/"):
        return defaults.bad_request(request, exception)
    if isinstance(exception, TooManyFieldsSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        return JsonResponse(_invalid([{"field": "query", "reason": f"at most {limit} parameters"}]), status=422)
    return JsonResponse({"code": "bad_request", "detail": "The request was refused as malformed."}, status=400)


api = AgentApi(
    title="memory-admin agent API",
    version="1",
    description="Memory for AI agents: write facts, search, fetch a token-capped context block.",
    auth=BearerKey(),
    urls_namespace="api",
    docs=OfflineSwagger(),
)


@api.exception_handler(DomainError)
def _domain_error(request, exc: DomainError):
    response = api.create_response(request, exc.as_dict(), status=exc.status)
    if isinstance(exc, RateLimited):
        response["Retry-After"] = str(exc.extra["retry_after"])
    return response


# Parts of a pydantic error location that name a union branch or a dict key check, not a field the
# client sent: `confidence.float`, `confidence.int`, `pii_policy.password.[key]` are all about one field.
_NOT_A_FIELD = re.compile(r"^(?:float|int|str|bool|none|list|dict)$|[\[\]]|^(?:function|constrained|lax|strict)-")
_CONTAINERS = ("body", "payload", "query", "path", "filters")


def _invalid(errors: list[dict[str, str]]):
    first = errors[0] if errors else {"field": "body", "reason": "invalid"}
    return {
        "code": "invalid",
        "detail": f"{first['field']}: {first['reason']}",
        "field": first["field"],
        "errors": errors,
    }


def invalid_body(errors: list[dict], *, default_field: str = "body") -> dict:
    """The `invalid` answer for pydantic errors: one entry per field the client sent (union branches and
    containers dropped from the location). The REST API and the MCP tools answer with this one shape."""
    fields: dict[str, str] = {}
    for error in errors:
        loc = [
            str(part) for part in error.get("loc", []) if part not in _CONTAINERS and not _NOT_A_FIELD.search(str(part))
        ]
        fields.setdefault(".".join(loc) or default_field, error.get("msg", "invalid"))
    return _invalid([{"field": field, "reason": reason} for field, reason in fields.items()])


@api.exception_handler(ValidationError)
def _validation_error(request, exc: ValidationError):
    return api.create_response(request, invalid_body(exc.errors), status=422)


@api.exception_handler(AuthenticationError)
def _auth_error(request, exc):
    return api.create_response(
        request,
        {"code": "unauthorized", "detail": "A valid API key is required: Authorization: Bearer <key>."},
        status=401,
    )


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
        # ninja's "Cannot parse request body": malformed JSON (or not UTF-8, or nested beyond what the
        # parser can follow) is invalid input (SPEC §11).
        return api.create_response(
            request, _invalid([{"field": "body", "reason": "the request body is not valid JSON"}]), status=422
        )
    code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "error")
    return api.create_response(request, {"code": code, "detail": str(exc)}, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def _body_too_big(request, exc):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return api.create_response(
        request,
        {"code": "content_too_large", "detail": f"A request body may hold at most {limit} bytes.", "limit": limit},
        status=413,
    )


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _db_down(request, exc: DatabaseError):
    return api.create_response(
        request,
        {"code": "database_unavailable", "detail": "The database cannot be reached; nothing was written."},
        status=503,
    )


# Every router, registered here and nowhere else (the router modules do not know the API object).
for _router in (
    facts.router,
    memory.router,
    messages.router,
    retrieval.router,
    system.router,
    entities.router,
    entity_curation.router,
    store.router,
    checkpoints.router,
    knowledge.router,
):
    api.add_router("", _router)
