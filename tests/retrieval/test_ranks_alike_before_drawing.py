"""Search does not depend on how far entity drawing has caught up (issue 28): a fact whose drawing has not
run yet gets the entity component its drawing will give it, counted from its text, so the same question
ranks the same right after a burst of writes and once the drawing ran."""

from __future__ import annotations

import pytest

from extraction.tasks import entities_draw
from memory_admin import celery as celery_module
from memory_admin.models import Fact, FactEntity, MemoryUser

pytestmark = pytest.mark.django_db

TURNS = [
    "Dana Scully: I adopted a greyhound called Biscuit last spring.",
    "Kim Wexler: My greyhound sleeps all day, honestly.",
    "Dana Scully: Biscuit and I walk along the river in Lisbon every morning.",
    "Kim Wexler: I moved to Albuquerque for the new job at Hamlin.",
    "Dana Scully: I work at Acme Robotics on the warehouse arms.",
    "Kim Wexler: Lisbon is lovely in May, we went there for a week.",
    "Dana Scully: Saul Goodman called about the lease again.",
    "Kim Wexler: The river walk sounds nice, I prefer the mountains.",
]
QUESTIONS = [
    "Where does Dana Scully walk her dog?",
    "What is the name of Dana's greyhound?",
    "Where did Kim Wexler move?",
    "Who called Dana about the lease?",
    "Which city did Kim visit in May?",
]


@pytest.fixture
def sent(monkeypatch):
    """Drawing tasks are recorded, not run: the state of a worker that has not caught up yet."""
    tasks: list[tuple] = []
    monkeypatch.setattr(celery_module, "dispatch", lambda task, *args: tasks.append((task, *args)))
    return tasks


def write(api, user: str, texts: list[str], django_capture_on_commit_callbacks) -> list[str]:
    ids = []
    for hour, text in enumerate(texts):
        with django_capture_on_commit_callbacks(execute=True):
            r = api.post(
                f"users/{user}/facts",
                {"content": text, "source": "user_stated", "observed_at": f"2024-03-01T{hour:02d}:00:00+00:00"},
            )
        assert r.status_code in (200, 201), r.content
        ids.append(r.json()["fact"]["id"])
    return ids


def ranked(api, user: str, q: str) -> list[tuple[str, float, float]]:
    r = api.get(f"users/{user}/search", q=q, k=8)
    assert r.status_code == 200, r.content
    return [(h["fact"]["id"], round(h["score"]["entity"], 6), round(h["score"]["final"], 6)) for h in r.json()["hits"]]


def drain(sent: list[tuple]) -> None:
    for _, *args in sent:
        entities_draw(*args)
    sent.clear()


def test_a_question_ranks_the_same_before_and_after_the_drawing_ran(api, sent, django_capture_on_commit_callbacks):
    write(api, "alice", TURNS, django_capture_on_commit_callbacks)
    assert not FactEntity.objects.exists() and Fact.objects.filter(entities_due=True).count() == len(TURNS)
    before = {q: ranked(api, "alice", q) for q in QUESTIONS}
    assert any(entity > 0 for hits in before.values() for _, entity, _ in hits)  # names count before drawing
    drain(sent)
    assert FactEntity.objects.exists() and not Fact.objects.filter(entities_due=True).exists()
    after = {q: ranked(api, "alice", q) for q in QUESTIONS}
    assert before == after


def test_undrawn_facts_count_the_entities_drawn_facts_already_made(api, sent, django_capture_on_commit_callbacks):
    """Half the conversation drawn, the other half written since: the new facts' names are the existing
    entities' (the same bits, the same IDF), as their drawing will make them."""
    write(api, "alice", TURNS[:4], django_capture_on_commit_callbacks)
    drain(sent)
    write(api, "alice", TURNS[4:], django_capture_on_commit_callbacks)
    assert Fact.objects.filter(entities_due=True).count() == 4
    before = {q: ranked(api, "alice", q) for q in QUESTIONS}
    drain(sent)
    assert not Fact.objects.filter(entities_due=True).exists()
    assert before == {q: ranked(api, "alice", q) for q in QUESTIONS}


