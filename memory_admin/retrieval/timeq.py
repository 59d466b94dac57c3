"""The time a query names (SPEC §6): dates and periods in its words, for ranking by when a memory was observed.

`query_time(text, now)` reads three kinds of time, each into what ranking can match a fact's
`valid_from` (its observed_at) against:

- absolute: "in May 2023", "on 8 June, 2023", "2022", "2023-06-08", "between August 11 and August 15 2023",
  "the summer of 2022" -> a `Period` [start, end);
- a day or a month without a year ("on 8 June", "in June", "during the summer") -> a `Yearless` window,
  matched in every year (a user's memory spans years; "in June" most often means a June it holds);
- relative to now ("yesterday", "last week", "last year", "3 days ago", "last Friday", "last summer")
  -> a `Period`, counted from `now`: the request's time, or the search's `as_of` when given;
- relative to an event ("the week before the race", "two days after the wedding") -> an `EventWindow`:
  the event's words, the direction and the length; the search finds the facts that hold those words and
  takes their observed_at as the event's time (`ranking.event_periods`).

Dates are read by python-dateutil (`dateutil.parser`, `dateutil.relativedelta`) once a pattern here has
found them; the periods ("the week before", "last summer", "the weekend of") are this module's own. The
rules are deliberately narrow: a word that is also a month ("may", "march") counts only next to a day, a
year or a preposition of time, and a year only from 1900 to 2199. Parsing never raises: any text yields a
`QueryTime`, empty when it names no time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dateutil import parser as date_parser
from dateutil.relativedelta import relativedelta

# Years a query may name: outside, a number is not read as a year ("0000", "99999").
FIRST_YEAR, LAST_YEAR = 1900, 2199
# Only the first this many characters of a query are read for times (a query has at most 2,000).
MAX_CHARS = 2000
# At most this many times are read from one query (a hostile query can repeat dates).
MAX_TIMES = 8
# ... and at most this many spans of it read (each new one is checked against those read before).
MAX_SPANS = 32

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
# Month names that are also common words: a month only beside a day, a year or a word of time.
_AMBIGUOUS_MONTHS = {"may", "mar", "march", "jan", "jun", "jul", "aug", "oct", "dec", "sep", "sept"}
_TIME_WORDS = r"in|on|of|during|since|until|till|before|after|by|early|late|mid|last|next|this|from|between|and|to"
# The words before a bare month that make it one ("in May", not "you may"; "to march" is a verb).
_MONTH_WORDS = {"in", "of", "during", "since", "until", "till", "early", "late", "mid", "last", "next", "this"}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
SEASONS = {"spring": (3, 4, 5), "summer": (6, 7, 8), "fall": (9, 10, 11), "autumn": (9, 10, 11), "winter": (12, 1, 2)}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "few": 3, "couple": 2}
_UNITS = {"day": 1, "night": 1, "week": 7, "weekend": 7, "fortnight": 14, "month": 30, "year": 365}

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_DAY = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?:19\d\d|2[01]\d\d)"
# "8 June 2023", "8th of June, 2023", "June 8, 2023", "June 8th", "June 2023", "June".
_DATE = (
    rf"(?:(?P<d1>{_DAY})\s*(?:of\s+)?)?(?P<mon>{_MONTH})\.?(?![a-z])"
    rf"(?:\s+(?P<d2>{_DAY})(?![\d:]))?(?:,?\s*(?P<year>{_YEAR})(?!\d))?"
)
_DATE_RE = re.compile(rf"(?<![\w-])(?:(?P<pre>{_TIME_WORDS})\s+(?:the\s+)?)?{_DATE}", re.IGNORECASE)
_ISO_RE = re.compile(rf"(?<!\d)(?P<iso>{_YEAR}-[01]\d-[0-3]\d)(?!\d)")
_YEAR_RE = re.compile(rf"(?<![\w.,:/-])(?P<year>{_YEAR})(?![\w:/-]|[.,]\d)")
_SEASON_RE = re.compile(
    rf"\b(?:(?P<rel>last|this|next|past)\s+)?(?P<season>spring|summer|autumn|winter|fall)"
    rf"(?:\s+(?:of\s+)?(?P<year>{_YEAR})(?!\d))?\b",
    re.IGNORECASE,
)
_DAYWORD_RE = re.compile(r"\b(?P<word>today|tonight|yesterday|last\s+night|this\s+morning|this\s+evening)\b", re.I)
_LAST_RE = re.compile(
    r"\b(?P<rel>last|past|this|next|previous)\s+(?P<unit>week|weekend|month|year|" + "|".join(WEEKDAYS) + r")\b",
    re.IGNORECASE,
)
_AGO_RE = re.compile(
    r"\b(?P<n>\d{1,3}|an?|one|two|three|four|five|six|few|couple)\s+(?:of\s+)?(?P<unit>day|week|month|year)s?\s+ago\b",
    re.IGNORECASE,
)
# "the week before the race", "two days after 8 June", "the weekend of 24 June".
_AROUND_RE = re.compile(
    r"\b(?:the\s+)?(?:(?P<n>\d{1,3}|an?|one|two|three|four|five|six|few|couple)\s+(?:of\s+)?)?"
    r"(?P<unit>day|night|week|weekend|fortnight|month|year)s?\s+(?P<dir>before|after|of)\s+(?P<what>[^?!.;\n]{1,80})",
    re.IGNORECASE,
)
_BETWEEN_RE = re.compile(r"\bbetween\s+(?P<a>[^?!;\n]{1,40}?)\s+and\s+(?P<b>[^?!;\n]{1,40})", re.IGNORECASE)
# A word every reader's match holds one of (a digit, a month, a season, a word of relative time, a unit):
# a query without any names no time, and costs one scan.
_MAY_NAME_A_TIME = re.compile(
    r"\d|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|spring|summer|autumn|fall|winter|today|tonight"
    r"|yesterday|last|past|this|next|previous|ago|day|night|week|fortnight|month|year)",
    re.IGNORECASE,
)
# The words of an event's phrase that say nothing of which event it is.
_EVENT_STOP = re.compile(r"^(?:the|a|an|my|our|his|her|their|your|that|this)\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Period:
    """A stretch of time, [start, end)."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class Yearless:
    """Days of a month in every year (month 1-12, days inclusive)."""

    month: int
    first_day: int = 1
    last_day: int = 31


