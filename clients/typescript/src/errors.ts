/**
 * One error class per stable error code of the agent API, as in the Python client
 * (`memory_admin_client.errors`): catch a class, read `code`, `detail`, `status` and the whole `body`.
 */

export type ErrorBody = { [key: string]: unknown };

/** Any refusal by the server: `code` (stable), `detail` (a sentence), `status`, and the whole `body`. */
export class MemoryAdminError extends Error {
  readonly code: string;
  readonly detail: string;
  readonly status: number;
  readonly body: ErrorBody;

  constructor(code: string, detail: string, status: number, body: ErrorBody = {}, options?: { cause?: unknown }) {
    super(`${code}: ${detail}`, options);
    this.name = new.target.name;
    this.code = code;
    this.detail = detail;
    this.status = status;
    this.body = body;
  }
}

/** 400: a request the server could not make sense of. */
export class BadRequest extends MemoryAdminError {}

/** 401 `unauthorized`: the key is missing, unknown or revoked. */
export class Unauthorized extends MemoryAdminError {}

/** 403 `forbidden` (and `read_only_scope`): the key sees the object but may not do this. */
export class Forbidden extends MemoryAdminError {}

/** 403 `key_paused`: an admin paused this key; nothing it asks is answered until it is resumed. */
export class KeyPaused extends Forbidden {}

/** 403 `read_only_key`: the key may search and read, not write. */
export class ReadOnlyKey extends Forbidden {}

/** 401 `key_expired`: the key's expiry has passed; ask an admin for a new one. */
export class KeyExpired extends Unauthorized {}

/** 403 `read_only_scope`: a shared (org or global) fact, entity or relation is read-only to this key. */
export class ReadOnlyScope extends Forbidden {}

/** 404 `not_found`: also what another tenant's object, or an unreachable user, looks like. */
export class NotFound extends MemoryAdminError {}

/** 409: the object is not in the state this call needs. */
export class Conflict extends MemoryAdminError {}

/** 409 `version_conflict`: a stale notebook or skill version; nothing was overwritten. */
export class VersionConflict extends Conflict {
  get currentVersion(): number | undefined {
    return numberOr(this.body.current_version);
  }
}

/** 409 `already_resolved`: someone decided this already; `statusNow` says how it stands. */
export class AlreadyResolved extends Conflict {
  get statusNow(): string | undefined {
    return stringOr(this.body.status_now);
  }
}

/** 409 `entity_merged`: the entity was merged into another; act on that one, or undo the merge first. */
export class EntityMerged extends Conflict {}

/** 409 `already_superseded`: the fact was corrected already; correct its successor. */
export class AlreadySuperseded extends Conflict {}

/** 409 `key_revoked`: a revoked key cannot be paused or resumed; create a new one. */
export class KeyRevoked extends Conflict {}

/** 409 `ingestion_disabled`: trained knowledge is switched off for the tenant (an admin switches it on). */
export class IngestionDisabled extends Conflict {}

/** 409 `crawl_in_progress`: a crawl of this source is already running; `knowledge.get` shows its progress. */
export class CrawlInProgress extends Conflict {}

/** 409 `source_paused`: the source is paused; `knowledge.resume` it first. */
export class SourcePaused extends Conflict {}

/**
 * 413 `content_too_large` (and `batch_too_large`, `metadata_too_large`, `too_many_messages`, `too_many_items`);
 * 414 `request_line_too_long` and 431 `headers_too_large`, from the web server.
 */
export class TooLarge extends MemoryAdminError {
  get limit(): number | undefined {
    return numberOr(this.body.limit);
  }
}

export type FieldError = { field: string; reason: string };

/** 422 `invalid`: `field` names what was wrong; `errors` lists every field with its reason. */
/**
 * 413 `screening_budget_exceeded`: screening the text ran past its time budget; nothing was stored.
 * A shorter text (or one split in parts) goes through.
 */
export class ScreeningBudgetExceeded extends TooLarge {}

export class Invalid extends MemoryAdminError {
  get field(): string | undefined {
    return stringOr(this.body.field);
  }

  get errors(): FieldError[] {
    return Array.isArray(this.body.errors) ? (this.body.errors as FieldError[]) : [];
  }
}

/**
 * 422 on an import whose history the write path could never make: `supersession_cycle`,
 * `no_current_version` (a superseded fact nothing replaced) or `two_current_versions`. Nothing was written.
 */
export class ImpossibleHistory extends Invalid {}

/**
 * 422: a knowledge source that cannot be taken as given (its subclasses name why); nothing was stored. Also
 * `invalid_source`, `file_missing`, `host_unresolvable`, `fetch_failed`, `fetch_timeout`,
 * `too_many_redirects` and `unreadable_document`.
 */
