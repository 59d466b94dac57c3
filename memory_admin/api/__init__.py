"""The agent API (SPEC §8): django-ninja, bearer keys, JSON errors with stable codes."""

from __future__ import annotations

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from memory_admin.errors import DomainError
from memory_admin.services.keys import principal_for_key


class BearerKey(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        principal = principal_for_key(token)
        if principal is not None:
            request.principal = principal
        return principal


api = NinjaAPI(
    title="memory-admin agent API",
    version="1",
    description="Memory for AI agents: write facts, search, fetch a token-capped context block.",
    auth=BearerKey(),
    urls_namespace="api",
)


@api.exception_handler(DomainError)
def _domain_error(request, exc: DomainError):
    return api.create_response(request, exc.as_dict(), status=exc.status)


@api.exception_handler(ValidationError)
def _validation_error(request, exc: ValidationError):
    errors = []
    for error in exc.errors:
        loc = [str(part) for part in error.get("loc", []) if part not in ("body", "payload", "query", "path")]
        errors.append({"field": ".".join(loc) or "body", "reason": error.get("msg", "invalid")})
    first = errors[0] if errors else {"field": "body", "reason": "invalid"}
    return api.create_response(
        request,
        {"code": "invalid", "detail": f"{first['field']}: {first['reason']}", "field": first["field"],
         "errors": errors},
        status=422,
    )


@api.exception_handler(AuthenticationError)
def _auth_error(request, exc):
    return api.create_response(
        request, {"code": "unauthorized", "detail": "A valid API key is required: Authorization: Bearer <key>."},
        status=401,
    )


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "error")
    return api.create_response(request, {"code": code, "detail": str(exc)}, status=exc.status_code)


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _db_down(request, exc: DatabaseError):
    return api.create_response(
        request, {"code": "database_unavailable", "detail": "The database cannot be reached; nothing was written."},
        status=503,
    )


# Routers register themselves on import.
from memory_admin.api import facts, memory, retrieval, system  # noqa: E402, F401