@dataclass(frozen=True)
class EventWindow:
    """The `days` before (direction -1), after (+1) or around (0) an event the user's memory holds."""

    event: str
    direction: int
    days: float


@dataclass(frozen=True)
class QueryTime:
    periods: tuple[Period, ...] = ()
    yearless: tuple[Yearless, ...] = ()
    events: tuple[EventWindow, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.periods or self.yearless or self.events)


NO_TIME = QueryTime()


def _day(value: str | None) -> int | None:
    return int(re.sub(r"\D", "", value)) if value else None


def _month_period(year: int, month: int) -> Period:
    start = datetime(year, month, 1, tzinfo=UTC)
    return Period(start, start + relativedelta(months=1))


def _day_period(day: datetime, days: int = 1) -> Period:
    start = day.replace(hour=0, minute=0, second=0, microsecond=0)
    return Period(start, start + timedelta(days=days))


def _date(match: re.Match) -> Period | Yearless | None:
    """The period a `_DATE` match names; None when it is a word, not a month ("you may", "march on")."""
    mon = match["mon"].lower()
    day, year = _day(match["d1"] or match["d2"]), match["year"]
    if mon in _AMBIGUOUS_MONTHS and not (day or year or (match["pre"] or "").lower() in _MONTH_WORDS):
        return None
    month = MONTHS[mon]
    if not year:
        return Yearless(month, day, day) if day else Yearless(month)
    if not day:
        return _month_period(int(year), month)
    try:
        parsed = date_parser.parse(f"{day} {mon} {year}", dayfirst=True).replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        return None  # 31 February
    return _day_period(parsed)


