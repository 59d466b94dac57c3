"""Facts an agent writes and facts the extractor draws meet: the same statement about the user, whether
it names the user ("Dana", their display name, the name their facts give) or says "the user" or "I",
is deduplicated or merged by the write path, and contradicts when it disagrees.

Before: the extractor stored "The user prefers neovim over VS Code.", the agent "Dana prefers neovim";
both stayed active, and a search for "which editor?" ranked one and not the other."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from extraction import llm
from memory_admin import celery as celery_module
from memory_admin.models import Contradiction, Fact, MemoryUser
from tests.extraction.conftest import drain


@pytest.fixture
def offline(settings, monkeypatch):
    """The offline (rules) extractor, run in-process as the worker runs it."""
    settings.OPENAI_API_KEY = ""
    settings.EXTRACTION_BACKOFF_SECONDS = 0
    llm.client.cache_clear()
    monkeypatch.setattr(celery_module, "dispatch", lambda *args: None)


def extract(api, user: str, *said: str) -> list[Fact]:
    """The user says it in a thread; the extractor (rules, offline) draws its facts now."""
    body = {"thread_id": "t1", "messages": [{"role": "user", "content": text} for text in said]}
    assert api.post(f"users/{user}/messages", body).status_code == 202
    drain(now=timezone.now() + timedelta(minutes=5))
    return list(Fact.objects.filter(memory_user__external_id=user).exclude(extractor=""))


def write(api, user: str, content: str, **fields) -> dict:
    answer = api.post(f"users/{user}/facts", {"content": content, **fields})
    assert answer.status_code in (200, 201), answer.content
    return answer.json()


def active(user: str) -> list[str]:
    return sorted(Fact.objects.filter(memory_user__external_id=user, status="active").values_list("content", flat=True))


def test_the_agents_statement_meets_the_extracted_one(api, offline):
    (extracted,) = extract(api, "dana", "I prefer neovim over VS Code.")
    assert extracted.content == "The user prefers neovim over VS Code." and extracted.status == "active"
    said = write(api, "dana", "Dana prefers neovim")
    assert said["outcome"] == "deduplicated" and said["fact"]["id"] == str(extracted.pk)
    assert active("dana") == ["The user prefers neovim over VS Code."]
    hits = api.get("users/dana/search", q="which editor?").json()["hits"]
    assert [h["fact"]["content"] for h in hits] == ["The user prefers neovim over VS Code."]


def test_the_extracted_statement_adds_detail_to_the_agents(api, offline):
    said = write(api, "dana", "Dana prefers neovim")
    assert said["outcome"] == "created"
    extract(api, "dana", "I prefer neovim over VS Code.")
    assert active("dana") == ["The user prefers neovim over VS Code."]
    merged = Fact.objects.get(pk=said["fact"]["id"])
    assert merged.status == "active" and merged.content == "The user prefers neovim over VS Code."


@pytest.mark.parametrize(
    "spellings",
    [
        ["The user drinks oolong tea", "Dana drinks oolong tea", "I drink oolong tea"],
        ["I'm vegetarian", "Dana is vegetarian", "The user is vegetarian."],
        ["The user's editor is helix", "Dana's editor is helix", "My editor is helix"],
    ],
    ids=["verb", "copula", "possessive"],
)
def test_one_statement_in_three_spellings_is_one_fact(api, spellings):
    first = write(api, "dana", spellings[0])
    assert first["outcome"] == "created"
    for other in spellings[1:]:
        again = write(api, "dana", other)
        assert again["outcome"] == "deduplicated" and again["fact"]["id"] == first["fact"]["id"], other
    assert active("dana") == [spellings[0]]


def test_a_disagreement_about_the_user_is_a_contradiction_for_review(api, offline):
    (extracted,) = extract(api, "dana", "I prefer neovim over VS Code.")
    said = write(api, "dana", "Dana prefers helix")
    assert said["outcome"] == "queued_for_review" and said["other_fact_id"] == str(extracted.pk)
    contradiction = Contradiction.objects.get(pk=said["contradiction_id"])
    assert contradiction.status == "open" and {contradiction.fact_a_id, contradiction.fact_b_id} == {
        extracted.pk,
        Fact.objects.get(pk=said["fact"]["id"]).pk,
    }
    assert active("dana") == ["Dana prefers helix", "The user prefers neovim over VS Code."]
    assert Fact.objects.filter(memory_user__external_id="dana", contested=True).count() == 2
    negated = write(api, "dana", "Dana does not prefer neovim over VS Code")
    assert negated["outcome"] in ("queued_for_review", "superseded_existing"), negated


def test_the_user_named_by_display_name_or_by_their_name_fact(api):
    write(api, "u_1", "Kim keeps a sourdough starter")  # creates the memory user
    MemoryUser.objects.filter(external_id="u_1").update(display_name="Kim Lee")
    assert write(api, "u_1", "The user keeps a sourdough starter")["outcome"] == "deduplicated"
    assert write(api, "u_1", "Kim Lee keeps a sourdough starter")["outcome"] == "deduplicated"

    write(api, "u_2", "The user's name is Noor.", key="user.name", source="user_stated")
    first = write(api, "u_2", "Noor sails on weekends")
    assert write(api, "u_2", "The user sails on weekends")["fact"]["id"] == first["fact"]["id"]
    assert active("u_2") == ["Noor sails on weekends", "The user's name is Noor."]


def test_statements_about_someone_else_stay_apart(api):
    write(api, "dana", "Dana works at Acme")
    assert write(api, "dana", "Dana's brother works at Acme")["outcome"] == "created"
    assert write(api, "dana", "Sam works at Acme")["outcome"] == "created"  # not the user
    assert write(api, "dana", "The user likes jazz")["outcome"] == "created"
    assert write(api, "dana", "Dana likes jazz and blues")["outcome"] == "merged"
    assert active("dana") == [
        "Dana likes jazz and blues",
        "Dana works at Acme",
        "Dana's brother works at Acme",
        "Sam works at Acme",
    ]


def test_a_negation_is_never_folded_into_the_plain_statement(api):
    write(api, "eve", "The user does not eat meat")
    said = write(api, "eve", "Eve eats meat")
    assert said["outcome"] == "queued_for_review" and said["contradiction_id"]
    assert active("eve") == ["Eve eats meat", "The user does not eat meat"]


def test_what_belongs_to_the_user_is_not_a_contradiction_found_by_words(api):
    write(api, "ida", "Ida's daughter is called Maya", pinned=True)
    assert write(api, "ida", "The user's son is called Theo")["outcome"] == "created"
    write(api, "ida", "Ida is a nurse")
    assert write(api, "ida", "Ida is a nurse")["outcome"] == "deduplicated"


def test_someone_with_the_users_first_name_is_not_the_user(api):
    """Before: "Dana Jones works at Acme" read as "the user Jones works at Acme", a fuller statement of
    the user Dana's fact, and was merged into it: the user's fact became someone else's."""
    first = write(api, "dana", "The user works at Acme")
    other = write(api, "dana", "Dana Jones works at Acme")
    assert other["outcome"] == "created", other
    assert active("dana") == ["Dana Jones works at Acme", "The user works at Acme"]
    assert Fact.objects.get(pk=first["fact"]["id"]).content == "The user works at Acme"


@pytest.mark.parametrize("user", ["user", "will"])
def test_a_user_id_that_is_a_word_of_the_statement_still_names_statements_alike(api, user):
    """Before: the id "user" counted as the user's name, so "The user drinks ..." read "the the user
    drinks ...", about no one, and never met "I drink ..."."""
    first = write(api, user, "The user drinks oolong tea")
    again = write(api, user, "I drink oolong tea")
    assert again["outcome"] == "deduplicated" and again["fact"]["id"] == first["fact"]["id"], again


def test_a_long_statement_about_the_user_meets_its_twin(api):
    hobbies = (
        "hiking, climbing, kayaking, sailing, skiing, surfing, cycling, running, rowing, swimming, diving, "
        "fishing, camping, skating, juggling, painting, knitting and pottery"
    )
    first = write(api, "dana", f"The user enjoys {hobbies}")
    again = write(api, "dana", f"Dana enjoys {hobbies}")
    assert again["outcome"] == "deduplicated" and again["fact"]["id"] == first["fact"]["id"], again
