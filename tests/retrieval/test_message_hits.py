"""Messages as episodic memory in /search (KINDS.md): a posted message is a hit once indexed, with its text
as stored (screened), only for whoever may read it, beside the facts and deduplicated against them.

Indexing is the worker's task (tests/extraction/test_message_index_worker.py runs it on a real worker);
here its service runs in the test process, after the posts.
"""

from __future__ import annotations

import pytest

from memory_admin.models import Fact, MemoryUser, Message
from memory_admin.retrieval import fact_search
from memory_admin.selectors.access import Principal
from memory_admin.services.message_index import messages_index

pytestmark = pytest.mark.django_db

SECRET = "sk-proj-" + "Zq8" * 12


def post(api, user, thread, *contents):
    r = api.post(
        f"users/{user}/messages",
        {"thread_id": thread, "messages": [{"role": "user", "content": c} for c in contents]},
    )
    assert r.status_code == 202, r.content
    return r.json()["message_ids"]


def hits(api, user, q, **params):
    r = api.get(f"users/{user}/search", q=q, **params)
    assert r.status_code == 200, r.content
    return r.json()["hits"]


def texts(found):
    return [h["message"]["text"] for h in found if h["kind"] == "message"]


def test_a_posted_message_is_a_hit_once_indexed(api):
    [mid] = post(api, "ana", "trip", "We finally booked the ferry to Stromboli for the volcano hike in June.")
    assert hits(api, "ana", "volcano hike ferry") == []  # not indexed yet: the post does not wait for it
    assert messages_index() == 1
    [hit] = hits(api, "ana", "volcano hike ferry")
    assert hit["kind"] == "message" and hit["fact"] is None
    assert hit["message"]["id"] == mid and hit["message"]["thread_id"] == "trip" and hit["message"]["role"] == "user"
    assert "Stromboli" in hit["message"]["text"]
    assert hit["score"]["final"] > 0 and hit["score"]["cosine"] > 0.3


def test_a_message_holding_a_secret_is_found_without_it(api):
    post(api, "ben", "ops", f"The deploy key for the billing cluster is {SECRET}, rotate it on Fridays.")
    messages_index()
    r = api.get("users/ben/search", q="deploy key billing cluster")
    assert r.status_code == 200 and SECRET not in r.content.decode()
    [text] = texts(r.json()["hits"])
    assert "[REDACTED:openai_key]" in text and "billing cluster" in text


def test_a_message_kept_only_as_a_placeholder_is_never_searchable(api):
    [mid] = post(api, "cy", "t", "placeholder")
    Message.objects.filter(pk=mid).update(content="[REDACTED:message]")
    messages_index()
    assert Message.objects.get(pk=mid).embedding is None
    assert texts(hits(api, "cy", "REDACTED message")) == []


def test_another_users_or_tenants_messages_never_appear(api, tenant, other_tenant, make_api):
    post(api, "dora", "t", "Dora adopted a three-legged greyhound called Pixel last spring.")
    post(api, "eli", "t", "Eli adopted a greyhound called Comet from the shelter.")
    other = make_api(other_tenant)
    post(other, "dora", "t", "This Dora adopted a greyhound too, named Biscuit.")
    messages_index()
    assert texts(hits(api, "dora", "adopted greyhound")) == [
        "Dora adopted a three-legged greyhound called Pixel last spring."
    ]
    assert texts(hits(other, "dora", "adopted greyhound")) == ["This Dora adopted a greyhound too, named Biscuit."]
    # A key restricted to Dora reads her messages, and not Eli's at all.
    restricted = make_api(tenant, users=["dora"], agent="dora-agent")
    assert len(texts(hits(restricted, "dora", "adopted greyhound"))) == 1
    assert restricted.get("users/eli/search", q="adopted greyhound").status_code == 404


def test_kinds_choose_the_hits_returned(api):
    post(api, "fay", "t", "Fay keeps her climbing shoes in the red locker at the gym.")
    api.post("users/fay/facts", {"content": "Fay climbs at the gym on Tuesdays", "source": "user_stated"})
    messages_index()
    assert {h["kind"] for h in hits(api, "fay", "climbing gym")} == {"fact", "message"}
    only_facts = hits(api, "fay", "climbing gym", kinds="fact")
    assert [h["kind"] for h in only_facts] == ["fact"] and only_facts[0]["message"] is None
    assert [h["kind"] for h in hits(api, "fay", "climbing gym", kinds="message")] == ["message"]
    r = api.get("users/fay/search", q="climbing gym", kinds="message,fact")
    assert r.json()["kinds"] == ["message", "fact"]


@pytest.mark.parametrize("kinds", ["", "facts", "fact,,message", "fact,episode"])
def test_an_unknown_or_empty_kind_is_refused(api, kinds):
    post(api, "gus", "t", "Gus repairs vintage radios in his garage.")
    r = api.get("users/gus/search", q="radios", kinds=kinds)
    assert r.status_code == 422, r.content
    body = r.json()
    assert body["code"] == "invalid" and [e["field"] for e in body["errors"]] == ["kinds"]


