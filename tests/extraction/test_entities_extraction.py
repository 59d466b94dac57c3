"""Entities and relations drawn by the extractors (SPEC §12): the offline rules, and the model in the
same single call that draws the facts (counted at the fake OpenAI server)."""

from __future__ import annotations

from extraction import pipeline
from memory_admin.models import Entity, FactEntity, LlmCall, Relation, Thread
from tests.extraction.test_pipeline import post


def close(api, user="alice", thread="t1"):
    assert api.post(f"users/{user}/threads/{thread}/close").status_code == 202
    return pipeline.close_thread(Thread.objects.get(memory_user__external_id=user, external_id=thread).pk)


def graph() -> set[tuple[str, str, str, bool]]:
    return {
        (r.subject.name, r.type, r.object.name, r.valid_to is None)
        for r in Relation.objects.select_related("subject", "object")
    }


def test_the_rules_draw_the_user_their_employer_place_and_tools(api, offline, dispatched):
    post(
        api,
        "alice",
        "t1",
        "Hi! My name is Dana Scully and I work at Acme Robotics.",
        "I live in Berlin. I manage Project Falcon. I use Postgres.",
    )
    close(api)
    entities = {e.name: e for e in Entity.objects.all()}
    assert set(entities) == {"Dana Scully", "Acme Robotics", "Berlin", "Project Falcon", "Postgres"}
    assert (entities["Acme Robotics"].type, entities["Berlin"].type, entities["Postgres"].type) == (
        "company",
        "place",
        "tool",
    )
    assert "the user" in entities["Dana Scully"].aliases  # "The user ..." facts are about her
    assert graph() == {
        ("Dana Scully", "works_at", "Acme Robotics", True),
        ("Dana Scully", "lives_in", "Berlin", True),
        ("Dana Scully", "manages", "Project Falcon", True),
        ("Dana Scully", "uses", "Postgres", True),
    }
    mention = FactEntity.objects.select_related("fact").get(entity=entities["Acme Robotics"])
    assert mention.role == "object" and mention.fact.content == "The user works at Acme Robotics."
    assert LlmCall.objects.count() == 0


def test_a_new_employer_closes_the_old_relation_and_keeps_it(api, offline, dispatched):
    post(api, "alice", "t1", "I work at Acme Robotics.")
    close(api)
    post(api, "alice", "t2", "I work at Globex now.")
    close(api, thread="t2")
    assert graph() == {("the user", "works_at", "Acme Robotics", False), ("the user", "works_at", "Globex", True)}
    closed = Relation.objects.get(object__name="Acme Robotics")
    assert closed.invalidated_by.content == "The user works at Globex."


def _answer(prompt: str) -> dict:
    index = next(int(line[1 : line.index("]")]) for line in prompt.splitlines() if line.startswith("["))
    return {
        "facts": [
            {"content": "The user works at Initech.", "confidence": 0.95, "message": index, "entities": ["Initech"]},
            {"content": "Peter Gibbons is the user's colleague.", "confidence": 0.9, "message": index},
            {"content": "broken", "confidence": "very"},  # dropped: the relations' indexes still hold
            {"content": "The user uses Jira.", "confidence": 0.9, "message": index, "entities": 7},
        ],
        "user_context": [],
        "entities": [
            {"name": "Initech", "type": "company", "aliases": ["Initech Corp"]},
            {"name": "Peter Gibbons", "type": "person", "aliases": ["Peter"]},
            {"name": "Jira", "type": "software"},  # an unknown type: kept as other
            {"type": "person"},  # no name: dropped
        ],
        "relations": [
            {"subject": "the user", "type": "works at", "object": "Initech", "fact": 0},
            {"subject": "Peter Gibbons", "type": "colleague_of", "object": "the user", "fact": 1},
            {"subject": "the user", "type": "uses", "object": "Jira", "fact": 3},
            {"subject": "the user", "type": "uses", "object": "Jira"},  # no fact: dropped
        ],
    }


def test_the_model_draws_entities_and_relations_in_the_one_extraction_call(api, fake_llm, dispatched):
    fake_llm.extraction = _answer
    post(api, "alice", "t1", "I started at Initech this week; Peter sits next to me and we track work in Jira.")
    close(api)
    assert fake_llm.count("extraction") == 1
    assert LlmCall.objects.filter(layer="extraction").count() == 1
    entities = {e.name: e for e in Entity.objects.all()}
    assert set(entities) == {"the user", "Initech", "Peter Gibbons", "Jira"}
    assert entities["Initech"].type == "company" and "Initech Corp" in entities["Initech"].aliases
    assert entities["Jira"].type == "other"
    assert graph() == {
        ("the user", "works_at", "Initech", True),
        ("Peter Gibbons", "colleague_of", "the user", True),
        ("the user", "uses", "Jira", True),
    }
    roles = {(m.entity.name, m.role) for m in FactEntity.objects.select_related("entity")}
    assert ("Initech", "object") in roles and ("Peter Gibbons", "subject") in roles


def test_an_answer_without_entities_still_extracts_the_facts(api, fake_llm, dispatched):
    post(api, "alice", "t1", "I prefer tea over coffee.")
    close(api)
    assert fake_llm.count("extraction") == 1
    assert not Entity.objects.exists() and not Relation.objects.exists()


def test_facts_the_model_named_no_entities_for_get_them_drawn_after_commit(
    api, fake_llm, dispatched, django_capture_on_commit_callbacks
):
    from extraction.tasks import entities_draw

    post(api, "alice", "t1", "I work with Dana Scully in Lisbon.")
    with django_capture_on_commit_callbacks(execute=True):
        close(api)
    assert not Entity.objects.exists()  # the model named none
    for task, *args in dispatched:
        if task == "extraction.entities_draw":
            entities_draw(*args)  # as the worker runs it
    assert set(Entity.objects.values_list("name", flat=True)) == {"Dana Scully", "Lisbon"}
    assert fake_llm.count("extraction") == 1  # drawn offline: no second call
