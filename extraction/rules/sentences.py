"""Reading a message into statements: transcript speakers ("Ana: ..."), clauses, and relative dates written
out from the message's time."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from django.utils import timezone

# "I use vim and I live in Berlin", "I moved to Lisbon, but now I work...": one statement each.
_CLAUSE_SPLIT = re.compile(
    r"(?:,\s*|\s+)(?:and|but|so|also|plus|then|because|since|while|although|though)\s+(?:now\s+|then\s+|also\s+)?"
    r"(?=(?:i|i'm|i've|i'll|my|we|we're|we've)\b)"
    r"|,\s+(?=(?:i|i'm|i've|i'll)\b)"
    r"|\s+[-–—]+\s+",
    re.I,
)
_DISCOURSE = re.compile(
    r"^(?:(?:oh|well|also|btw|by the way|and|actually|so|yes|yeah|yep|ok|okay|fyi|hi|hello|hey|wow|haha|"
    r"honestly|um|hmm|omg|lol|sure|right|definitely|totally|absolutely|true|cool|nice|awesome|great|"
    r"anyway|anyways|guess what|speaking of which|funny enough|you know what)[,!.]?\s+)+",
    re.I,
)
# "my gf and I": a subject of two, not two clauses (the split above cut it; glued back).
# A full stop after a title is not a sentence's end ("St. Mary's Hospital", "Dr. Lee").
_STATEMENT_END = re.compile(
    r"(?<!\bSt\.)(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bJr\.)(?<!\bSr\.)(?<=[.!?;])\s+|(?<=[.!?][\x22\x27\u201d\u2019])\s+|\n+"
)
_PAIR_HEAD = re.compile(r"^(?:my|our)(?:\s+[\w'-]+){1,2}$", re.I)
CAPTION = re.compile(r"\s*\[(?:shares?|shared|sends?|sent) [^\]]*\]", re.I)


def statements(text: str) -> list[str]:
    """The clauses of a text, one statement each, without leading discourse words ("Oh, and I use vim")."""
    out: list[str] = []
    for sentence in _STATEMENT_END.split(text):
        sentence = sentence.strip()
        if not sentence:
            continue
        pieces = [p.strip() for p in _CLAUSE_SPLIT.split(sentence) if p and p.strip()]
        glued: list[str] = []
        for piece in pieces:
            if glued and _PAIR_HEAD.match(glued[-1]) and re.match(r"i\b", piece, re.I):
                glued[-1] = f"{glued[-1]} and {piece}"
            else:
                glued.append(piece)
        for clause in glued:
            clause = _DISCOURSE.sub("", clause.strip())
            if clause:
                out.append(clause)
    return out


# --- Dates ----------------------------------------------------------------------------------------

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_SHORT_DAYS = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a couple of": 2}
_RELATIVE = re.compile(
    r"\b(?:(yesterday|today|tonight|this morning|this afternoon|this evening|last night|earlier today)"
    r"|(last|this|next) (week|weekend|month|year|" + "|".join(_WEEKDAYS) + "|" + "|".join(_SHORT_DAYS) + r")\.?"
    r"|(a|an|one|two|three|four|five|six|a couple of|a few|several|\d{1,2}) (day|week|month|year)s? ago)\b",
    re.I,
)
FRONT_TIME = re.compile(
    r"^((?:just\s+)?(?:yesterday|today|tonight|this morning|this afternoon|this evening|last night|earlier today|"
    r"(?:last|this|next) \w+|(?:a|an|one|two|three|a few|a couple of|several|\d{1,2}) \w+ ago))\s*,?\s+"
    r"(?=(?:i|i'm|i've|we|we're|my)\b)",
    re.I,
)


def _day(d) -> str:
    return f"{d.day} {d:%B %Y}"


def _month(year: int, month: int) -> str:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return f"{date(year, month, 1):%B %Y}"


def _resolve(m: re.Match, today: date) -> str:
    one, which, unit, count, ago_unit = m.groups()
    if one:
        one = one.lower()
        return f"on {_day(today - timedelta(days=1) if one in ('yesterday', 'last night') else today)}"
    if which:
        which, unit = which.lower(), unit.lower()
        step = {"last": -1, "this": 0, "next": 1}[which]
        if unit in _SHORT_DAYS:
            unit = _WEEKDAYS[_SHORT_DAYS[unit]]
        if unit in _WEEKDAYS:
            target = _WEEKDAYS.index(unit)
            delta = (today.weekday() - target) % 7 or 7
            day = today - timedelta(days=delta) if step < 0 else today + timedelta(days=(target - today.weekday()) % 7)
            if step > 0 and day == today:
                day += timedelta(days=7)
            return f"on {unit.capitalize()}, {_day(day)}"
        if unit == "month":
            return f"in {_month(today.year, today.month + step)}"
        if unit == "year":
            return f"in {today.year + step}"
        where = {"last": "before", "this": "of", "next": "after"}[which]
        return f"in the {unit} {where} {_day(today)}"
    count = count.lower()
    n = int(count) if count.isdigit() else _NUMBERS.get(count)
    if n is not None and ago_unit.lower() == "day":
        return f"on {_day(today - timedelta(days=n))}"
    return f"{m.group(0)[: -len(' ago')]} before {_day(today)}"


def dated(clause: str, when: datetime | None) -> str:
    """The clause with its relative dates ("yesterday", "last month", "two weeks ago") written as the
    dates they mean at `when` (the message's time), so that the fact still says when once it is old."""
    if when is None:
        return clause
    today = timezone.localtime(when).date() if timezone.is_aware(when) else when.date()
    return _RELATIVE.sub(lambda m: _resolve(m, today), clause)
