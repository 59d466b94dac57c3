"""Versions of a fact: the chain `supersedes` / `superseded_by` and the edges that record it. Every
mutation that replaces a fact (a slot update, a surer contradicting fact, a correction, a promotion, a
reviewer's merge) builds the new version here and links it here."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone
from pgvector import Vector

from memory_admin.db.cursors import prepared_cursor, vector_cursor
from memory_admin.models import Edge, Fact, MemoryUser
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import relations_close
from memory_admin.services.facts.checks import content_hash

# What a new version keeps of the one it replaces unless told otherwise.
_INHERITED = (
    "tenant_id",
    "memory_user_id",
    "scope",
    "task_ref",
    "key",
    "content",
    "content_hash",
    "category",
    "kind",
    "confidence",
    "importance",
    "source",
    "pinned",
    "metadata",
    "embedding",
)


_INSERTED = [f for f in Fact._meta.local_concrete_fields if not f.generated]


def insert_fact(fact: Fact) -> None:
    """`fact.save(force_insert=True)` in one hand-built INSERT: the vector sent in binary (not 384
    floats as text, built in Python and parsed by the server) and only the database defaults read back
    (not the generated tsvector). The same columns and values as the ORM's insert (each field's
    `pre_save` and `get_db_prep_save`), and the instance is left saved as the ORM leaves it."""

    columns, values, params, defaults = [], [], [], []
    for field in _INSERTED:
        value = field.pre_save(fact, add=True)
        columns.append(connection.ops.quote_name(field.column))
        if isinstance(value, DatabaseDefault):
            values.append("DEFAULT")
            defaults.append(field)
            continue
        values.append("%s")
        if field.attname == "embedding" and value is not None:
            params.append(Vector(value))
        else:
            params.append(field.get_db_prep_save(value, connection))
    table = connection.ops.quote_name(Fact._meta.db_table)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(values)})"
    if defaults:
        sql += " RETURNING " + ", ".join(connection.ops.quote_name(f.column) for f in defaults)
    with vector_cursor(prepared=True) as cursor:  # the same text for every fact: parsed once per connection
        cursor.execute(sql, params)
        returned = cursor.fetchone() if defaults else ()
    for field, value in zip(defaults, returned, strict=True):
        setattr(fact, field.attname, value)
    fact._state.adding, fact._state.db = False, connection.alias


# FOR NO KEY UPDATE: writers of one user wait for each other, but a transaction that only references the
# user (an entity drawing's rows, an access-log flush's rows: their foreign-key checks take KEY SHARE at
# commit) is not blocked. FOR UPDATE blocked those checks, and two web processes writing while a flush or a
# drawing held fact rows deadlocked (bench/multihost.py: "deadlock detected", writes answered 503).
_LOCK_USER_SQL = "SELECT {pk} FROM {table} WHERE {pk} = %s FOR NO KEY UPDATE".format(
    pk=connection.ops.quote_name(MemoryUser._meta.pk.column), table=connection.ops.quote_name(MemoryUser._meta.db_table)
)


def lock_memory_user(memory_user_id: int) -> None:
    """Writes for one memory user are serialised: races on a key or a hash cannot double-insert. Fixed
    SQL (the row lock `select_for_update(no_key=True)` takes, without the ORM compiling it for every
    write), prepared."""
    with prepared_cursor() as cursor:
        cursor.execute(_LOCK_USER_SQL, [memory_user_id])


def continue_chain(new: Fact, old: Fact) -> None:
    """Make the unsaved `new` the next version of `old`."""
    new.version = old.version + 1
    new.supersedes = old


def successor(old: Fact, *, principal: Principal, **changes: Any) -> Fact:
    """The next version of `old`, not saved: the same owner, slot, kind, text and metadata unless
    `changes` says otherwise (a new `content` gets its hash), written now by the principal."""
    fields = {name: getattr(old, name) for name in _INHERITED}
    fields.update(id=uuid.uuid4(), valid_from=timezone.now(), agent_id=principal.agent_id, created_by=principal.actor)
    if "content" in changes:
        fields["content_hash"] = content_hash(changes["content"])
    fields.update(changes)
    new = Fact(**fields)
    continue_chain(new, old)
    return new


MAX_VERSIONS = 1000


def newest_version(fact: Fact) -> Fact:
    """The last version of the fact's chain: its successors followed while each is a new version of the
    one before (`supersedes` points back). A fact refused in favour of a standing one (`refuse`) is
    superseded by a fact of another chain: it is its own newest version."""
    current = fact
    for _ in range(MAX_VERSIONS):
        if not current.superseded_by_id:
            break
        nxt = Fact.objects.filter(pk=current.superseded_by_id, supersedes_id=current.pk).first()
        if nxt is None:
            break
        current = nxt
    return current


def link(principal: Principal, edge_type: str, src: Fact, dst: Fact) -> Edge:
    return Edge.objects.create(
        tenant_id=src.tenant_id or principal.tenant_id,
        type=edge_type,
        src_fact=src,
        dst_fact=dst,
        created_by=principal.actor,
    )


def supersede(old: Fact, *, by: Fact, reason: str) -> None:
    """Mark `old` superseded by `by` (which may not be inserted yet: the FK is checked at commit)."""
    Fact.objects.filter(pk=old.pk).update(
        status=Fact.Status.SUPERSEDED,
        superseded_by_id=by.pk,
        status_reason=reason[:300],
        contested=False,
        updated_at=timezone.now(),
    )
    old.status, old.superseded_by_id = Fact.Status.SUPERSEDED, by.pk
    relations_close(old=old, by=by)


def replace(principal: Principal, old: Fact, *, by: Fact, reason: str) -> None:
    """Store the unsaved `by` as the version that supersedes `old`, with the edge that says so."""
    supersede(old, by=by, reason=reason)
    insert_fact(by)
    link(principal, Edge.Type.SUPERSEDES, by, old)


def refuse(principal: Principal, new: Fact, *, by: Fact, reason: str) -> None:
    """Store the unsaved `new` as already superseded by the standing `by` it contradicts: kept for the
    record, never served."""
    new.status, new.superseded_by_id, new.status_reason = Fact.Status.SUPERSEDED, by.pk, reason[:300]
    insert_fact(new)
    link(principal, Edge.Type.CONTRADICTS, new, by)
