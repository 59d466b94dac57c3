"""Messages in, extraction scheduled; threads closed; failed batches retried (SPEC §5).

Nothing here calls a model: requests only write rows and move the thread's debounce deadline
(`Thread.extract_due_at`); the Celery sweeper does the rest (see `extraction.pipeline`).

Secrets in messages: a message is the conversation log, so refusing it would lose the whole turn
(and every other message of the request) over one pasted key. Instead the secret — and any contact
PII the tenant policy would block or redact — is replaced by `[REDACTED:<kind>]` before anything is
stored; a PiiBlock (action `redacted`, route `message`, kinds, redacted preview, keyed fingerprint)
and an audit event record it, and the API reports which messages were redacted. The raw value is
never stored, never sent to a model, and so can never reach a fact; facts still pass the full scan
of the write path as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory_admin import celery as celery_module
from memory_admin import metrics, requestlog
from memory_admin.errors import Conflict, Invalid, NotFound, TooLarge
from memory_admin.models import ExtractionBatch, MemoryUser, Message, PiiBlock, Thread
from memory_admin.selectors.access import ADMIN, CURATE, WRITE_MEMORY, Principal, get_visible, visible
from memory_admin.services.audit import audit
from memory_admin.services.pii import find, fingerprint, preview
from memory_admin.services.screening import screen_identifier
from memory_admin.services.settings import tenant_settings

MAX_MESSAGES_PER_REQUEST = 500
ROLES = tuple(Message.Role.values)


@dataclass
class MessageIn:
    role: str
    content: str
    created_at: datetime | None = None
    skip: str = ""  # passed over, not stored: "no_text" (a chat format's tool call or image, nothing to read)


@dataclass
class PostResult:
    thread: Thread
    messages: list[Message]
    pending: int
    skipped: list[dict] = field(default_factory=list)
    redacted: list[dict] = field(default_factory=list)
    extraction: str = "scheduled"  # scheduled, disabled, nothing_to_extract


def _redact_message(principal: Principal, text: str, *, memory_user_id: int) -> tuple[str, dict | None]:
    """Replace secrets and blocked/redacted contact PII; record the redaction. Flagged PII stays."""
    findings = find(text)
    if not findings:
        return text, None
    policy = tenant_settings(principal.tenant_id).pii_policy
    to_remove = [f for f in findings if f.is_secret or policy.get(f.kind, "block") in ("block", "redact")]
    action = PiiBlock.Action.REDACTED if to_remove else PiiBlock.Action.FLAGGED
    parts, cursor = [], 0
    for f in to_remove:
        parts += [text[cursor : f.start], f"[REDACTED:{f.kind}]"]
        cursor = f.end
    clean = "".join(parts) + text[cursor:]
    if to_remove and any(f.is_secret or policy.get(f.kind, "block") in ("block", "redact") for f in find(clean)):
        # The cut text still shows a value (an overlap the scan's map could not separate): the
        # message is kept as a placeholder rather than with the value in it.
        clean = "[REDACTED:message]"
    kinds = sorted({f.kind for f in findings})
    metrics.pii_found("message", action, kinds)
    block = PiiBlock.objects.create(
        tenant_id=principal.tenant_id,
        memory_user_id=memory_user_id,
        agent_id=principal.agent_id,
        actor=principal.actor,
        route="message",
        action=action,
        kinds=kinds,
        redacted_preview=preview(text, findings),
        fingerprint=fingerprint(text, findings),
    )
    audit(
        principal,
        "message.write",
        outcome=action,
        target=block,
        memory_user_id=memory_user_id,
        after={"kinds": kinds, "preview": block.redacted_preview},
        reason=f"{', '.join(kinds)} found by the secret/PII scan; the message was stored "
        f"{'redacted' if to_remove else 'and flagged'}",
    )
    return clean, {"kinds": kinds, "block_id": str(block.pk), "action": action}


def check_messages(messages: list[MessageIn]) -> None:
    if not messages:
        raise Invalid("Send at least one message.", field="messages")
    if len(messages) > MAX_MESSAGES_PER_REQUEST:
        raise TooLarge(
            f"At most {MAX_MESSAGES_PER_REQUEST} messages per request; split the rest.",
            code="too_many_messages",
            limit=MAX_MESSAGES_PER_REQUEST,
        )
    for i, m in enumerate(messages):
        if m.skip:
            continue
        size = len(m.content.encode())
        if size > settings.MAX_MESSAGE_BYTES:
            raise TooLarge(
                f"messages[{i}] has {size} bytes; a message may hold at most {settings.MAX_MESSAGE_BYTES}. "
                "Nothing was stored.",
                code="content_too_large",
                limit=settings.MAX_MESSAGE_BYTES,
                field=f"messages.{i}.content",
            )
        if m.role not in ROLES:
            raise Invalid(f"messages[{i}].role must be one of {', '.join(ROLES)}.", field=f"messages.{i}.role")
        if not m.content.strip():
            raise Invalid(f"messages[{i}] is empty.", field=f"messages.{i}.content")


def message_post(
    *, principal: Principal, memory_user: MemoryUser, thread_id: str, messages: list[MessageIn]
) -> PostResult:
    """Append messages to a thread and push its extraction deadline (the debounce). Messages shorter
    than the tenant's minimum are logged but never extracted. Posting to a closed thread reopens it:
    the new messages become the thread's next episode."""
    principal.require(WRITE_MEMORY)
    check_messages(messages)
    if not thread_id or len(thread_id) > 200:
        raise Invalid("thread_id must be 1 to 200 characters.", field="thread_id")
    if not Thread.objects.filter(memory_user=memory_user, external_id=thread_id).exists():
        screen_identifier(principal, thread_id, what="thread id", route="thread_id", memory_user_id=memory_user.pk)
    tenant = tenant_settings(principal.tenant_id)
    now = timezone.now()
    with transaction.atomic():
        thread, _ = Thread.objects.get_or_create(
            memory_user=memory_user, external_id=thread_id, defaults={"tenant_id": principal.tenant_id}
        )
        # Serialises with the sweeper planning this thread, so the deadline and the set of pending
        # messages always agree.
        thread = Thread.objects.select_for_update().get(pk=thread.pk)
        rows, skipped, redacted = [], [], []
        for i, m in enumerate(messages):
            if m.skip:
                skipped.append({"index": i, "reason": m.skip})
                continue
            content, redaction = _redact_message(principal, m.content, memory_user_id=memory_user.pk)
            if redaction:
                redacted.append({"index": i, **redaction})
            short = len(content.strip()) < tenant.min_message_chars
            if short:
                skipped.append({"index": i, "reason": "too_short"})
            rows.append(
                Message(
                    tenant_id=principal.tenant_id,
                    memory_user=memory_user,
                    thread=thread,
                    role=m.role,
                    content=content,
                    created_at=m.created_at or now,
                    status=Message.Status.SKIPPED if short else Message.Status.PENDING,
                    skip_reason="too_short" if short else "",
                    request_id=requestlog.current(),
                )
            )
        Message.objects.bulk_create(rows)
        pending = sum(1 for r in rows if r.status == Message.Status.PENDING)
        thread.last_message_at = now
        thread.closed_at = None
        fields = ["last_message_at", "closed_at"]
        if pending:
            # The debounce: every new message pushes the deadline; quiet for the window → extracted.
            thread.extract_due_at = now + timedelta(seconds=tenant.debounce_seconds)
            fields.append("extract_due_at")
        thread.save(update_fields=fields)
    extraction = "scheduled" if thread.extract_due_at else "nothing_to_extract"
    if not tenant.extraction_enabled:
        extraction = "disabled"
    return PostResult(thread, rows, pending, skipped, redacted, extraction)