def test_a_fact_the_extractor_linked_keeps_its_links_while_its_drawing_is_due(api, tenant, sent):
    from memory_admin.selectors.access import Principal
    from memory_admin.services.entities import EntityMention, fact_entities_link
    from memory_admin.services.facts import fact_write

    user = MemoryUser.objects.create(tenant=tenant, external_id="alice")
    system = Principal.system(tenant.pk)
    fact = fact_write(principal=system, memory_user=user, content="She adopted a greyhound.", source="user_stated")
    fact_entities_link(principal=system, fact=fact.fact, mentions=[EntityMention("Dana Scully", "person", "subject")])
    other = fact_write(principal=system, memory_user=user, content="A greyhound adopted by Kim.", source="user_stated")
    assert Fact.objects.get(pk=fact.fact.pk).entities_due  # linked by the model, not drawn yet
    hits = {fid: entity for fid, entity, _ in ranked(api, "alice", "Which dog did Dana Scully adopt?")}
    assert hits[str(fact.fact.pk)] == 1.0  # the model's link, though the text names nobody
    assert hits[str(other.fact.pk)] == 0.0


def test_a_search_embeds_a_bounded_number_of_undrawn_names(api, sent, monkeypatch, django_capture_on_commit_callbacks):
    """A question that names nobody looks for the undrawn facts' names by meaning, which embeds them on the
    request: a burst naming many new people is embedded NAME_EMBEDS_PER_SEARCH names a search, not all at
    once (an import's thousands of names would hold one search for minutes)."""
    from memory_admin import embedding as embeddings
    from memory_admin.retrieval import candidates as search

    monkeypatch.setattr(search, "_NAME_VECTORS", {})
    names_embedded: list[int] = []
    real_embed = embeddings.embed

    def counting_embed(texts, *args, **kwargs):
        if texts and all(text.endswith(")") for text in texts):  # "Alma Brandt (other)": a name's entity text
            names_embedded.append(len(texts))
        return real_embed(texts, *args, **kwargs)

    monkeypatch.setattr(embeddings, "embed", counting_embed)
    first = ["Alma", "Boris", "Celia", "Dmitri", "Edda", "Farid"]
    last = ["Brandt", "Castro", "Dahl", "Holm", "Novak", "Stein"]
    people = [f"{f} {la}" for f in first for la in last][: search.NAME_EMBEDS_PER_SEARCH + 4]
    with django_capture_on_commit_callbacks(execute=True):
        r = api.post(
            "users/alice/facts/batch",
            {"facts": [{"content": f"Had lunch with {p} at noon", "source": "user_stated"} for p in people]},
        )
    assert r.status_code in (200, 201), r.content
    assert Fact.objects.filter(entities_due=True).count() == len(people)
    ranked(api, "alice", "what did we eat?")
    assert names_embedded == [search.NAME_EMBEDS_PER_SEARCH]
    ranked(api, "alice", "what did we eat?")
    assert names_embedded == [search.NAME_EMBEDS_PER_SEARCH, 4]
    ranked(api, "alice", "what did we eat?")
    assert names_embedded == [search.NAME_EMBEDS_PER_SEARCH, 4]  # all cached now


def test_an_undrawn_fact_counts_the_drawn_graph_as_its_drawing_will(api, sent, django_capture_on_commit_callbacks):
    """What is drawn already counts for a fact not drawn yet as it will once drawn: a name one relation away
    from the entity the question names (Acme Robotics, where Dana Scully works) and a short name of that
    entity ("Dana")."""
    write(api, "alice", ["Dana Scully: I work at Acme Robotics."], django_capture_on_commit_callbacks)
    drain(sent)
    hop, short = write(
        api,
        "alice",
        ["Acme Robotics opened a warehouse in Lisbon.", "Yesterday Dana said her greyhound sleeps all day."],
        django_capture_on_commit_callbacks,
    )
    question = "What does Dana Scully do all day?"
    before = {fid: entity for fid, entity, _ in ranked(api, "alice", question)}
    drain(sent)
    after = {fid: entity for fid, entity, _ in ranked(api, "alice", question)}
    assert before == after
    assert before[hop] > 0 and before[short] > 0  # a neighbour (HOP_SHARE), a mention (MENTION_SHARE)
