"""Model instances from the rows of a raw statement, built as the ORM builds them: each field's value
converted by its `from_db_value`, the instance made by Django's `Model.from_db` (its documented hook
for loading from the database), the columns not selected deferred."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


@functools.cache
def _layout(model: type[models.Model], names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, ...], tuple]:
    """(the selected attnames in the model's field order, where each is in the row, the converters by
    position in that order): `from_db` takes the values in the order of the model's concrete fields."""
    at = {name: i for i, name in enumerate(names)}
    fields = [f for f in model._meta.concrete_fields if f.attname in at]
    if len(fields) != len(names):
        unknown = set(names) - {f.attname for f in fields}
        raise ValueError(f"{model.__name__} has no column {', '.join(sorted(unknown))}")
    converters = tuple((i, f) for i, f in enumerate(fields) if hasattr(f, "from_db_value"))
    return tuple(f.attname for f in fields), tuple(at[f.attname] for f in fields), converters


def hydrate(model: type[M], names: Sequence[str], rows: Sequence[Sequence]) -> list[M]:
    """Instances of `model` from rows whose columns are the model's attnames `names` (any order)."""
    ordered, positions, converters = _layout(model, tuple(names))
    alias = connection.alias
    objects = []
    for row in rows:
        values = [row[i] for i in positions]
        for i, model_field in converters:
            values[i] = model_field.from_db_value(values[i], None, connection)
        objects.append(model.from_db(alias, ordered, values))
    return objects