def thread_for(principal: Principal, memory_user: MemoryUser, thread_id: str) -> Thread:
    thread = visible(principal, Thread.objects.all()).filter(memory_user=memory_user, external_id=thread_id).first()
    if thread is None:
        raise NotFound("No thread with that id is visible to you.")
    return thread


def thread_close(
    *, principal: Principal, memory_user: MemoryUser, thread_id: str, outcome: str | None = None
) -> Thread:
    """Close a thread: its pending messages are extracted now (no debounce) and it becomes an episode."""
    principal.require(WRITE_MEMORY)
    if outcome not in (None, "success", "failure", "unknown"):
        raise Invalid("outcome must be success, failure or unknown.", field="outcome")
    thread = thread_for(principal, memory_user, thread_id)
    now = timezone.now()
    with transaction.atomic():
        thread = Thread.objects.select_for_update().get(pk=thread.pk)
        has_pending = Message.objects.filter(thread=thread, status=Message.Status.PENDING, batch__isnull=True).exists()
        thread.closed_at = now
        # Due now: should the close task be lost, the sweeper extracts it on its next tick.
        thread.extract_due_at = now if has_pending else None
        thread.save(update_fields=["closed_at", "extract_due_at"])
        audit(
            principal,
            "thread.close",
            outcome="closed",
            target=thread,
            memory_user_id=memory_user.pk,
            after={"thread": thread.external_id, "outcome": outcome},
        )
        transaction.on_commit(lambda: _dispatch_close(thread.pk, outcome))
    return thread


def _dispatch_close(thread_pk: int, outcome: str | None) -> None:

    celery_module.dispatch("extraction.close_thread", thread_pk, outcome)


def batch_retry(principal: Principal, batch_id: int) -> ExtractionBatch:
    """Retry a failed batch (dashboard button, API, management command): fresh attempts, same
    messages. Only failed batches can be retried; anything else answers 409."""
    if not (principal.can(CURATE) or principal.can(ADMIN)):
        principal.require(CURATE)
    with transaction.atomic():
        batch = get_visible(principal, ExtractionBatch.objects.select_for_update(), pk=batch_id)
        if batch.status != ExtractionBatch.Status.FAILED:
            raise Conflict(
                f"Batch {batch.pk} is {batch.status}; only failed batches can be retried.",
                code="not_failed",
                status_now=batch.status,
            )
        previous = batch.error
        batch.status = ExtractionBatch.Status.PENDING
        batch.attempts = 0
        batch.error = f"retried by {principal.actor}; previous failure: {previous}"[:2000]
        batch.finished_at = None
        batch.lease_until = timezone.now()
        batch.dispatched_at = None
        batch.save(update_fields=["status", "attempts", "error", "finished_at", "lease_until", "dispatched_at"])
        audit(principal, "extraction.retry", outcome="pending", target=batch, reason=previous)
        transaction.on_commit(lambda: _dispatch_batch(batch.pk))
    return batch


def _dispatch_batch(batch_pk: int) -> None:

    celery_module.dispatch_batches([batch_pk])