def _one_date(text: str) -> Period | Yearless | None:
    """The first date in a short text ("August 11", "15 August 2023", "2022-05-01", "2022")."""
    iso = _ISO_RE.search(text)
    if iso:
        try:
            return _day_period(date_parser.isoparse(iso["iso"]).replace(tzinfo=UTC))
        except (ValueError, OverflowError):
            return None
    for match in _DATE_RE.finditer(text):
        found = _date(match)
        if found:
            return found
    year = _YEAR_RE.search(text)
    if year:
        start = datetime(int(year["year"]), 1, 1, tzinfo=UTC)
        return Period(start, start.replace(year=start.year + 1))
    return None


def _count(value: str | None) -> int:
    if not value:
        return 1
    return int(value) if value.isdigit() else _NUMBERS.get(value.lower(), 1)


def _last(rel: str, unit: str, now: datetime) -> Period:
    """ "last week", "this month", "next year", "last Friday" from `now`."""
    today = _day_period(now).start
    step = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1}[rel]
    if unit in WEEKDAYS:
        back = (today.weekday() - WEEKDAYS.index(unit)) % 7 or 7
        day = today - timedelta(days=back) if step <= 0 else today + timedelta(days=(7 - back) or 7)
        return _day_period(day)
    if unit in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=step)
        if rel == "past":
            return Period(today - timedelta(days=7), today + timedelta(days=1))
        return (
            Period(monday + timedelta(days=5), monday + timedelta(days=7))
            if unit == "weekend"
            else Period(monday, monday + timedelta(days=7))
        )
    if unit == "month":
        if rel == "past":
            return Period(today - timedelta(days=30), today + timedelta(days=1))
        first = today.replace(day=1) + relativedelta(months=step)
        return Period(first, first + relativedelta(months=1))
    if rel == "past":
        return Period(today - timedelta(days=365), today + timedelta(days=1))
    first = today.replace(month=1, day=1) + relativedelta(years=step)
    return Period(first, first + relativedelta(years=1))


def _season(match: re.Match, now: datetime) -> list[Period | Yearless]:
    months = SEASONS[match["season"].lower()]
    rel, year = (match["rel"] or "").lower(), match["year"]
    if match["season"].lower() == "fall" and not (rel or year):
        return []  # "fall" is a verb as often as a season
    if not (rel or year):
        return [Yearless(m) for m in months]
    if year:
        first_year = int(year)
    else:
        # The latest season of that name to have begun by now, and whether it is over.
        latest = now.year if now.month >= months[0] else now.year - 1
        over = now >= datetime(latest, months[0], 1, tzinfo=UTC) + relativedelta(months=3)
        if rel in ("last", "past"):
            first_year = latest if over else latest - 1
        elif rel == "next":
            first_year = latest + 1
        else:  # "this": the one under way, or the one of this calendar year, else the coming one
            first_year = latest if not over or latest == now.year else latest + 1
    start = datetime(first_year, months[0], 1, tzinfo=UTC)
    return [Period(start, start + relativedelta(months=3))]


def _around(match: re.Match, now: datetime) -> Period | Yearless | EventWindow | None:
    """ "the week before 16 November 2023" (a period), "the week before the race" (an event's window)."""
    n, unit, direction = _count(match["n"]), match["unit"].lower(), match["dir"].lower()
    days = float(n * _UNITS[unit])
    what = _head(match["what"])
    anchor = _one_date(what) or _relative_anchor(what, now)
    if isinstance(anchor, Period):
        if direction == "of":
            return Period(anchor.start - timedelta(days=3), anchor.end + timedelta(days=3))
        if direction == "before":
            return Period(anchor.start - timedelta(days=days), anchor.start)
        return Period(anchor.end, anchor.end + timedelta(days=days))
    if anchor is not None:
        return anchor  # "the second week of November": the yearless date itself
    event = _EVENT_STOP.sub("", what).strip()
    if not re.search(r"[^\W\d_]{3,}", event):
        return None
    return EventWindow(event[:80], {"before": -1, "after": 1, "of": 0}[direction], days)


def _head(what: str) -> str:
    """An event's or a date's words: up to a comma that is not a date's ("24 June, 2022")."""
    return re.split(r",(?!\s*\d)", what)[0].strip()


