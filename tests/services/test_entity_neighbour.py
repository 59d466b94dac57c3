"""Entity resolution step 3 (SPEC §12): embedding neighbour + judge, on the real Postgres with the real
embedding model; the LLM judge over real HTTP against tests/fake_openai.py."""

from __future__ import annotations

import pytest

from extraction import llm
from memory_admin.models import AuditEvent, Entity, EntityMerge, EntityMergeReview, FactEntity, LlmCall, MemoryUser
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.entity_curation import entity_unmerge, merge_review_decide, merge_review_reopen
from memory_admin.services.facts import fact_write
from tests.fake_openai import FakeOpenAI


@pytest.fixture
def system(tenant):
    return Principal.system(tenant.pk)


@pytest.fixture
def operator(tenant):
    return Principal(tenant_id=tenant.pk, role="operator", actor="staff:otto", actor_type="staff")


@pytest.fixture
def alice(tenant):
    return MemoryUser.objects.create(tenant=tenant, external_id="alice")


def write(system, user, content, mentions, relations=()):
    fact = fact_write(principal=system, memory_user=user, content=content, source="user_stated").fact
    fact_entities_link(principal=system, fact=fact, mentions=mentions, relations=relations)
    return fact


def mentioned_in(fact) -> list[str]:
    return sorted(FactEntity.objects.filter(fact=fact).values_list("entity__name", flat=True))


def test_new_entities_carry_the_embedding_of_their_name_and_type(system, alice):
    write(system, alice, "Initech hired the user.", [EntityMention("Initech", "company", "subject")])
    initech = Entity.objects.get(name="Initech")
    assert initech.embedding is not None and len(initech.embedding) == 384


def test_a_misspelt_company_is_merged_automatically_visibly_and_reversibly(system, operator, alice):
    write(system, alice, "Acme Robotics builds arms.", [EntityMention("Acme Robotics", "company", "subject")])
    typo = write(system, alice, "The user called Acme Robotic today.", [EntityMention("Acme Robotic", "company")])
    acme = Entity.objects.get(name="Acme Robotics", merged_into__isnull=True)
    assert mentioned_in(typo) == ["Acme Robotics"] and "acme robotic" in acme.alias_keys
    merge = EntityMerge.objects.get(survivor=acme)
    assert merge.automatic and merge.similarity >= 0.9 and merge.judge == "rules"
    event = AuditEvent.objects.get(action="entity.merge", target_id=str(acme.pk))
    assert event.outcome == "automatic" and "spelling" in event.reason
    # A later mention by the new name finds the survivor at once (step 1).
    again = write(system, alice, "Acme Robotic sent a quote.", [EntityMention("Acme Robotic", "company")])
    assert mentioned_in(again) == ["Acme Robotics"]

    entity_unmerge(principal=operator, merge_id=merge.pk)
    assert mentioned_in(typo) == ["Acme Robotic"]
    acme.refresh_from_db()
    assert "acme robotic" not in acme.alias_keys and acme.name == "Acme Robotics"


def test_an_uncertain_neighbour_becomes_a_review_item_and_accepting_merges(system, operator, alice):
    write(system, alice, "Jon Smith runs the lab.", [EntityMention("Jon Smith", "person", "subject")])
    fact = write(system, alice, "John Smith ordered reagents.", [EntityMention("John Smith", "person", "subject")])
    assert mentioned_in(fact) == ["John Smith"]  # kept apart until someone decides
    item = EntityMergeReview.objects.get()
    assert item.status == "open" and item.entity.name == "John Smith" and item.candidate.name == "Jon Smith"
    assert 0.8 <= item.similarity < 0.9 and not EntityMerge.objects.exists()

    # The queue's depth is on /metrics, like the other review queues; names never are.
    from tests.ops.test_metrics import sample, scrape

    scraped = scrape()
    assert sample(scraped, "memory_admin_review_queue_depth", tenant=alice.tenant_id, queue="entity_merges") == 1
    assert "Smith" not in scraped

    merge_review_decide(principal=operator, review_id=item.pk, accept=True, note="same lab lead")
    assert mentioned_in(fact) == ["Jon Smith"]
    item.refresh_from_db()
    assert item.status == "accepted" and item.merge.survivor.name == "Jon Smith"
    merge_review_reopen(principal=operator, review_id=item.pk)
    item.refresh_from_db()
    assert item.status == "open" and mentioned_in(fact) == ["John Smith"]
    merge_review_decide(principal=operator, review_id=item.pk, accept=False)
    assert EntityMergeReview.objects.get().status == "rejected" and mentioned_in(fact) == ["John Smith"]


