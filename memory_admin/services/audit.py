"""Audit events: one immutable row for every mutation and every refusal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import connection

from memory_admin.models import AuditEvent, Fact
from memory_admin.selectors.access import Principal

# While set, `audit` appends its events here instead of inserting each one (see `buffered_audits`).
_buffer: ContextVar[list[AuditEvent] | None] = ContextVar("audit_buffer", default=None)


@contextmanager
def buffered_audits() -> Iterator[list[AuditEvent]]:
    """Collect the audit events of a block and insert them with one statement when it ends without an
    exception, in the order they were recorded. Use it inside the transaction whose writes they
    describe; a caller that rolls back part of its work (a savepoint) drops that part's events from the
    list it is given."""
    events: list[AuditEvent] = []
    token = _buffer.set(events)
    try:
        yield events
    finally:
        _buffer.reset(token)
    if events:
        _insert(events)


_COLUMNS = [f for f in AuditEvent._meta.local_concrete_fields if not f.primary_key]
_ROW = "(" + ", ".join(["%s"] * len(_COLUMNS)) + ")"


def _insert(events: list[AuditEvent]) -> None:
    """`AuditEvent.objects.bulk_create(events)` as one hand-built INSERT (every write ends with one: the
    ORM compiled it each time): the same columns and values (each field's `pre_save` and
    `get_db_prep_save`), the ids read back in order, and the instances left saved as bulk_create leaves
    them."""
    params = []
    for event in events:
        params.extend(field.get_db_prep_save(field.pre_save(event, add=True), connection) for field in _COLUMNS)
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(AuditEvent._meta.db_table)} ({', '.join(quote(f.column) for f in _COLUMNS)}) "
        f"VALUES {', '.join([_ROW] * len(events))} RETURNING {quote(AuditEvent._meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = cursor.fetchall()
    for event, (pk,) in zip(events, ids, strict=True):
        event.pk = pk
        event._state.adding, event._state.db = False, connection.alias


def fact_snapshot(fact: Fact | None) -> dict[str, Any] | None:
    """What an audit event keeps of a fact (content is already scanned: never a raw secret)."""
    if fact is None:
        return None
    return {
        "id": str(fact.pk),
        "key": fact.key,
        "content": fact.content,
        "category": fact.category,
        "kind": fact.kind,
        "confidence": round(float(fact.confidence), 4),
        "source": fact.source,
        "status": fact.status,
        "version": fact.version,
        "pinned": fact.pinned,
    }


def audit(
    principal: Principal,
    action: str,
    *,
    outcome: str = "",
    target: Any = None,
    target_type: str = "",
    target_id: str = "",
    memory_user_id: int | None = None,
    before: dict | None = None,
    after: dict | None = None,
    reason: str = "",
) -> AuditEvent:
    if target is not None:
        target_type = target_type or target._meta.model_name
        target_id = target_id or str(target.pk)
        memory_user_id = memory_user_id or getattr(target, "memory_user_id", None)
    event = AuditEvent(
        tenant_id=principal.tenant_id,
        memory_user_id=memory_user_id,
        actor_type=principal.actor_type,
        actor=principal.actor,
        action=action,
        outcome=outcome,
        target_type=target_type,
        target_id=target_id,
        before=before,
        after=after,
        reason=reason[:2000],
    )
    events = _buffer.get()
    if events is not None:
        events.append(event)
    else:
        event.save(force_insert=True)
    return event


def audit_fact(
    principal: Principal, action: str, fact: Fact, *, outcome: str, before: dict, reason: str = ""
) -> AuditEvent:
    """The audit event of a change to one fact: its snapshot before (taken by the caller before the
    change) and now."""
    return audit(
        principal, action, outcome=outcome, target=fact, before=before, after=fact_snapshot(fact), reason=reason
    )
