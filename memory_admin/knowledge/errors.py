"""The errors of ingestion, each with a stable code (the API maps DomainError to its status)."""

from __future__ import annotations

from memory_admin.errors import DomainError


class KnowledgeError(DomainError):
    """A source or document that cannot be taken as given: `code` says why (`unsupported_file_type`,
    `address_not_allowed`, `robots_disallowed`, `too_large`, `unreadable_document`, ...)."""

    code = "invalid_source"
    status = 422


class FetchRefused(KnowledgeError):
    """A URL the fetcher will not reach: a private, loopback or link-local address (or a redirect to one)
    on a host the operator did not allow, a scheme other than http(s), a robots.txt rule."""

    code = "address_not_allowed"
