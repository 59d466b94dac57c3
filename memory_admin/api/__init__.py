"""The agent API (SPEC §8): django-ninja, bearer keys, JSON errors with stable codes."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from memory_admin.errors import DomainError, RateLimited
from memory_admin.services.keys import principal_for_key
from memory_admin.services.throttle import api_key_hit


class BearerKey(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        principal = principal_for_key(token)
        if principal is not None:
            api_key_hit(principal.api_key_id)  # RateLimited: 429 with Retry-After
            request.principal = principal
        return principal


class AgentAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation) -> str:
        # Stable operation ids (the handler's name): the typed client and its drift test key on them.
        return operation.view_func.__name__


api = AgentAPI(
    title="memory-admin agent API",
    version="1",
    description="Memory for AI agents: write facts, search, fetch a token-capped context block.",
    auth=BearerKey(),
    urls_namespace="api",
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
    return {"code": "invalid", "detail": f"{first['field']}: {first['reason']}", "field": first["field"],
            "errors": errors}


@api.exception_handler(ValidationError)
def _validation_error(request, exc: ValidationError):
    errors: dict[str, str] = {}
    for error in exc.errors:
        loc = [str(part) for part in error.get("loc", [])
               if part not in _CONTAINERS and not _NOT_A_FIELD.search(str(part))]
        errors.setdefault(".".join(loc) or "body", error.get("msg", "invalid"))
    listed = [{"field": field, "reason": reason} for field, reason in errors.items()]
    return api.create_response(request, _invalid(listed), status=422)


@api.exception_handler(AuthenticationError)
def _auth_error(request, exc):
    return api.create_response(
        request, {"code": "unauthorized", "detail": "A valid API key is required: Authorization: Bearer <key>."},
        status=401,
    )


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):
        # ninja's "Cannot parse request body": malformed JSON (or not UTF-8) is invalid input (SPEC §11).
        return api.create_response(
            request, _invalid([{"field": "body", "reason": "the request body is not valid JSON"}]), status=422
        )
    code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "error")
    return api.create_response(request, {"code": code, "detail": str(exc)}, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def _body_too_big(request, exc):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return api.create_response(
        request, {"code": "content_too_large", "detail": f"A request body may hold at most {limit} bytes.",
                  "limit": limit},
        status=413,
    )


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _db_down(request, exc: DatabaseError):
    return api.create_response(
        request, {"code": "database_unavailable", "detail": "The database cannot be reached; nothing was written."},
        status=503,
    )


# Routers register themselves on import.
from memory_admin.api import facts, memory, messages, retrieval, system  # noqa: E402, F401
