"""A query that holds a name is compared by its meaning without the name too (retrieval/query.py,
TOPIC_SHARE): the whole question's embedding is pulled towards every statement that names the person,
whatever its topic, while the entity component and the keywords count the name already."""

from __future__ import annotations

import numpy as np
import pytest

from memory_admin.embedding import embed_query
from memory_admin.retrieval.names import name_spans, without_names
from memory_admin.retrieval.query import TOPIC_SHARE, search_vectors

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


def test_one_run_of_the_model_gives_a_named_questions_two_vectors(api):
    """On the onnx engine a question that names someone costs one run of the model (was two: the question,
    then its text without the names): /metrics counts the embedding calls."""
    from tests.ops.test_metrics import sample, scrape

    r = api.post("users/dana/facts", {"content": ART, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    before = scrape()
    found = scores(api, "dana", "Which colours does Fox Mulder's neighbour paint with?")
    after = scrape()
    assert found[ART]["vector"] == 1.0
    calls = "memory_admin_embedding_seconds_count"
    assert sample(after, calls, call="one") - sample(before, calls, call="one") == 1
    # Asked again: both vectors come from the query cache, no run at all.
    scores(api, "dana", "Which colours does Fox Mulder's neighbour paint with?")
    assert sample(scrape(), calls, call="one") == sample(after, calls, call="one")


def test_the_pair_keeps_the_questions_own_vector_and_a_question_without_names_pools_to_it():
    from memory_admin.embedding import get_embedder, query_cache

    engine = get_embedder()
    question = "What kind of art does Dana Scully make?"
    whole, topic = engine.embed_pair(question, name_spans(question))
    assert whole == engine.embed([question])[0]  # the same vector, bit for bit, as a run of the text alone
    assert topic != whole
    query_cache.clear()
    assert search_vectors(question)[1] == embed_query(question) == whole
    plain = "what kind of art do I make?"
    assert name_spans(plain) == []
    assert engine.embed_pair(plain, []) == (engine.embed([plain])[0],) * 2


def test_the_topic_vector_lies_nearer_the_topics_statements_than_the_question_does():
    from memory_admin.embedding import get_embedder

    engine = get_embedder()
    question = "What kind of art does Dana Scully make?"
    whole, topic = (np.array(v) for v in engine.embed_pair(question, name_spans(question)))
    art, landlord, car = (np.array(v) for v in engine.embed([ART, LANDLORD, CAR]))
    assert topic @ art > whole @ art
    assert topic @ landlord < whole @ landlord and topic @ car < whole @ car
    assert topic @ art > topic @ landlord and topic @ art > topic @ car  # the whole question: landlord first
    assert whole @ landlord > whole @ art


def test_name_spans_cover_the_names_that_without_names_leaves_out():
    question = "When did Caroline and Melanie go to Caroline's party with Dana Scully?"
    spans = name_spans(question)
    assert [question[a:b] for a, b in spans] == ["Caroline", "Melanie", "Caroline's", "Dana Scully"]
    assert without_names(question) == "When did and go to party with ?"


@pytest.fixture
def engine(settings):
    """Switches the process's embedding engine for one test (the query cache is keyed by engine)."""
    from memory_admin.embedding import get_embedder

    def use(name):
        settings.EMBEDDER = name
        get_embedder.cache_clear()
        return get_embedder()

    yield use
    get_embedder.cache_clear()


def mix(whole, topic):
    mixed = (1.0 - TOPIC_SHARE) * np.array(whole) + TOPIC_SHARE * np.array(topic)
    return mixed / np.linalg.norm(mixed)


def test_the_torch_engine_embeds_the_text_without_the_names(engine):
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    torch = engine("torch")
    question = "What kind of art does Dana Scully make?"
    mixed, whole = search_vectors(question)
    assert whole == torch.embed([question])[0]
    np.testing.assert_allclose(mixed, mix(whole, torch.embed(["What kind of art does make?"])[0]), atol=1e-6)


def test_the_openai_engine_embeds_the_text_without_the_names(engine, settings):
    from extraction import llm
    from tests.fake_openai import FakeOpenAI

    server = FakeOpenAI().start()
    try:
        settings.OPENAI_API_KEY = "sk-test-not-a-real-key"
        settings.OPENAI_BASE_URL = server.base_url
        llm.client.cache_clear()
        remote = engine("openai")
        mixed, whole = search_vectors("Where did Ravi's sister move?")
        asked = sorted(c["prompt"] for c in server.calls if c["layer"] == "embeddings")
        assert asked == ["Where did Ravi's sister move?", "Where did sister move?"]
        assert len(whole) == 384 and whole == remote.embed(["Where did Ravi's sister move?"])[0]
        np.testing.assert_allclose(mixed, mix(whole, remote.embed(["Where did sister move?"])[0]), atol=1e-6)
    finally:
        server.stop()
        llm.client.cache_clear()
