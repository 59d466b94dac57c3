"""The access log (models.FactRead): which key read which fact, browsed per fact, per key and per user.
Tenant-scoped in the query; a principal limited to some memory users sees only their facts' reads."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from django.db.models import Count, Max, QuerySet, Sum

from memory_admin.models import ApiKey, Fact, FactRead, MemoryUser
from memory_admin.selectors.access import Principal, _user_q, visible


@dataclass(frozen=True, slots=True)
class ReadFilters:
    """What the log is narrowed to; every part optional. Unknown ids narrow to nothing (never an error:
    another tenant's id looks like no id)."""

    fact_id: UUID | None = None
    key_id: int | None = None
    user: str = ""  # a memory user's external id
    via: str = ""


def fact_reads(principal: Principal, filters: ReadFilters) -> QuerySet[FactRead]:
    """The log rows the principal may see, newest first, narrowed by `filters`."""
    rows = FactRead.objects.filter(tenant_id=principal.tenant_id)
    if principal.restricted:
        rows = rows.filter(_user_q(principal, "memory_user"))
    if filters.fact_id is not None:
        rows = rows.filter(fact_id=filters.fact_id)
    if filters.key_id is not None:
        rows = rows.filter(api_key_id=filters.key_id)
    if filters.user:
        rows = rows.filter(memory_user__external_id=filters.user)
    if filters.via in FactRead.Via.values:
        rows = rows.filter(via=filters.via)
    return rows.order_by("-read_at", "-pk")


def reads_summary(rows: QuerySet[FactRead]) -> dict:
    """Reads, distinct facts and keys, and the latest read, of the rows (one aggregate query)."""
    return rows.order_by().aggregate(
        reads=Sum("reads"),
        facts=Count("fact_id", distinct=True),
        keys=Count("api_key_id", distinct=True),
        latest=Max("read_at"),
    )


def reads_page_rows(ids: list[int]) -> list[FactRead]:
    """The page's rows with what the page shows of each (key and agent, fact, owner): one query."""
    rows = (
        FactRead.objects.filter(pk__in=ids)
        .select_related("api_key__agent", "memory_user", "fact")
        .defer(*[f"fact__{name}" for name in Fact.VECTORS])
    )
    by_id = {row.pk: row for row in rows}
    return [by_id[pk] for pk in ids if pk in by_id]


def filter_names(principal: Principal, filters: ReadFilters) -> dict:
    """What the filters name, for the page's heading: the key, the fact, the user (each None if unknown)."""
    names: dict = {"key": None, "fact": None, "user": None}
    if filters.key_id is not None:
        names["key"] = (
            ApiKey.objects.filter(tenant_id=principal.tenant_id, pk=filters.key_id).select_related("agent").first()
        )
    if filters.fact_id is not None:
        names["fact"] = visible(principal, Fact.objects.filter(pk=filters.fact_id)).defer(*Fact.VECTORS).first()
    if filters.user:
        names["user"] = MemoryUser.objects.filter(tenant_id=principal.tenant_id, external_id=filters.user).first()
    return names
