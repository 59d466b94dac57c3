"""Neighbour support (retrieval/ranking.py `_support`) is its definition whatever the candidates' times: the
best relevance among the other candidates within NEIGHBOUR_MINUTES plus the mean of the best NEIGHBOUR_TOP
of them, plus ADJACENT_SHARE x the best within ADJACENT_MINUTES, to the last bit, with ties and with many
candidates written within the same minutes (a batch import), where the windows slide instead of being
sorted for each candidate."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_admin.retrieval.candidates import Candidate
from memory_admin.retrieval.ranking import (
    ADJACENT_MINUTES,
    ADJACENT_SHARE,
    NEIGHBOUR_MINUTES,
    NEIGHBOUR_TOP,
    _support,
)


def candidate(age_days: float) -> Candidate:
    return Candidate(uuid.uuid4(), 0, "active", 0.5, 0.9, 0.0, age_days, 0.3, 0, 8, [], None, None)


def by_definition(minutes: list[float], relevance: list[float]) -> list[float]:
    out = []
    for i, me in enumerate(minutes):
        others = [j for j in range(len(minutes)) if j != i and abs(minutes[j] - me) <= NEIGHBOUR_MINUTES]
        if not others:
            out.append(0.0)
            continue
        best = sorted((relevance[j] for j in others), reverse=True)[:NEIGHBOUR_TOP]
        adjacent = max((relevance[j] for j in others if abs(minutes[j] - me) <= ADJACENT_MINUTES), default=0.0)
        out.append(best[0] + sum(best) / NEIGHBOUR_TOP + ADJACENT_SHARE * adjacent)
    return out


# Relevances from a few values (ties) or any; minutes from a few instants (many at once) or spread out.
relevances = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 0.75]), st.floats(0, 2, allow_nan=False))
instants = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 1.25, 2.0, 29.0, 30.0, 31.0, 60.0]), st.floats(0, 500))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(instants, relevances), min_size=1, max_size=60))
def test_neighbour_support_is_its_definition_for_any_times_and_ties(rows):
    minutes = [m for m, _ in rows]
    relevance = [r for _, r in rows]
    # age_days chosen so that _support's minutes (age_days * 1440) are exactly these.
    out = [(candidate(m / 1440.0), {"relevance": r, **NEUTRAL}) for m, r in rows]
    _support(out, len(out))
    expected = by_definition([parts[0].age_days * 1440.0 for parts in out], relevance)
    assert [parts["neighbour"] for _, parts in out] == expected
    assert len(minutes) == len(out)


NEUTRAL = {"entity": 0.0, "time": 0.0, "specificity": 1.0, "effective_confidence": 1.0, "stale": False}
