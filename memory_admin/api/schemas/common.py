"""Field types shared by every route (SPEC §11), the strict input base and the error body."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
)

from memory_admin.inputs import implausible_time_reason
from memory_admin.models import Fact
from memory_admin.textnorm import unreadable_reason

# --- Field types shared by every route (SPEC §11): one definition of what a hostile value is --------
#
# Every string the API accepts is `Text` (or a narrower type built on it): NUL, lone surrogates and
# control characters other than tab and line ends are refused with 422 before anything runs.
# Identifiers are short and drawn from a safe set, so they fit in a URL path segment (no `/`), a log
# line and the audit log as they are. Timestamps must carry a zone and lie in a plausible window.


def _readable(value: str) -> str:
    reason = unreadable_reason(value)
    if reason:
        raise ValueError(reason)
    return value


# What `_readable` accepts, for the OpenAPI schema only (the check itself is `unreadable_reason`).
READABLE_PATTERN = r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\ud800-\udfff]*$"


def text(**constraints: Any) -> Any:
    """A readable string with length/pattern constraints (declared before the check so that OpenAPI
    shows them; without a pattern of its own, OpenAPI shows the readable-text pattern)."""
    if "pattern" not in constraints:
        constraints["json_schema_extra"] = {"pattern": READABLE_PATTERN}
    return Annotated[StrictStr, Field(**constraints), AfterValidator(_readable)]


Text = text()


def number(**constraints: Any) -> Any:
    """A JSON number (integer or not, never a bool, NaN or Infinity) with bounds on both branches, so
    that OpenAPI states them as minimum/maximum."""
    floats = Annotated[StrictFloat, Field(allow_inf_nan=False, **constraints)]
    return floats | Annotated[StrictInt, Field(**constraints)]


IDENTIFIER_MAX = 200
IDENTIFIER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:@+=|-]*$"
# A user, thread or task id: letters, digits and `_ . : @ + = | -`, at most 200 characters.
Identifier = text(min_length=1, max_length=IDENTIFIER_MAX, pattern=IDENTIFIER_PATTERN)
# Its example is OpenAPI's `example` (one value), not JSON Schema's `examples` list: ninja copies a path
# parameter's schema example onto the Parameter Object, where `examples` must be a map of Example Objects,
# and a list there makes the document invalid (generators such as openapi-python-client refuse it).
UserId = text(
    min_length=1, max_length=IDENTIFIER_MAX, pattern=IDENTIFIER_PATTERN, json_schema_extra={"example": "alice"}
)
# A cursor is an opaque token this API returned: short, URL-safe.
Cursor = text(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_=-]+$")
# A page size in a query string, where every value arrives as text: lax (`?limit=5`), unlike body fields.
Limit = Annotated[int, Field(ge=1, le=200)]


def _plausible(value: datetime) -> datetime:
    reason = implausible_time_reason(value)
    if reason:
        raise ValueError(reason)
    return value


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def _iso_text(value: Any) -> Any:
    # pydantic would also read 1700000000 or "0.5" as seconds since 1970: the schema says date-time.
    if not isinstance(value, str) or not _ISO_DATE.match(value):
        raise ValueError("give an ISO 8601 date-time with a timezone, e.g. 2024-05-01T09:30:00Z")
    return value


# A timezone-aware ISO 8601 time (`2024-05-01T09:30:00Z`, `…+02:00`) from 1900 up to 2200 (see inputs.py).
Timestamp = Annotated[AwareDatetime, BeforeValidator(_iso_text), AfterValidator(_plausible)]

METADATA_MAX_DEPTH = 16


def _json_tree(value: Any, depth: int = 0) -> None:
    if depth > METADATA_MAX_DEPTH:
        raise ValueError(f"nested deeper than {METADATA_MAX_DEPTH} levels")
    if isinstance(value, str):
        _readable(value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and Infinity are not JSON numbers")
    elif isinstance(value, dict):
        for key, item in value.items():
            _readable(str(key))
            _json_tree(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _json_tree(item, depth + 1)


def _metadata(value: dict[str, Any]) -> dict[str, Any]:
    _json_tree(value)
    return value


# Free-form JSON attached to a fact: readable strings (keys too), finite numbers, bounded depth.
Metadata = Annotated[dict[str, Any], AfterValidator(_metadata)]

# The closed sets of the API, from the model's choices. A writer cannot claim the sources the service
# sets itself (a correction, the notebook).
Category = Literal[tuple(Fact.Category.values)]
Kind = Literal[tuple(Fact.Kind.values)]
Source = Literal[tuple(s for s in Fact.Source.values if s not in (Fact.Source.USER_CORRECTION, Fact.Source.NOTEBOOK))]
Status = Literal[tuple(Fact.Status.values)]
StatusFilter = Literal[(*Fact.Status.values, "any")]
Confidence = number(ge=0, le=1)


class StrictIn(Schema):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# A fact's key (its slot), wherever a fact comes in: the API, a batch, an imported export.
FactKey = text(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/-]+$")


class ErrorOut(Schema):
    """Every 4xx/5xx answer: a stable `code`, a sentence, and fields that depend on the code (`field`
    and `errors` for `invalid`, `limit` for size limits, `current_version` for conflicts...)."""

    model_config = ConfigDict(extra="allow")

    code: str
    detail: str
