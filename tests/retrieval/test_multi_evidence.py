"""Questions whose answer is spread over several memories, and questions that read as before (issue 33),
through the HTTP API on the real Postgres."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.models import Fact
from memory_admin.retrieval.decompose import shape_of
from memory_admin.retrieval.expand import keyword_text
from tests.retrieval.test_lexical_traps import ranked, write

pytestmark = pytest.mark.django_db

DISTRACTORS = [
    "I bought a new kettle for the kitchen",
    "My manager moved our weekly meeting to Tuesday",
    "The gym was crowded this morning",
    "I am reading a novel about sailors",
    "Our neighbour's dog barks at night",
    "I switched my phone plan to a cheaper one",
    "The printer at work jams all the time",
    "I started learning to knit scarves",
    "We ordered pizza for the team lunch",
    "My bike needs a new chain",
    "I watered the tomatoes in the garden",
    "The train was late again today",
]


def observed(pk, at):
    Fact.objects.filter(pk=pk).update(valid_from=at)


def test_a_question_needing_three_memories_gets_all_three_in_the_ten_best(api):
    start = timezone.now() - timedelta(days=90)
    trips = [
        write(api, "ana", "Ana: I spent a week in Lisbon eating pastries"),
        write(api, "ana", "Ana: we took the night train to Vienna for a concert"),
        write(api, "ana", "Ana: Kyoto in spring was the most beautiful city I have visited"),
    ]
    others = [write(api, "ana", f"Ana: {text}") for text in DISTRACTORS]
    for i, pk in enumerate([*others, *trips]):
        observed(pk, start + timedelta(days=i))
    top = ranked(api, "ana", "Which cities has Ana visited?")
    assert set(trips) <= set(top[:10])


def test_a_turn_without_topic_words_comes_with_the_strong_matches_of_its_session(api):
    session = timezone.now() - timedelta(days=20)
    lost = write(api, "kai", "I lost my grandmother's ring at the beach")
    gold = write(api, "kai", "The ring was gold with a small ruby")
    found = write(api, "kai", "I found it last week")
    for i, pk in enumerate((lost, gold, found)):
        observed(pk, session + timedelta(minutes=i))
    for i, text in enumerate(DISTRACTORS):
        observed(write(api, "kai", text), session - timedelta(days=i + 1))
    top = ranked(api, "kai", "where is the ring I lost?")
    assert set(top[:3]) == {lost, gold, found}


@pytest.mark.parametrize(
    "question",
    [
        "What is the name of Alice's cat?",
        "Where did Caroline move from 4 years ago?",
        "When did Melanie paint a sunrise?",
        "What does Jon's dance studio offer?",
    ],
)
def test_a_plain_question_is_read_as_written(question):
    # Nothing to widen and nothing negated: the keywords and the ranking are those of the question itself.
    assert keyword_text(question) == question
    assert shape_of(question).negated == ""


def test_the_negated_topic_is_read_to_the_end_of_its_clause():
    assert shape_of("What hobbies does Max have other than fixing cars?").negated == "fixing cars"
    assert shape_of("Besides tea, what does Jo drink?").negated == "tea"
    assert shape_of("What sports apart from golf and what else?").negated == "golf"
