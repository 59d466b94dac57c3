"""Compile once, bind per request. A hot statement is built by the ORM (so it goes through `visible()`,
the one access check) with sentinels in place of the request's values, compiled to SQL once per
principal and shape (the caller's `functools.lru_cache`), then bound per request by replacing each
sentinel with its value: the ORM's compiler runs once, not on every search or context block."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

_PLACEHOLDER = re.compile(r"%%|%s")
_PLAIN = re.compile(r"[a-z][a-z0-9_]{0,62}")


def compiled(qs: QuerySet, *, tenant_id: int | None = None) -> tuple[str, tuple]:
    """The queryset's SQL and parameters (Django's public `Query.sql_with_params`). With `tenant_id` (the
    principal's, for a statement compiled per principal), the code's constants and that tenant are
    written into the SQL (`inline_constants`)."""
    sql, params = qs.query.sql_with_params()
    if tenant_id is None:
        return sql, tuple(params)
    return inline_constants(sql, tuple(params), tenant_id=tenant_id)


def inline_constants(sql: str, params: tuple, *, tenant_id: int) -> tuple[str, tuple]:
    """The statement with the parameters that are constants of a statement compiled per principal written
    as literals: each member of a string enum (`Fact.Status.ACTIVE`: the code's, never a request's value)
    and each int equal to the principal's tenant id (a literal of the same value, whatever it stood for);
    the other parameters kept, in order.

    Why: a prepared statement is planned for its parameters (a custom plan) on each of its first five
    executions; then Postgres keeps one generic plan if it is estimated no dearer. A generic plan cannot
    prove a partial index's condition from a parameter (`status = $42` does not imply `status = 'active'`,
    so the shared facts' HNSW index was out of its reach), nor know how many rows a parameter's tenant
    has (a tenant with 30 shared facts beside one with 100,000 needs an exact scan, not the HNSW walk the
    filter then empties). With both written in, the generic plan is the custom plan's, and a search stops
    paying for planning (bench/JOURNAL.md: ~5 ms of the candidate statement's ~10 at 1.1M facts)."""
    out: list[str] = []
    kept: list[Any] = []
    values = iter(params)
    start = 0
    for placeholder in _PLACEHOLDER.finditer(sql):
        if placeholder.group() == "%%":
            continue
        value = next(values)
        if isinstance(value, enum.Enum) and isinstance(value.value, str) and _PLAIN.fullmatch(value.value):
            literal = f"'{value.value}'"
        elif type(value) is int and value == tenant_id:
            literal = str(int(value))
        else:
            kept.append(value)
            continue
        out += (sql[start : placeholder.start()], literal)
        start = placeholder.end()
    out.append(sql[start:])
    return "".join(out), (*kept, *values)


def bind(params: tuple, values: Mapping[Any, Any]) -> list[Any]:
    """The compiled parameters with every sentinel of `values` replaced by its request value. Sentinels
    are ints no real id takes, strings no request text holds, or bare `object()`s; any other parameter
    (a list, a vector) is passed as it is."""
    return [values.get(p, p) if isinstance(p, int | str) or type(p) is object else p for p in params]
