"""What a hostile input value is (SPEC §11), defined once for the API schemas and the dashboard forms.

- Text: no NUL, no lone surrogate, no control character other than tab and line ends
  (`textnorm.unreadable_reason`).
- Times: timezone-aware, from 1900-01-01 up to (not including) 2200-01-01 UTC. A fixed horizon rather
  than "now + n years", so a value accepted today is still accepted when replayed later; nothing a
  person or an agent records lies outside it, and every time inside it keeps the scores finite.
- Whole numbers typed into a form: digits only, within the range of the column they end up in.
- Sizes: a text over its limit in bytes of UTF-8 is refused whole, naming the limit (`check_size`).
- Other numbers typed into a form: ASCII decimal notation, finite (`form_number`); their ranges are the
  service's (e.g. `services.settings.LIMITS`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from memory_admin.errors import Invalid, TooLarge
from memory_admin.textnorm import unreadable_reason

EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
INT4_MAX = 2**31 - 1
_SIGNED_DIGITS = re.compile(r"[+-]?[0-9]{1,18}")


def implausible_time_reason(value: datetime) -> str | None:
    """Why `value` cannot be stored or used as a time filter, else None."""
    if value.tzinfo is None or value.utcoffset() is None:
        return "needs a timezone (e.g. 2024-05-01T09:30:00Z)"
    if not EARLIEST <= value < LATEST:
        return f"must lie between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC)"
    return None


def unreadable_field(data: Mapping) -> tuple[str, str] | None:
    """The first (field, reason) of a form or query whose name or value is not readable text."""
    lists = data.lists() if hasattr(data, "lists") else ((k, [v]) for k, v in data.items())
    for name, values in lists:
        reason = unreadable_reason(name)
        if reason:
            return "field name", reason
        for value in values:
            reason = unreadable_reason(value) if isinstance(value, str) else None
            if reason:
                return name, reason
    return None


def whole_number(
    raw: str | None, *, field: str, default: int | None = None, minimum: int = 0, maximum: int = INT4_MAX
) -> int | None:
    """A form's whole number: `default` when absent or blank, else digits within [minimum, maximum];
    anything else raises Invalid naming the field."""
    raw = (raw or "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()) or not minimum <= int(raw) <= maximum:
        raise Invalid(f"{field} must be a whole number from {minimum} to {maximum}.", field=field)
    return int(raw)


def form_number(raw: str, *, field: str, whole: bool) -> int | float:
    """A number typed into a form: a signed whole number when `whole`, else any finite decimal
    ("0.75", "1e-3"); anything else raises Invalid naming the field. The range is the caller's."""
    raw = raw.strip()
    words = field.replace("_", " ")
    if whole:
        if not _SIGNED_DIGITS.fullmatch(raw):
            raise Invalid(f"{words} must be a whole number.", field=field)
        return int(raw)
    try:
        value = float(raw) if raw.isascii() else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise Invalid(f"{words} must be a number.", field=field)
    return value


def check_size(content: str, *, limit: int, what: str) -> None:
    """Raise TooLarge (413 `content_too_large`, with the limit) when `content` is over `limit` bytes;
    `what` names the thing in the sentence ("A notebook")."""
    size = len(content.encode())
    if size > limit:
        raise TooLarge(
            f"{what} may hold at most {limit} bytes; this one has {size}.", code="content_too_large", limit=limit
        )


def unit_score(raw: str | None, *, field: str) -> float | None:
    """A score typed into a filter (confidence, staleness): None when blank, else a decimal from 0 to 1
    (digits and one point only: no exponent, sign, NaN or underscore); anything else raises Invalid."""
    raw = (raw or "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"[01]?(\.[0-9]{1,6})?", raw) or raw == "." or float(raw) > 1:
        raise Invalid(f"{field} must be a number from 0 to 1, such as 0.3.", field=field)
    return float(raw)
