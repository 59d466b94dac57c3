"""Tenant-wide search: the product's ranking (retrieval.fact_search) across users."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from django.contrib.postgres.search import SearchQuery
from django.db import connection
from django.db.models import QuerySet

from memory_admin.models import Agent, Fact, MemoryUser
from memory_admin.retrieval import INCLUDABLE, Hit, fact_search_users, or_tsquery
from memory_admin.selectors.access import Principal, visible
from memory_admin.selectors.dashboard.overview import _page_sample, _table_rows

# --- Tenant-wide search: the product's ranking (retrieval.fact_search) across users ----------

SEARCH_USERS = 10
# fact_search ranks every fact of a user (its top k always fills up): a hit is shown when it shares a
# word with the query or is at least this close in meaning. The order stays fact_search's.
MATCH_MIN_COSINE = 0.3
SEARCH_FILTERS = ("status", "category", "source", "agent", "stale", "contested", "user")
# Candidate users are counted exactly over at most this many matching facts (through the GIN index).
# A word common across the tenant (say "prefers" in 100,000 of 1.1M facts) would otherwise mean
# reading every matching row to count it per user (~600 ms); past the bound the users are ranked by
# their matches in a page sample of about SEARCH_SAMPLE_ROWS facts, the overview's method. Each of
# the two reads costs about 40 ms at 1.1M facts on a quiet machine (bench/dashboard_pages.py).
SEARCH_COUNT_LIMIT = 1000
SEARCH_SAMPLE_ROWS = 10_000


def tenant_search(principal: Principal, query: str, filters: dict[str, str], k: int = 30) -> dict[str, Any]:
    """Facts across the tenant's users, ranked by `fact_search` (the one ranking): the users whose facts
    match the query's words (full-text, the GIN index; at most SEARCH_USERS, most matches first, or the
    one named by the `user` filter) are searched together (`fact_search_users`: fact_search's ranking per
    user, one statement for all of them), and the hits merged by final score. Filters narrow candidates
    and hits; reads are not counted.

    `sample_percent` is set when the words were too common to count every match (see
    SEARCH_COUNT_LIMIT): the users were then chosen by their matches in that sample."""
    query = (query or "").strip()
    status = filters.get("status") or ""
    statuses = [status] if status else ["active", "stale"]
    candidates = _search_candidates(principal, query, filters, statuses)
    if candidates is None:
        return {"hits": [], "users": 0, "searched": []}
    user_ids, percent = _candidate_users(candidates, exact=bool(filters.get("user")))
    users = {u.pk: u for u in visible(principal, MemoryUser.objects.filter(pk__in=user_ids))}
    searched = [users[u] for u in user_ids if u in users]
    include = (status,) if status in INCLUDABLE else ()
    per_user = fact_search_users(principal=principal, memory_users=searched, query=query, k=k, include=include)
    hits = [hit for user in searched for hit in per_user.get(user.pk, [])]
    keep = _search_hit_filter(principal, filters, statuses)
    hits = sorted((h for h in hits if keep(h)), key=lambda h: -h.final)
    return {
        "hits": hits[:k],
        "users": len(users),
        "searched": searched,
        "sample_percent": percent,
        "bounded": len(user_ids) == SEARCH_USERS and not filters.get("user"),
    }


def _search_candidates(
    principal: Principal, query: str, filters: dict[str, str], statuses: list[str]
) -> QuerySet[Fact] | None:
    """The facts whose users are worth searching: the named user's, else those sharing a word with the
    query (None when the query has no word to match)."""

    if not query:
        return None
    candidates = visible(principal, Fact.objects.filter(memory_user__isnull=False, status__in=statuses))
    if filters.get("user"):
        candidates = candidates.filter(memory_user__external_id=filters["user"])
    else:
        tsq = or_tsquery(query)
        if not tsq:
            return None
        candidates = candidates.filter(search_vector=SearchQuery(tsq, search_type="raw", config="english"))
    narrowing = {name: filters[name] for name in ("category", "source") if filters.get(name)}
    if filters.get("agent"):
        narrowing["agent__name__icontains"] = filters["agent"]
    if filters.get("contested") in ("yes", "no"):
        narrowing["contested"] = filters["contested"] == "yes"
    return candidates.filter(**narrowing)


def _top_users(counts: dict[int, int]) -> list[int]:
    return sorted(counts, key=lambda user_id: (-counts[user_id], user_id))[:SEARCH_USERS]


def _candidate_users(candidates: QuerySet[Fact], *, exact: bool) -> tuple[list[int], float | None]:
    """The SEARCH_USERS users with the most candidate facts, and the sample percent when they were
    counted in a sample. Two queries at most: the first SEARCH_COUNT_LIMIT + 1 matches (exact when
    there are no more, or when one user is named), then, for common words, the matches in a page sample
    of the table (TABLESAMPLE SYSTEM, the same pages all day, like the overview's distributions)."""
    first = Counter(candidates.order_by().values_list("memory_user", flat=True)[: SEARCH_COUNT_LIMIT + 1])
    if exact or sum(first.values()) <= SEARCH_COUNT_LIMIT:
        return _top_users(first), None
    percent = round(min(100.0, 100.0 * SEARCH_SAMPLE_ROWS / max(_table_rows(Fact), 1.0)), 3)
    sql, params = _page_sample(candidates.order_by().values_list("memory_user"), percent)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT s.user_id, count(*) FROM ({sql}) AS s(user_id) GROUP BY 1", params)  # noqa: S608
        sampled = dict(cursor.fetchall())
    # Too few matches in the sample (a small tenant in a big table): fill up from the counted ones.
    ranked = _top_users(sampled)
    ranked += [u for u in _top_users(first) if u not in sampled][: SEARCH_USERS - len(ranked)]
    return ranked, percent


def _search_hit_filter(principal: Principal, filters: dict[str, str], statuses: list[str]) -> Callable[[Hit], bool]:
    """Whether a fact_search hit belongs on the page: fact_search fills its k from every fact of a user,
    so the page's filters and the match rule (a shared word, or close in meaning) are checked here."""
    agent_ids = None
    if filters.get("agent"):
        agent_ids = set(
            Agent.objects.filter(tenant_id=principal.tenant_id, name__icontains=filters["agent"]).values_list(
                "pk", flat=True
            )
        )

    def keep(hit: Hit) -> bool:
        return (
            _search_hit_passes(hit, filters, statuses)
            and (hit.keyword > 0 or (hit.cosine or 0) >= MATCH_MIN_COSINE)
            and (agent_ids is None or hit.fact.agent_id in agent_ids)
        )

    return keep


def _search_hit_passes(hit: Hit, filters: dict[str, str], statuses: list[str]) -> bool:
    fact = hit.fact
    if fact.status not in statuses:
        return False
    for name in ("category", "source"):
        if filters.get(name) and getattr(fact, name) != filters[name]:
            return False
    if filters.get("contested") in ("yes", "no") and fact.contested != (filters["contested"] == "yes"):
        return False
    if filters.get("stale") == "yes" and not hit.stale:
        return False
    if filters.get("stale") == "no" and hit.stale:
        return False
    return True