def _relative_anchor(text: str, now: datetime) -> Period | None:
    word = _DAYWORD_RE.match(text.strip())
    if word:
        return _dayword(word["word"], now)
    return None


def _dayword(word: str, now: datetime) -> Period:
    word = " ".join(word.lower().split())
    if word in ("yesterday", "last night"):
        return _day_period(now - timedelta(days=1))
    return _day_period(now)


def _ago(match: re.Match, now: datetime) -> Period:
    n, unit = _count(match["n"]), match["unit"].lower()
    delta = {"day": relativedelta(days=n), "week": relativedelta(weeks=n)}.get(unit) or (
        relativedelta(months=n) if unit == "month" else relativedelta(years=n)
    )
    at = now - delta
    # About then: half a unit either side (a day for days).
    half = {"day": timedelta(days=1), "week": timedelta(days=4), "month": timedelta(days=15)}.get(
        unit, timedelta(days=183)
    )
    return Period(_day_period(at).start - half, _day_period(at).end + half)


def query_time(text: str, now: datetime) -> QueryTime:
    """The times `text` names (module docstring), relative ones counted from `now` (timezone-aware).
    Never raises on any text; a query that names no time gives `NO_TIME`."""
    try:
        return _query_time(text, now)
    except (ValueError, OverflowError):  # a date past datetime's range from arithmetic on a far year
        return NO_TIME


def _between(match: re.Match, now: datetime) -> list[Period]:
    first, second = _one_date(match["a"]), _one_date(match["b"])
    if isinstance(first, Yearless) and isinstance(second, Period):
        # "between August 11 and August 15 2023": the first borrows the second's year.
        first = _one_date(f"{match['a']} {second.start.year}")
    if isinstance(first, Period) and isinstance(second, Period) and first.start < second.end:
        return [Period(first.start, second.end)]
    return []


def _year(match: re.Match, now: datetime) -> list[Period]:
    start = datetime(int(match["year"]), 1, 1, tzinfo=UTC)
    return [Period(start, start.replace(year=start.year + 1))]


def _around_span(match: re.Match) -> tuple[int, int]:
    return match.start(), match.start("what") + len(_head(match["what"]))


# Each pattern and what it reads, most specific first: a span read by one is not read again by the next
# ("8 June 2023" is not also "2023"). (pattern, reader(match, now) -> times, the span a match reads.)
_READERS = (
    (_BETWEEN_RE, _between, None),
    (_AROUND_RE, lambda m, now: [_around(m, now)], _around_span),
    (_ISO_RE, lambda m, now: [_one_date(m["iso"])], None),
    (_DATE_RE, lambda m, now: [_date(m)], None),
    (_SEASON_RE, _season, None),
    (_YEAR_RE, _year, None),
    (_DAYWORD_RE, lambda m, now: [_dayword(m["word"], now)], None),
    (_LAST_RE, lambda m, now: [_last(m["rel"].lower(), m["unit"].lower(), now)], None),
    (_AGO_RE, lambda m, now: [_ago(m, now)], None),
)


def _query_time(text: str, now: datetime) -> QueryTime:
    text = (text or "")[:MAX_CHARS]
    if not _MAY_NAME_A_TIME.search(text):
        return NO_TIME
    now = now.astimezone(UTC)
    found: list[Period | Yearless | EventWindow] = []
    taken: list[tuple[int, int]] = []
    for pattern, read, span_of in _READERS:
        for match in pattern.finditer(text):
            if len(taken) >= MAX_SPANS:
                break
            span = span_of(match) if span_of else match.span()
            if any(a < span[1] and span[0] < b for a, b in taken):
                continue
            times = [t for t in read(match, now) if t is not None]
            if times:
                taken.append(span)
                found += times
    found = list(dict.fromkeys(found))[:MAX_TIMES]
    return QueryTime(
        periods=tuple(f for f in found if isinstance(f, Period)),
        yearless=tuple(f for f in found if isinstance(f, Yearless)),
        events=tuple(f for f in found if isinstance(f, EventWindow)),
    )
