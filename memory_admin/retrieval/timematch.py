"""The time component of ranking (SPEC §6): how well a fact's observed time matches the time a query names.

A query's times (`timeq.QueryTime`) become windows of age (days before now, as `Candidate.age_days`
counts them from the fact's `valid_from`, its observed_at):

- a `Period` is one window;
- a `Yearless` day or month is a window in every year the candidates span;
- an `EventWindow` ("the week before the race") is a window beside each fact that holds every word of
  the event (up to EVENT_ANCHORS, the latest first): the event happened when such a fact was observed.

A fact observed inside a window scores 1; outside, exp(−days outside / AFTER_DAYS) when observed after
the window (people tell of an event in the days after it: "last week I ran a race"), exp(−days outside
/ BEFORE_DAYS) before it (plans told ahead); the best window counts. A query that names no time gives
every fact 0, and ranking's factor (1 + TIME_WEIGHT × time) is then exactly 1: such a query ranks as before.

Pure functions of the candidates (no database), with their constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
from dateutil.relativedelta import relativedelta

from memory_admin.retrieval.timeq import EventWindow, Period, QueryTime

# Tuned on the LoCoMo dev split (bench/README.md, "Questions that name a time").
TIME_WEIGHT = 0.5
AFTER_DAYS = 4.0
BEFORE_DAYS = 1.0
EVENT_ANCHORS = 5
# A yearless window is laid in at most this many years back from now (the candidates' span).
MAX_YEARS = 100

# (lo, hi): ages in days, lo <= hi; a fact of age a is inside when lo <= a <= hi.
Window = tuple[float, float]


def _ages(period: Period, now: datetime) -> Window:
    return (now - period.end).total_seconds() / 86400.0, (now - period.start).total_seconds() / 86400.0


def windows(
    when: QueryTime, now: datetime, ages: Sequence[float], lexemes: Sequence, event_lexemes: dict
) -> list[Window]:
    """The windows of age the query's times name (module docstring); `ages` and `lexemes` are the
    candidates' (`age_days`, `lexemes`), `event_lexemes` each event phrase's lexemes (Postgres' english
    configuration, as the facts' are)."""
    out = [_ages(p, now) for p in when.periods]
    if when.yearless and len(ages):
        oldest = now - timedelta(days=min(float(max(ages)), MAX_YEARS * 365.25))
        for year in range(oldest.year, now.year + 1):
            for day in when.yearless:
                try:
                    start = datetime(year, day.month, day.first_day, tzinfo=UTC)
                    end = datetime(year, day.month, min(day.last_day, 28), tzinfo=UTC) + timedelta(days=1)
                    if day.last_day > 28:  # to the month's end, whatever its length
                        end = datetime(year, day.month, 1, tzinfo=UTC) + relativedelta(months=1)
                except ValueError:
                    continue  # 30 February
                out.append(_ages(Period(start, end), now))
    for event in when.events:
        out += _event_windows(event, ages, lexemes, event_lexemes.get(event.event) or ())
    return out


def _event_windows(event: EventWindow, ages: Sequence[float], lexemes: Sequence, words: Sequence[str]) -> list[Window]:
    if not words:
        return []
    wanted = set(words)
    anchors = sorted(float(age) for age, own in zip(ages, lexemes, strict=True) if own and wanted <= set(own))
    out = []
    for age in anchors[:EVENT_ANCHORS]:
        if event.direction < 0:  # before the event: older than it by up to `days`
            out.append((age, age + event.days))
        elif event.direction > 0:
            out.append((max(0.0, age - event.days), age))
        else:
            out.append((max(0.0, age - event.days / 2), age + event.days / 2))
    return out


def time_scores(ages: Sequence[float], spans: list[Window]) -> list[float]:
    """The time component of each candidate (module docstring): 1 inside a window, decaying outside."""
    if not spans:
        return [0.0] * len(ages)
    age = np.asarray(ages, dtype=np.float64)[:, None]
    lo = np.asarray([w[0] for w in spans], dtype=np.float64)[None, :]
    hi = np.asarray([w[1] for w in spans], dtype=np.float64)[None, :]
    # Younger than the window (observed after it) by lo - age; older (before it) by age - hi.
    after = np.exp(-np.clip(lo - age, 0.0, None) / AFTER_DAYS)
    before = np.exp(-np.clip(age - hi, 0.0, None) / BEFORE_DAYS)
    return (after * before).max(axis=1).tolist()
