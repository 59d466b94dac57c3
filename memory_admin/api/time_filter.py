"""The time filter of a search (SPEC §6): `as_of` and `between`, as query parameters and MCP arguments.

- `as_of`: an ISO 8601 date-time with a timezone; the search keeps the facts valid at that time (observed
  by then, not ended by their valid_to or by a correction observed by then), and counts the query's
  relative times ("last week") from it.
- `between`: a period `FROM/UNTIL` (ISO 8601's interval form), each an ISO 8601 date (`2023-05-01`, the
  whole day, UTC) or a date-time with a timezone; the search keeps the facts observed within it. A date
  as UNTIL includes that day. UNTIL must come after FROM.

Both lie in the plausible window every stored time must (inputs.py); a bad value is 422 `invalid`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from ninja import Schema
from pydantic import AfterValidator, Field

from memory_admin.api.schemas import Timestamp, text
from memory_admin.inputs import implausible_time_reason

_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})$")
_EXAMPLE = "e.g. 2023-05-01/2023-05-31 or 2023-05-01T00:00:00Z/2023-06-01T00:00:00Z"


def _moment(value: str, *, until: bool) -> datetime:
    value = value.strip()
    try:
        if _DATE_ONLY.match(value):
            day = datetime.fromisoformat(value).replace(tzinfo=UTC)
            moment = day + timedelta(days=1) if until else day
        elif _DATE_TIME.match(value):
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f"give ISO 8601 dates or date-times with a timezone, {_EXAMPLE}") from None
    reason = implausible_time_reason(moment)
    if reason:
        raise ValueError(reason)
    return moment


def period(value: str) -> tuple[datetime, datetime]:
    """`FROM/UNTIL` as [from, until) (module docstring); ValueError with a sentence a person can act on."""
    parts = value.split("/")
    if len(parts) != 2:
        raise ValueError(f"give a period as FROM/UNTIL, {_EXAMPLE}")
    start, end = _moment(parts[0], until=False), _moment(parts[1], until=True)
    if not start < end:
        raise ValueError("the period's FROM must come before its UNTIL")
    return start, end


AsOf = Timestamp
Between = Annotated[
    text(max_length=80),
    Field(description="Only facts observed within FROM/UNTIL (ISO 8601 dates or date-times with a timezone)."),
    AfterValidator(period),
]


class TimeFilterIn(Schema):
    """The time filter as one value (the MCP search tool's arguments, validated as the query's are)."""

    as_of: AsOf | None = None
    between: Between | None = None