def test_erasing_the_user_removes_their_messages_from_search(api, admin_api, tenant):
    post(api, "hal", "t", "Hal's locker code at the pool is hidden under the blue mat.")
    messages_index()
    assert texts(hits(api, "hal", "locker code pool"))
    user = MemoryUser.objects.get(tenant=tenant, external_id="hal")
    assert admin_api.delete("users/hal").status_code == 200
    assert not Message.objects.filter(memory_user=user, embedding__isnull=False).exists()
    messages_index()  # nothing of theirs is indexed again
    assert not Message.objects.filter(memory_user=user, embedding__isnull=False).exists()
    user.refresh_from_db()
    system = Principal.system(tenant.pk)
    found = fact_search(principal=system, memory_user=user, query="locker code pool", kinds=("fact", "message"))
    assert [h.kind for h in found.hits if h.kind == "message"] == []


def _fact_from(api, user, message_id, content):
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    Fact.objects.filter(pk=r.json()["fact"]["id"]).update(message_id=message_id)  # as extraction links it
    return r.json()["fact"]["id"]


def test_a_message_and_the_facts_extracted_from_it_are_one_hit(api):
    [short] = post(api, "ivy", "t1", "Ivy moved to Porto in March.")
    long_text = (
        "Ivy moved to Porto in March, after the bakery she ran in Leeds closed; her brother Tom helped "
        "carry the piano up four flights and the cat hid under the stairs for a week."
    )
    [long] = post(api, "ivy", "t2", long_text)
    messages_index()
    fact_short = _fact_from(api, "ivy", short, "Ivy moved to Porto in March")
    fact_long = _fact_from(api, "ivy", long, "Tom carried the piano up four flights")
    found = hits(api, "ivy", "when did Ivy move to Porto")
    facts = {h["fact"]["id"] for h in found if h["kind"] == "fact"}
    messages = {h["message"]["id"] for h in found if h["kind"] == "message"}
    # The short message says nothing its fact does not: its fact stands for both.
    assert fact_short in facts and short not in messages
    # The long one says more and answers the question better than its fact: it stands for both, once.
    assert long in messages and fact_long not in facts
    assert len(found) == 2
    # Without the facts shown there is nothing to deduplicate against.
    assert {h["message"]["id"] for h in hits(api, "ivy", "when did Ivy move to Porto", kinds="message")} == {
        short,
        long,
    }
    # Facts alone are all shown, whatever they were extracted from.
    assert {h["fact"]["id"] for h in hits(api, "ivy", "when did Ivy move to Porto", kinds="fact")} == {
        fact_short,
        fact_long,
    }


def test_a_message_naming_the_entity_a_question_names_is_lifted_as_a_fact_naming_it_is(api):
    # The entity exists once a fact names it (drawn from its text as the worker draws it).
    r = api.post("users/kai/facts", {"content": "Kasia Nowak is Kai's neighbour.", "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    from memory_admin.models import Entity

    if not Entity.objects.filter(alias_keys__overlap=["kasia nowak"]).exists():
        from memory_admin.services.entity_draw import fact_draw

        fact_draw(Fact.objects.get(pk=r.json()["fact"]["id"]), mentioned=False)
    assert Entity.objects.filter(alias_keys__overlap=["kasia nowak"]).exists()
    about = "Kasia Nowak adopted a greyhound last spring."
    naming = "Marek adopted a greyhound with Kasia Nowak last spring."
    post(api, "kai", "t1", about, naming, "Marek adopted a greyhound last spring.", "Kasia Nowakowski adopted one too.")
    messages_index()
    found = hits(api, "kai", "What did Kasia Nowak adopt?", kinds="message")
    entity = {h["message"]["text"]: h["score"]["entity"] for h in found}
    # About her (opening with her name) more than naming her in passing; another name, or a longer one, not.
    assert entity[about] > entity[naming] > 0
    assert entity["Marek adopted a greyhound last spring."] == 0
    assert entity["Kasia Nowakowski adopted one too."] == 0
    assert found[0]["message"]["text"] == about


def test_a_search_weighs_the_nearest_messages_and_the_keyword_matches_not_the_whole_log(api, monkeypatch):
    from memory_admin.retrieval import messages

    monkeypatch.setattr(messages, "MESSAGE_NEAREST", 2)
    messages._statement.cache_clear()
    try:
        post(api, "ivo", "chat", *[f"Talked about the weather again, day {n}, cloudy and mild." for n in range(10)])
        post(api, "ivo", "chat", "The plumber's invoice from Kowalczyk arrived today.")
        assert messages_index() == 11
        r = api.get("users/ivo/search", q="Kowalczyk", kinds="message")
        assert r.status_code == 200, r.content
        # Two nearest plus the one message holding the word, not all eleven of the log.
        assert r.json()["candidates"] <= 3
        assert "The plumber's invoice from Kowalczyk arrived today." in texts(r.json()["hits"])
    finally:
        messages._statement.cache_clear()
