"""Reads of facts: lists with cursor pagination, a fact's correction chain."""

from __future__ import annotations

import base64
from datetime import datetime
from uuid import UUID

from django.db.models import Q, QuerySet

from memory_admin.errors import Invalid
from memory_admin.models import AuditEvent, Fact, MemoryUser
from memory_admin.selectors.access import Principal, get_visible, visible

MAX_CHAIN = 200


def facts_of_user(principal: Principal, memory_user: MemoryUser) -> QuerySet[Fact]:
    return visible(principal, Fact.objects.for_user(memory_user)).select_related(
        "memory_user", "superseded_by_notebook"
    )


def encode_cursor(fact: Fact) -> str:
    return base64.urlsafe_b64encode(f"{fact.created_at.isoformat()}|{fact.pk}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        created, pk = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return datetime.fromisoformat(created), pk
    except (ValueError, UnicodeDecodeError) as exc:
        raise Invalid("cursor is not one this API returned.", field="cursor") from exc


def fact_list(
    principal: Principal,
    memory_user: MemoryUser,
    *,
    status: str | None = "active",
    category: str | None = None,
    kind: str | None = None,
    key: str | None = None,
    text: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> tuple[list[Fact], str | None]:
    qs = facts_of_user(principal, memory_user)
    if status:
        qs = qs.filter(status=status)
    if category:
        qs = qs.filter(category=category)
    if kind:
        qs = qs.filter(kind=kind)
    if key:
        qs = qs.filter(key=key)
    if text:
        qs = qs.filter(content__icontains=text)
    if cursor:
        created, pk = decode_cursor(cursor)
        qs = qs.filter(Q(created_at__lt=created) | Q(created_at=created, pk__lt=pk))
    rows = list(qs.order_by("-created_at", "-pk")[: limit + 1])
    next_cursor = encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], next_cursor


def fact_get_for(principal: Principal, fact_id: UUID | str) -> Fact:
    return get_visible(principal, Fact.objects.select_related("memory_user", "superseded_by_notebook"), pk=fact_id)


def fact_chain(fact: Fact) -> list[Fact]:
    """The whole correction chain this fact belongs to, oldest first (predecessors via `supersedes`,
    successors via `superseded_by`)."""
    base = Fact.objects.select_related("memory_user", "superseded_by_notebook")
    chain = [fact]
    seen = {fact.pk}
    cursor = fact
    while cursor.supersedes_id and cursor.supersedes_id not in seen and len(chain) < MAX_CHAIN:
        cursor = base.get(pk=cursor.supersedes_id)
        chain.insert(0, cursor)
        seen.add(cursor.pk)
    cursor = fact
    while cursor.superseded_by_id and cursor.superseded_by_id not in seen and len(chain) < MAX_CHAIN:
        cursor = base.get(pk=cursor.superseded_by_id)
        chain.append(cursor)
        seen.add(cursor.pk)
    return chain


def chain_events(principal: Principal, chain: list[Fact]) -> QuerySet[AuditEvent]:
    ids = [str(f.pk) for f in chain]
    return visible(principal, AuditEvent.objects.filter(target_type="fact", target_id__in=ids)).order_by("created_at")
