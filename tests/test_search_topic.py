"""A query that holds a name is compared by its meaning without the name too (selectors/search.py,
TOPIC_SHARE): the whole question's embedding is pulled towards every statement that names the person,
whatever its topic, while the entity component and the keywords count the name already."""

from __future__ import annotations

import pytest

from memory_admin.embeddings import embed_query
from memory_admin.selectors.search import search_vectors, without_names

pytestmark = pytest.mark.django_db

LANDLORD = "Dana Scully: we had a long meeting with the landlord today."
ART = "I mostly paint abstract watercolours and sell them at craft fairs."
CAR = "Dana Scully said the car needs new tyres."


def scores(api, user, q):
    r = api.get(f"users/{user}/search", q=q, k=10)
    assert r.status_code == 200, r.content
    return {h["fact"]["content"]: h["score"] for h in r.json()["hits"]}


def test_the_topic_of_a_question_about_a_named_person_is_what_the_vector_compares(api):
    for content in (LANDLORD, ART, CAR):
        r = api.post("users/dana/facts", {"content": content, "source": "user_stated"})
        assert r.status_code in (200, 201), r.content
    found = scores(api, "dana", "What kind of art does Dana Scully make?")
    # The whole question's embedding lies nearest the landlord statement (cosine 0.55 against 0.25 for
    # the painting one): its name, not its topic. Without the name, the painting statement is nearest.
    assert found[ART]["vector"] == 1.0
    assert found[ART]["cosine"] > found[LANDLORD]["cosine"] > found[CAR]["cosine"]
    # The name still counts where it should: the keywords of the statements that spell it.
    assert found[LANDLORD]["keyword"] > 0 and found[ART]["keyword"] == 0


def test_without_names_leaves_out_proper_names_and_their_possessives():
    assert without_names("What kind of art does Dana Scully make?") == "What kind of art does make?"
    assert without_names("Where did Ravi's sister move?") == "Where did sister move?"
    assert without_names("what does the user like to eat") == "what does the user like to eat"


def test_a_query_without_a_name_is_compared_by_its_own_embedding():
    mixed, whole = search_vectors("what kind of art  do I make?")
    assert mixed == whole == embed_query("what kind of art  do I make?")
    mixed, whole = search_vectors("What kind of art does Dana Scully make?")
    assert whole == embed_query("What kind of art does Dana Scully make?") and mixed != whole
