"""Domain errors: each carries a stable code, an HTTP status and a sentence a person can act on."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    code = "error"
    status = 400

    def __init__(self, detail: str, *, code: str | None = None, status: int | None = None, **extra: Any):
        super().__init__(detail)
        self.detail = detail
        if code:
            self.code = code
        if status:
            self.status = status
        self.extra = extra

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "detail": self.detail, **self.extra}


class NotFound(DomainError):
    """Also what another tenant's (or another user's) object looks like: 404, never 403."""

    code = "not_found"
    status = 404


class Forbidden(DomainError):
    """The principal can see the object but its role may not do this (e.g. an auditor writing)."""

    code = "forbidden"
    status = 403


class Conflict(DomainError):
    code = "version_conflict"
    status = 409


class TooLarge(DomainError):
    code = "too_large"
    status = 413


class Invalid(DomainError):
    code = "invalid"
    status = 422


class Blocked(DomainError):
    """A secret or blocked PII was found; nothing of it was stored or is echoed."""

    code = "blocked"
    status = 422


class AlreadyResolved(DomainError):
    code = "already_resolved"
    status = 409


class RateLimited(DomainError):
    """Too many requests: the answer carries `retry_after` (seconds), also sent as `Retry-After`."""

    code = "rate_limited"
    status = 429


class Unavailable(DomainError):
    """Not ready to serve (503): the answer says which part is down (`database`, `reasons`...)."""

    code = "database_unavailable"
    status = 503

    def as_dict(self) -> dict[str, Any]:
        return {"status": "unavailable", **super().as_dict()}