export class KnowledgeRefused extends Invalid {
  get limit(): number | undefined {
    return numberOr(this.body.limit);
  }
}

/** 422 `invalid_url`: not an http(s) URL with a host (and no user name or password). */
export class InvalidUrl extends KnowledgeRefused {}

/** 422 `address_not_allowed`: a private, loopback or link-local address the operator did not allow. */
export class AddressNotAllowed extends KnowledgeRefused {}

/** 422 `unsupported_file_type`: upload Markdown, plain text, HTML or PDF. */
export class UnsupportedFileType extends KnowledgeRefused {}

/** 422 `folder_not_allowed`: folders are read only under the roots an operator configured. */
export class FolderNotAllowed extends KnowledgeRefused {}

/** 422 `folder_not_found`: no folder at that path. */
export class FolderNotFound extends KnowledgeRefused {}

/** 422 `limit_too_high`: `max_depth`, `max_pages` or `max_bytes` (`field`) is over the server's `limit`. */
export class LimitTooHigh extends KnowledgeRefused {}

/** 422: a merge, split or rename the graph cannot take (its subclasses name which); nothing changed. */
export class EntityCurationRefused extends Invalid {}

/** 422 `entity_merge_same`: an entity cannot be merged into itself. */
export class EntityMergeSame extends EntityCurationRefused {}

/** 422 `entity_scope_mismatch`: merge within one user, or a user's entity into a shared one. */
export class EntityScopeMismatch extends EntityCurationRefused {}

/** 422 `entity_alias_unknown`: the alias to split off is not one of the entity's names. */
export class EntityAliasUnknown extends EntityCurationRefused {}

/** 422 `entity_alias_last`: an entity's only name cannot be split off; rename it instead. */
export class EntityAliasLast extends EntityCurationRefused {}

/** 422 `entity_name_empty`: a rename to a blank name. */
export class EntityNameEmpty extends EntityCurationRefused {}

/** 422 `entity_name_too_long`: a name is at most 200 characters. */
export class EntityNameTooLong extends EntityCurationRefused {}

/** 422 `entity_name_refused`: the name looks like a secret, contact details or instructions to a model. */
export class EntityNameRefused extends EntityCurationRefused {}

/** 422 `relation_corrected`: a correction (or its fact's end) closed the relation; change the fact. */
export class RelationCorrected extends EntityCurationRefused {}

/** 422 `blocked`: a secret or blocked PII; nothing of it was stored or echoed. `blockId` names the PII block. */
export class Blocked extends MemoryAdminError {
  get blockId(): string | undefined {
    return stringOr(this.body.block_id);
  }
}

/** 422 `instruction_like`: a notebook, skill or correction that reads as instructions to a model was refused. */
export class InstructionLike extends MemoryAdminError {
  get field(): string | undefined {
    return stringOr(this.body.field);
  }
}

/** 405 `method_not_allowed`: `allowed` lists the methods the route takes. */
export class MethodNotAllowed extends MemoryAdminError {
  get allowed(): string[] {
    return Array.isArray(this.body.allowed) ? (this.body.allowed as string[]) : [];
  }
}

/** 429 `rate_limited`: wait `retryAfter` seconds (from the Retry-After header). */
export class RateLimited extends MemoryAdminError {
  readonly retryAfter: number | undefined;

  constructor(code: string, detail: string, status: number, body: ErrorBody = {}, retryAfter?: number) {
    super(code, detail, status, body);
    this.retryAfter = retryAfter;
  }
}

/** 503 `database_unavailable`, or the server could not be reached at all; nothing was written. */
export class Unavailable extends MemoryAdminError {}

/** 503 `background_stale` from the readiness check: the scheduler's sweep or the worker's heartbeat is late. */
export class BackgroundStale extends Unavailable {}

/** The request never got an answer (refused, reset, timed out) after the retries allowed. */
export class ConnectionFailed extends Unavailable {}

/** `timeout` (the MCP door's time limit per call): the call was stopped and nothing of it was kept. */
export class TimedOut extends Unavailable {}

/** Any other 5xx. */
export class ServerError extends MemoryAdminError {}

/**
 * A deliberate write (`facts.add`) the write path kept out of memory: `outcome` says why
 * (`rejected_low_confidence`, `quarantined`, `overruled`, `capped`), `result` is the whole answer.
 * Nothing the agent asked for is served; nothing was lost silently.
 */
export class WriteRefused extends MemoryAdminError {
  readonly outcome: string;
  readonly result: ErrorBody;

