"""One exception per stable error code of the agent API (README, "Agent API")."""

from __future__ import annotations

from typing import Any


class MemoryAdminError(Exception):
    """Any refusal by the server: `code` (stable), `detail` (a sentence), `status`, and the whole `body`."""

    def __init__(self, code: str, detail: str, status: int, body: dict[str, Any] | None = None):
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.status = status
        self.body = body or {}


class BadRequest(MemoryAdminError):
    """400: a request the server could not make sense of."""


class Unauthorized(MemoryAdminError):
    """401 `unauthorized`: the key is missing, unknown or revoked."""


class Forbidden(MemoryAdminError):
    """403 `forbidden` (and `read_only_scope`, `read_only_key`, `key_paused`): the key sees the object but may
    not do this."""


class KeyPaused(Forbidden):
    """403 `key_paused`: an admin paused this key; nothing it asks is answered until it is resumed."""


class ReadOnlyKey(Forbidden):
    """403 `read_only_key`: the key may search and read, not write."""


class KeyExpired(Unauthorized):
    """401 `key_expired`: the key's expiry has passed; ask an admin for a new one."""


class ReadOnlyScope(Forbidden):
    """403 `read_only_scope`: a shared (org or global) fact, or a shared entity or relation, is read-only to
    this key (an ordinary key, or an admin key limited to some users)."""


class NotFound(MemoryAdminError):
    """404 `not_found`: also what another tenant's object, or an unreachable user, looks like."""


class Conflict(MemoryAdminError):
    """409: the object is not in the state this call needs."""


class VersionConflict(Conflict):
    """409 `version_conflict`: a stale notebook or skill version; nothing was overwritten."""

    @property
    def current_version(self) -> int | None:
        return self.body.get("current_version")


class AlreadyResolved(Conflict):
    """409 `already_resolved`: someone decided this already (a review item, a merge undone, a relation
    closed); `status_now` says how it stands."""

    @property
    def status_now(self) -> str | None:
        return self.body.get("status_now")


class EntityMerged(Conflict):
    """409 `entity_merged`: the entity was merged into another; act on that one (`merged_into` in its
    detail), or undo the merge first."""


class AlreadySuperseded(Conflict):
    """409 `already_superseded`: the fact was replaced by a newer version (a correction, a new value for
    its key, a surer fact) since you read it; `current_id` is the version served now. Both correcting and
    forgetting an old version answer this: act on `current_id` (after reading it)."""

    @property
    def current_id(self) -> str | None:
        return self.body.get("current_id") or None


class KeyRevoked(Conflict):
    """409 `key_revoked`: a revoked key cannot be paused or resumed; create a new one."""


class IngestionDisabled(Conflict):
    """409 `ingestion_disabled`: trained knowledge is switched off for the tenant (an admin switches it on
    with `knowledge.update_settings(ingestion_enabled=True)`)."""


class CrawlInProgress(Conflict):
    """409 `crawl_in_progress`: a crawl of this source is already running; its progress is in `knowledge.get`."""


class SourcePaused(Conflict):
    """409 `source_paused`: the source is paused; `knowledge.resume` it first."""


class TooLarge(MemoryAdminError):
    """413 `content_too_large` (and `batch_too_large`, `metadata_too_large`, `too_many_messages`, `too_many_items`);
    414 `request_line_too_long` and 431 `headers_too_large`, from the web server."""

    @property
    def limit(self) -> int | None:
        return self.body.get("limit")


class ScreeningBudgetExceeded(TooLarge):
    """413 `screening_budget_exceeded`: screening the text ran past its time budget; nothing was stored.
    A shorter text (or one split in parts) goes through."""


class Invalid(MemoryAdminError):
    """422 `invalid`: `field` names what was wrong; `errors` lists every field with its reason."""

    @property
    def field(self) -> str | None:
        return self.body.get("field")

    @property
    def errors(self) -> list[dict[str, str]]:
        return self.body.get("errors", [])