def test_a_neighbour_whose_facts_disagree_is_kept_apart_without_a_review_item(system, alice):
    write(
        system,
        alice,
        "Jon Smith works at Initech.",
        [EntityMention("Jon Smith", "person", "subject"), EntityMention("Initech", "company", "object")],
        [RelationDraft("Jon Smith", "works_at", "Initech")],
    )
    fact = write(
        system,
        alice,
        "John Smith works at Hooli.",
        [EntityMention("John Smith", "person", "subject"), EntityMention("Hooli", "company", "object")],
        [RelationDraft("John Smith", "works_at", "Hooli")],
    )
    assert mentioned_in(fact) == ["Hooli", "John Smith"]
    assert not EntityMergeReview.objects.exists() and not EntityMerge.objects.exists()


def test_another_users_entity_is_never_a_neighbour(system, tenant, alice):
    bob = MemoryUser.objects.create(tenant=tenant, external_id="bob")
    write(system, bob, "Acme Robotics builds arms.", [EntityMention("Acme Robotics", "company", "subject")])
    fact = write(system, alice, "Acme Robotic called.", [EntityMention("Acme Robotic", "company")])
    assert mentioned_in(fact) == ["Acme Robotic"]
    assert not EntityMerge.objects.exists() and not EntityMergeReview.objects.exists()


@pytest.fixture
def judge_server(settings):
    server = FakeOpenAI().start()
    settings.OPENAI_API_KEY = "sk-test-not-a-real-key"
    settings.OPENAI_BASE_URL = server.base_url
    settings.OPENAI_TIMEOUT_SECONDS = 2.0
    settings.ENTITY_JUDGE = "llm"
    settings.CONTRADICTION_JUDGE = "rules"
    settings.GUARD_JUDGE = "rules"
    llm.client.cache_clear()
    yield server
    llm.client.cache_clear()
    server.stop()


KATHERINE = [EntityMention("Katherine Jones", "person", "subject")]
KATHARINE = [EntityMention("Katharine Jones", "person", "subject")]


def test_the_llm_judge_decides_what_the_rules_cannot_and_is_costed(system, alice, judge_server):
    judge_server.judge = lambda prompt: {"same": "Katharine" in prompt, "reason": "one spelling of one name"}
    write(system, alice, "Katherine Jones chairs the board.", KATHERINE)
    fact = write(system, alice, "Katharine Jones signed the memo.", KATHARINE)
    assert mentioned_in(fact) == ["Katherine Jones"]
    assert judge_server.count("judge") == 1  # asked once, only for the unsure pair
    merge = EntityMerge.objects.get()
    assert merge.automatic and merge.judge == "llm"
    call = LlmCall.objects.get(layer="entity_judge")
    assert call.ok and call.prompt_tokens > 0


def test_the_llm_judge_saying_different_keeps_them_apart(system, alice, judge_server):
    judge_server.judge = lambda prompt: {"same": False, "reason": "two people"}
    write(system, alice, "Katherine Jones chairs the board.", KATHERINE)
    fact = write(system, alice, "Katharine Jones signed the memo.", KATHARINE)
    assert mentioned_in(fact) == ["Katharine Jones"]
    assert not EntityMerge.objects.exists() and not EntityMergeReview.objects.exists()


def test_a_failing_llm_judge_leaves_a_review_item_and_the_write_lands(system, alice, judge_server):
    judge_server.fail_next("500", "500", "500")
    write(system, alice, "Katherine Jones chairs the board.", KATHERINE)
    fact = write(system, alice, "Katharine Jones signed the memo.", KATHARINE)
    assert mentioned_in(fact) == ["Katharine Jones"]
    assert EntityMergeReview.objects.get().judge == "llm"
    assert LlmCall.objects.filter(layer="entity_judge", ok=False).exists()


def test_the_command_embeds_entities_made_before_step_3_and_is_idempotent(system, alice, tenant):
    from io import StringIO

    from django.core.management import call_command

    from memory_admin.embedding import embed_one

    write(system, alice, "Initech hired the user.", [EntityMention("Initech", "company", "subject")])
    Entity.objects.update(embedding=None)
    out = StringIO()
    call_command("entity_embeddings", "--tenant", tenant.slug, stdout=out, stderr=StringIO())
    assert out.getvalue().strip() == "1 entity embedded."
    initech = Entity.objects.get(name="Initech")
    assert list(initech.embedding) == pytest.approx(embed_one("Initech (company)"), abs=1e-5)
    again = StringIO()
    call_command("entity_embeddings", stdout=again, stderr=StringIO())
    assert again.getvalue().strip() == "0 entities embedded."