  constructor(result: { outcome: string; reason?: string }) {
    super(result.outcome, result.reason || `the write path answered ${result.outcome}`, 200, result);
    this.outcome = result.outcome;
    this.result = result;
  }
}

type ErrorClass = new (code: string, detail: string, status: number, body?: ErrorBody) => MemoryAdminError;

export const BY_CODE: Readonly<Record<string, ErrorClass>> = {
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  read_only_scope: ReadOnlyScope,
  not_found: NotFound,
  version_conflict: VersionConflict,
  already_superseded: AlreadySuperseded,
  already_resolved: AlreadyResolved,
  not_active: Conflict,
  not_failed: Conflict,
  not_forgotten: Conflict,
  key_taken: Conflict,
  key_paused: KeyPaused,
  key_expired: KeyExpired,
  read_only_key: ReadOnlyKey,
  key_revoked: KeyRevoked,
  unknown_memory_user: Invalid,
  expiry_in_past: Invalid,
  invalid_expiry: Invalid,
  invalid_source: KnowledgeRefused,
  invalid_url: InvalidUrl,
  address_not_allowed: AddressNotAllowed,
  host_unresolvable: KnowledgeRefused,
  unsupported_file_type: UnsupportedFileType,
  file_missing: KnowledgeRefused,
  folder_not_allowed: FolderNotAllowed,
  folder_not_found: FolderNotFound,
  limit_too_high: LimitTooHigh,
  fetch_failed: KnowledgeRefused,
  fetch_timeout: KnowledgeRefused,
  too_many_redirects: KnowledgeRefused,
  unreadable_document: KnowledgeRefused,
  ingestion_disabled: IngestionDisabled,
  crawl_in_progress: CrawlInProgress,
  source_paused: SourcePaused,
  content_too_large: TooLarge,
  too_large: TooLarge,
  batch_too_large: TooLarge,
  metadata_too_large: TooLarge,
  too_many_messages: TooLarge,
  too_many_items: TooLarge,
  // Refused by the web server before the API read it: a request line or headers over its limits.
  request_line_too_long: TooLarge,
  headers_too_large: TooLarge,
  invalid: Invalid,
  screening_budget_exceeded: ScreeningBudgetExceeded,
  supersession_cycle: ImpossibleHistory,
  no_current_version: ImpossibleHistory,
  two_current_versions: ImpossibleHistory,
  entity_merged: EntityMerged,
  entity_merge_same: EntityMergeSame,
  entity_scope_mismatch: EntityScopeMismatch,
  entity_alias_unknown: EntityAliasUnknown,
  entity_alias_last: EntityAliasLast,
  entity_name_empty: EntityNameEmpty,
  entity_name_too_long: EntityNameTooLong,
  entity_name_refused: EntityNameRefused,
  relation_corrected: RelationCorrected,
  blocked: Blocked,
  instruction_like: InstructionLike,
  method_not_allowed: MethodNotAllowed,
  background_stale: BackgroundStale,
  rate_limited: RateLimited,
  database_unavailable: Unavailable,
  bad_request: BadRequest,
  timeout: TimedOut,
};

export const BY_STATUS: Readonly<Record<number, ErrorClass>> = {
  400: BadRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  405: MethodNotAllowed,
  409: Conflict,
  413: TooLarge,
  422: Invalid,
  429: RateLimited,
  503: Unavailable,
};

/** The error for an error answer: by its stable code, else by its status. */
export function errorFor(status: number, body: unknown, headers?: Headers): MemoryAdminError {
  const fields: ErrorBody =
    body !== null && typeof body === "object" && !Array.isArray(body) ? (body as ErrorBody) : {};
  const code = stringOr(fields.code) || "error";
  const detail = stringOr(fields.detail) || `HTTP ${status}`;
  const cls =
    (Object.hasOwn(BY_CODE, code) ? BY_CODE[code] : undefined) ??
    BY_STATUS[status] ??
    (status >= 500 ? ServerError : MemoryAdminError);
  if (cls === RateLimited) {
    return new RateLimited(code, detail, status, fields, retryAfterSeconds(headers, fields));
  }
  return new cls(code, detail, status, fields);
}

/** Seconds to wait from a Retry-After header (or the body's `retry_after`); undefined for an HTTP date. */
export function retryAfterSeconds(headers: Headers | undefined, body: ErrorBody = {}): number | undefined {
  const raw = headers?.get("retry-after") ?? body.retry_after;
  if (raw === undefined || raw === null || raw === "") return undefined;
  const seconds = Number(raw);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
}

function numberOr(value: unknown): number | undefined {
  return typeof value === "number" ? value : undefined;
}

function stringOr(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}