class ImpossibleHistory(Invalid):
    """422 on an import whose history the write path could never make: `supersession_cycle`,
    `no_current_version` (a superseded fact nothing replaced) or `two_current_versions`. Nothing was written."""


class EntityCurationRefused(Invalid):
    """422: a merge, split or rename the graph cannot take (its subclasses name which); nothing changed."""


class EntityMergeSame(EntityCurationRefused):
    """422 `entity_merge_same`: an entity cannot be merged into itself."""


class EntityScopeMismatch(EntityCurationRefused):
    """422 `entity_scope_mismatch`: merge within one user, or a user's entity into a shared one, never a
    shared entity into one user's (nor one user's into another's)."""


class EntityAliasUnknown(EntityCurationRefused):
    """422 `entity_alias_unknown`: the alias to split off is not one of the entity's names."""


class EntityAliasLast(EntityCurationRefused):
    """422 `entity_alias_last`: an entity's only name cannot be split off; rename it instead."""


class EntityNameEmpty(EntityCurationRefused):
    """422 `entity_name_empty`: a rename to a blank name."""


class EntityNameTooLong(EntityCurationRefused):
    """422 `entity_name_too_long`: a name is at most 200 characters."""


class EntityNameRefused(EntityCurationRefused):
    """422 `entity_name_refused`: the name looks like a secret, contact details or instructions to a model."""


class RelationCorrected(EntityCurationRefused):
    """422 `relation_corrected`: a correction (or its fact's end) closed the relation; change the fact."""


class KnowledgeRefused(Invalid):
    """422: a knowledge source that cannot be taken as given (its subclasses name why); nothing was stored.
    Also `invalid_source`, `file_missing`, `host_unresolvable`, `fetch_failed`, `fetch_timeout`,
    `too_many_redirects` and `unreadable_document` (the last four are mostly a document's `error`)."""

    @property
    def limit(self) -> int | None:
        return self.body.get("limit")


class InvalidUrl(KnowledgeRefused):
    """422 `invalid_url`: not an http(s) URL with a host (and no user name or password)."""


class AddressNotAllowed(KnowledgeRefused):
    """422 `address_not_allowed`: the URL reaches a private, loopback or link-local address the operator did
    not allow (or robots.txt refuses it)."""


class UnsupportedFileType(KnowledgeRefused):
    """422 `unsupported_file_type`: upload Markdown, plain text, HTML or PDF (by name ending or media type)."""


class FolderNotAllowed(KnowledgeRefused):
    """422 `folder_not_allowed`: folders are read only under the roots an operator configured."""


class FolderNotFound(KnowledgeRefused):
    """422 `folder_not_found`: no folder at that path (under an allowed root)."""


class LimitTooHigh(KnowledgeRefused):
    """422 `limit_too_high`: `max_depth`, `max_pages` or `max_bytes` (in `field`) is over the server's
    limit (`limit`)."""


class Blocked(MemoryAdminError):
    """422 `blocked`: a secret or blocked PII; nothing of it was stored or echoed. `block_id` names the
    PII block an auditor can look up."""

    @property
    def block_id(self) -> str | None:
        return self.body.get("block_id")


class InstructionLike(MemoryAdminError):
    """422 `instruction_like`: a notebook, skill or correction that reads as instructions to a model was
    refused; nothing was stored. `field` names what was refused."""

    @property
    def field(self) -> str | None:
        return self.body.get("field")


class WriteRefused(MemoryAdminError):
    """A write the server answered, but did not serve: `outcome` (also the `code`) says why, `result` is
    the whole `WriteResult` (`result.fact` is the row kept for review, if any; `result.reason`). Raised by
    `facts.add` for quarantined, rejected_low_confidence, overruled, capped (and error); a secret is
    `Blocked`. The subclasses name each outcome."""

    def __init__(self, code: str, detail: str, status: int, body: dict[str, Any] | None = None, result: Any = None):
        super().__init__(code, detail, status, body)
        self.outcome = code
        self.result = result


