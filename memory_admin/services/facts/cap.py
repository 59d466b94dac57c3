"""The per-user cap (SPEC §4 step 6): after a write, the weakest unpinned facts over the cap are
evicted."""

from __future__ import annotations

import functools
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from memory_admin.db.cursors import prepared_cursor
from memory_admin.db.hydrate import hydrate
from memory_admin.models import Fact, Relation, RelationEnd
from memory_admin.scoring import effective_confidence_sql
from memory_admin.selectors.access import Principal
from memory_admin.services.audit import audit_fact, fact_snapshot
from memory_admin.services.entities import relations_end

# The columns read back of an evicted fact: all but the vectors (and the generated tsvector's input is
# its content, read anyway).
_ATTNAMES = [f.attname for f in Fact._meta.concrete_fields if f.attname not in Fact.VECTORS]


@functools.cache
def _evict_statement() -> str:
    """Count the user's active facts, pick the weakest unpinned ones over the cap in eviction order and
    mark them evicted, in one statement (prepared: parsed and planned once per connection; it runs once
    for every fact written at the cap). Under the cap the LIMIT is 0 and nothing is touched.

    Each evicted row comes back with its eviction order (`young`, `strength`, `created_at`: the sort key,
    since UPDATE … RETURNING keeps no order) and whether it states an open relation (an indexed probe, for
    the victims only: if none does, ending their relations would close nothing)."""
    table = Fact._meta.db_table  # effective_confidence_sql() names the table's columns by table name
    young = f"{table}.created_at >= %(grace)s"
    weakest = (
        f"SELECT {table}.id, (CASE WHEN {young} THEN 1 ELSE 0 END) AS young, "
        f"(CASE WHEN {young} THEN {table}.confidence ELSE {effective_confidence_sql()} END) AS strength "
        f"FROM {table} WHERE {table}.memory_user_id = %(user)s AND {table}.status = %(active)s "
        f"AND NOT {table}.pinned ORDER BY 2, 3, {table}.created_at "
        f"LIMIT GREATEST((SELECT count(*) FROM {table} WHERE memory_user_id = %(user)s AND status = %(active)s) "
        f"- %(cap)s, 0)"
    )
    columns = ", ".join(f"evicted.{Fact._meta.get_field(name).column}" for name in _ATTNAMES)
    states = (
        f"EXISTS (SELECT 1 FROM {Relation._meta.db_table} r "
        "WHERE r.source_fact_id = evicted.id AND r.valid_to IS NULL) AS states_relation"
    )
    return (
        f"WITH victims AS ({weakest}) "
        f"UPDATE {table} AS evicted SET status = %(evicted)s, status_reason = %(reason)s, updated_at = %(now)s "
        f"FROM victims WHERE evicted.id = victims.id "
        f"RETURNING {columns}, {states}, victims.young, victims.strength"
    )


def enforce_cap(principal: Principal, memory_user_id: int, cap: int) -> list[Fact]:
    """Evict until the user is at the cap. Pinned facts are exempt (and do not count towards what can
    be evicted). New information is not lost to the reads that old facts have had time to collect: a
    fact younger than FACT_CAP_GRACE_HOURS goes only after every older unpinned fact. Older facts go
    lowest effective confidence first, oldest first; young ones (a burst of writes past the cap) by
    stated confidence, oldest first, so the fact just written survives unless it is the least sure."""
    now = timezone.now()
    params = {
        "grace": now - timedelta(hours=settings.FACT_CAP_GRACE_HOURS),
        "user": memory_user_id,
        "active": Fact.Status.ACTIVE.value,
        "cap": cap,
        "evicted": Fact.Status.EVICTED.value,
        "reason": "per-user cap",
        "now": now,
    }
    with prepared_cursor() as cursor:
        cursor.execute(_evict_statement(), params)
        rows = cursor.fetchall()
    if not rows:
        return []
    # Eviction order (the statement's ORDER BY); the rows hold their state after the UPDATE.
    rows.sort(key=lambda row: (row[-2], row[-1], row[_ATTNAMES.index("created_at")]))
    victims = hydrate(Fact, _ATTNAMES, [row[: len(_ATTNAMES)] for row in rows])
    if any(row[len(_ATTNAMES)] for row in rows):
        relations_end(fact_ids=[v.pk for v in victims], reason=RelationEnd.CAPPED)
    for victim in victims:
        victim.status = Fact.Status.ACTIVE
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
