"""The per-user fact cap (SPEC §4 step 6): after a write, the weakest unpinned facts over the cap are
evicted."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from memory_admin.models import Fact, Relation, RelationEnd
from memory_admin.scoring import effective_confidence_sql
from memory_admin.selectors.access import Principal
from memory_admin.services.audit import audit_fact, fact_snapshot
from memory_admin.services.entities import relations_end

# Eviction candidates read with the count: a write adds one fact, so one is usually evicted.
CAP_PROBE = 4


def _weakest(memory_user_id: int, cap: int, grace_start: datetime, limit: int) -> list[Fact]:
    """The count of the user's active facts (`total`) and, when it is over the cap, the `limit` weakest
    unpinned ones in eviction order, in one statement (under the cap Postgres stops at the count).
    Hand-written: the ORM form of this query cost ~10 ms to compile on every write at the cap."""
    table = Fact._meta.db_table  # effective_confidence_sql() names the table's columns by table name
    columns = ", ".join(f"{table}.{f.column}" for f in Fact._meta.concrete_fields if f.attname not in Fact.VECTORS)
    young = f"{table}.created_at >= %s"
    # Whether the fact is the source of an open relation (an indexed probe): if no victim is, ending
    # their relations would close nothing, and its two ORM statements are skipped.
    states = (
        f"EXISTS (SELECT 1 FROM {Relation._meta.db_table} r "
        f"WHERE r.source_fact_id = {table}.id AND r.valid_to IS NULL) AS states_relation"
    )
    sql = (
        f"SELECT {columns}, {states}, total FROM {table}, "
        f"(SELECT count(*) AS total FROM {table} WHERE memory_user_id = %s AND status = %s) AS counted "
        f"WHERE {table}.memory_user_id = %s AND {table}.status = %s AND NOT {table}.pinned AND total > %s "
        f"ORDER BY (CASE WHEN {young} THEN 1 ELSE 0 END), "
        f"(CASE WHEN {young} THEN {table}.confidence ELSE {effective_confidence_sql()} END), "
        f"{table}.created_at LIMIT %s"
    )
    active = [memory_user_id, Fact.Status.ACTIVE]
    return list(Fact.objects.raw(sql, [*active, *active, cap, grace_start, grace_start, limit]))


def enforce_cap(principal: Principal, memory_user_id: int, cap: int) -> list[Fact]:
    """Evict until the user is at the cap. Pinned facts are exempt (and do not count towards what can
    be evicted). New information is not lost to the reads that old facts have had time to collect: a
    fact younger than FACT_CAP_GRACE_HOURS goes only after every older unpinned fact. Older facts go
    lowest effective confidence first, oldest first; young ones (a burst of writes past the cap) by
    stated confidence, oldest first, so the fact just written survives unless it is the least sure."""
    grace_start = timezone.now() - timedelta(hours=settings.FACT_CAP_GRACE_HOURS)
    victims = _weakest(memory_user_id, cap, grace_start, CAP_PROBE)
    if not victims:
        return []
    excess = victims[0].total - cap
    if excess > CAP_PROBE:  # the cap was lowered: many at once
        victims = _weakest(memory_user_id, cap, grace_start, excess)
    victims = victims[:excess]
    # By hand: the ORM's UPDATE compiled on every write at the cap (the same statement).
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Fact._meta.db_table} SET status = %s, status_reason = %s, updated_at = %s WHERE id = ANY(%s)",
            [Fact.Status.EVICTED.value, "per-user cap", timezone.now(), [v.pk for v in victims]],
        )
    if any(v.states_relation for v in victims):
        relations_end(fact_ids=[v.pk for v in victims], reason=RelationEnd.CAPPED)
    for victim in victims:
        before = fact_snapshot(victim)
        victim.status = Fact.Status.EVICTED
        audit_fact(
            principal,
            "fact.evict",
            victim,
            outcome="evicted",
            before=before,
            reason=f"over the cap of {cap} active facts; the weakest of the oldest",
        )
    return victims