class Quarantined(WriteRefused):
    """`quarantined`: it reads as instructions to a model (or came from an external source): held for a
    person to review, never served. Do not retry with the same text."""


class RejectedLowConfidence(WriteRefused):
    """`rejected_low_confidence`: below the tenant's confidence gate. What an agent deliberately saves is
    `source="agent_stated"` (the default, 0.8); an explicit low `confidence` or `agent_inferred` meets the gate."""


class Overruled(WriteRefused):
    """`overruled`: the notebook, a pinned slot or a surer fact says otherwise; `result.other_fact_id` is it."""


class Capped(WriteRefused):
    """`capped`: the user is at the cap of active facts and every other one is surer or pinned: evicted at once."""


class WriteFailed(WriteRefused):
    """`error` (a batch item): the write failed midway and left nothing behind; it may be retried."""


class BatchRefused(WriteRefused):
    """`facts.add_batch` where some facts were not served: `refused` lists those items (`index`,
    `outcome`, `block_id` for a blocked one), `result` is the whole `BatchResult`: the others were
    written and are not undone. `outcome` is the first refused item's."""

    @property
    def refused(self) -> list[Any]:
        return [item for item in self.result.results if item.outcome in REFUSED_OUTCOMES]


REFUSED_OUTCOMES = frozenset({"quarantined", "rejected_low_confidence", "overruled", "capped", "blocked", "error"})


class MethodNotAllowed(MemoryAdminError):
    """405 `method_not_allowed`: `allowed` lists the methods the route takes."""

    @property
    def allowed(self) -> list[str]:
        return self.body.get("allowed", [])


class RateLimited(MemoryAdminError):
    """429 `rate_limited`: wait `retry_after` seconds (from the Retry-After header)."""

    def __init__(
        self, code: str, detail: str, status: int, body: dict[str, Any] | None = None, retry_after: float | None = None
    ):
        super().__init__(code, detail, status, body)
        self.retry_after = retry_after


class Unavailable(MemoryAdminError):
    """503 `database_unavailable`, or the server could not be reached at all; nothing was written."""


class BackgroundStale(Unavailable):
    """503 `background_stale` from the readiness check: the scheduler's sweep or the worker's heartbeat is
    older than the server allows."""


class ConnectionFailed(Unavailable):
    """The request never got an answer (refused, reset, timed out) after the retries allowed."""


class TimedOut(Unavailable):
    """`timeout` (the MCP door's time limit per call): the call was stopped and nothing of it was kept."""


class ServerError(MemoryAdminError):
    """Any other 5xx."""


