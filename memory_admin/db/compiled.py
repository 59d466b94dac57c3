"""Compile once, bind per request. A hot statement is built by the ORM (so it goes through `visible()`,
the one access check) with sentinels in place of the request's values, compiled to SQL once per
principal and shape (the caller's `functools.lru_cache`), then bound per request by replacing each
sentinel with its value: the ORM's compiler runs once, not on every search or context block."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet


def compiled(qs: QuerySet) -> tuple[str, tuple]:
    """The queryset's SQL and parameters (Django's public `Query.sql_with_params`)."""
    sql, params = qs.query.sql_with_params()
    return sql, tuple(params)


def bind(params: tuple, values: Mapping[Any, Any]) -> list[Any]:
    """The compiled parameters with every sentinel of `values` replaced by its request value. Sentinels
    are ints no real id takes, strings no request text holds, or bare `object()`s; any other parameter
    (a list, a vector) is passed as it is."""
    return [values.get(p, p) if isinstance(p, int | str) or type(p) is object else p for p in params]
