"""The memory users list: ranked by an aggregate over their facts, in a bounded window."""

from __future__ import annotations

from django.db.models import Count, F, FloatField, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from memory_admin.models import Contradiction, Fact, MemoryUser
from memory_admin.scoring import staleness_sql
from memory_admin.selectors.access import Principal, visible

# --- Memory users ---------------------------------------------------------------------------------

USER_SORTS = {
    "name": ("external_id",),
    "facts": ("-fact_count", "external_id"),
    "contradictions": ("-open_contradictions", "external_id"),
    "staleness": (F("avg_staleness").desc(nulls_last=True), "external_id"),
    "recent": ("-created_at",),
}


# Ranking by an aggregate over facts (count, mean staleness) reads every fact of every user ranked:
# at 10,000 users × 100 facts that is seconds. Past this many users it ranks the newest ones only
# (the page says so; a search narrows the window to the users it matches).
# Per sort: counting reads an index (~0.1 ms a user); mean staleness reads every fact (~1 ms a user).
USER_RANK_WINDOW = {"facts": 1000, "staleness": 150}


def _with_user_stats(qs: QuerySet[MemoryUser]) -> QuerySet[MemoryUser]:
    facts = Fact.objects.active().filter(memory_user=OuterRef("pk")).order_by()
    open_ = Contradiction.objects.filter(memory_user=OuterRef("pk"), status=Contradiction.Status.OPEN).order_by()
    return qs.annotate(
        fact_count=Coalesce(Subquery(facts.values("memory_user").annotate(n=Count("id")).values("n")), 0),
        open_contradictions=Coalesce(Subquery(open_.values("memory_user").annotate(n=Count("id")).values("n")), 0),
        # Raw SQL: the staleness formula is defined once, in scoring.py, over a named table alias.
        avg_staleness=RawSQL(  # noqa: S611 -- constant SQL from scoring.py, no user input
            f"(SELECT avg({staleness_sql('sf')}) FROM memory_admin_fact sf "
            "WHERE sf.memory_user_id = memory_admin_memoryuser.id AND sf.status = 'active')",
            (),
            output_field=FloatField(),
        ),
    )


def memory_users(principal: Principal, *, q: str = "", sort: str = "facts") -> tuple[QuerySet, dict[str, int] | None]:
    """The ids of the memory users to list, in order (page through these, then read a page's rows
    with `memory_user_rows`), and the ranking window when an aggregate sort was bounded: None, or
    {"ranked": n, "total": m}.

    Paging ids keeps OFFSET cheap: a deep page no longer computes every skipped user's statistics."""
    sort = sort if sort in USER_SORTS else "facts"
    qs = visible(principal, MemoryUser.objects.filter(erased_at__isnull=True))
    if q:
        qs = qs.filter(Q(external_id__icontains=q) | Q(display_name__icontains=q))
    window = None
    if sort in USER_RANK_WINDOW:
        total = qs.count()
        if total > USER_RANK_WINDOW[sort]:
            newest = qs.order_by("-created_at", "-pk").values("pk")[: USER_RANK_WINDOW[sort]]
            qs = qs.filter(pk__in=Subquery(newest))
            window = {"ranked": USER_RANK_WINDOW[sort], "total": total}
    if sort in ("facts", "staleness", "contradictions"):
        qs = _with_user_stats(qs)
    return qs.order_by(*USER_SORTS[sort], "pk").values_list("pk", flat=True), window


def memory_user_rows(principal: Principal, ids: list[int]) -> list[MemoryUser]:
    """One page of memory users with their active-fact count, open contradictions and mean staleness,
    in the order of `ids` (one query, over these rows only)."""
    rows = {u.pk: u for u in _with_user_stats(visible(principal, MemoryUser.objects.filter(pk__in=ids)))}
    return [rows[pk] for pk in ids if pk in rows]