BY_CODE: dict[str, type[MemoryAdminError]] = {
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "read_only_scope": ReadOnlyScope,
    "not_found": NotFound,
    "version_conflict": VersionConflict,
    "already_superseded": AlreadySuperseded,
    "already_resolved": AlreadyResolved,
    "not_active": Conflict,
    "not_failed": Conflict,
    "not_forgotten": Conflict,
    "key_taken": Conflict,
    # API keys: paused, expired, read-only; and the key management's own refusals.
    "key_paused": KeyPaused,
    "key_expired": KeyExpired,
    "read_only_key": ReadOnlyKey,
    "key_revoked": KeyRevoked,
    "unknown_memory_user": Invalid,
    "expiry_in_past": Invalid,
    "invalid_expiry": Invalid,
    # Trained knowledge (client.knowledge).
    "invalid_source": KnowledgeRefused,
    "invalid_url": InvalidUrl,
    "address_not_allowed": AddressNotAllowed,
    "host_unresolvable": KnowledgeRefused,
    "unsupported_file_type": UnsupportedFileType,
    "file_missing": KnowledgeRefused,
    "folder_not_allowed": FolderNotAllowed,
    "folder_not_found": FolderNotFound,
    "limit_too_high": LimitTooHigh,
    "fetch_failed": KnowledgeRefused,
    "fetch_timeout": KnowledgeRefused,
    "too_many_redirects": KnowledgeRefused,
    "unreadable_document": KnowledgeRefused,
    "ingestion_disabled": IngestionDisabled,
    "crawl_in_progress": CrawlInProgress,
    "source_paused": SourcePaused,
    "content_too_large": TooLarge,
    "too_large": TooLarge,
    "batch_too_large": TooLarge,
    "metadata_too_large": TooLarge,
    "too_many_messages": TooLarge,
    "too_many_items": TooLarge,
    # Refused by the web server before the API read it: a request line or headers over its limits.
    "request_line_too_long": TooLarge,
    "headers_too_large": TooLarge,
    "invalid": Invalid,
    "screening_budget_exceeded": ScreeningBudgetExceeded,
    "supersession_cycle": ImpossibleHistory,
    "no_current_version": ImpossibleHistory,
    "two_current_versions": ImpossibleHistory,
    # Entity curation's refusals (POST /entity-merges, /entities/{id}/split|rename, /relations/{id}/...).
    "entity_merged": EntityMerged,
    "entity_merge_same": EntityMergeSame,
    "entity_scope_mismatch": EntityScopeMismatch,
    "entity_alias_unknown": EntityAliasUnknown,
    "entity_alias_last": EntityAliasLast,
    "entity_name_empty": EntityNameEmpty,
    "entity_name_too_long": EntityNameTooLong,
    "entity_name_refused": EntityNameRefused,
    "relation_corrected": RelationCorrected,
    "blocked": Blocked,
    "instruction_like": InstructionLike,
    "method_not_allowed": MethodNotAllowed,
    "background_stale": BackgroundStale,
    "rate_limited": RateLimited,
    "database_unavailable": Unavailable,
    "bad_request": BadRequest,
    "timeout": TimedOut,
    # The write outcomes that are not served (`facts.add` raises them from the answer's `outcome`).
    "write_refused": WriteRefused,
    "quarantined": Quarantined,
    "rejected_low_confidence": RejectedLowConfidence,
    "overruled": Overruled,
    "capped": Capped,
}

BY_OUTCOME: dict[str, type[WriteRefused]] = {
    "quarantined": Quarantined,
    "rejected_low_confidence": RejectedLowConfidence,
    "overruled": Overruled,
    "capped": Capped,
    "error": WriteFailed,
}

BY_STATUS: dict[int, type[MemoryAdminError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    405: MethodNotAllowed,
    422: Invalid,
    429: RateLimited,
    503: Unavailable,
}


def write_refused(result: Any) -> WriteRefused:
    """The exception for a `WriteResult` whose outcome is not served."""
    cls = BY_OUTCOME.get(result.outcome, WriteRefused)
    detail = result.reason or f"the write path answered {result.outcome}"
    return cls(result.outcome, f"not served: {detail}", 200, {"outcome": result.outcome}, result=result)


def batch_refused(result: Any) -> BatchRefused:
    refused = [item for item in result.results if item.outcome in REFUSED_OUTCOMES]
    named = ", ".join(f"#{item.index} {item.outcome}" for item in refused)
    detail = f"{len(refused)} of {len(result.results)} facts were not served ({named}); the others were written"
    return BatchRefused(refused[0].outcome, detail, 200, {"outcome": refused[0].outcome}, result=result)


def error_for(status: int, body: Any, headers: Any = None) -> MemoryAdminError:
    """The exception for an error answer: by its stable code, else by its status."""
    if not isinstance(body, dict):
        body = {}
    code = str(body.get("code") or "error")
    detail = str(body.get("detail") or f"HTTP {status}")
    cls = BY_CODE.get(code) or BY_STATUS.get(status) or (ServerError if status >= 500 else MemoryAdminError)
    if cls is RateLimited:
        return RateLimited(code, detail, status, body, retry_after=_retry_after(headers, body))
    return cls(code, detail, status, body)


def _retry_after(headers: Any, body: dict[str, Any]) -> float | None:
    raw = headers.get("retry-after") if headers is not None else None
    raw = raw if raw is not None else body.get("retry_after")
    try:
        return float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP date: callers fall back to their own backoff
