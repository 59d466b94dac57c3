"""The typed client's entity methods against the real API under gunicorn: search, detail, graph, and
curation (merge and undo, split, rename, close and reopen, review items) with their exceptions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from memory_admin_client import (
    AlreadyResolved,
    EntityAliasUnknown,
    EntityDetail,
    EntityMerged,
    EntityScopeMismatch,
    Forbidden,
    MemoryAdmin,
    NotFound,
    ReadOnlyScope,
    RelationCorrected,
)

from memory_admin.models import Entity, EntityMergeReview, MemoryUser, Relation
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_write

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PAST = datetime(2025, 1, 1, tzinfo=UTC)


def stated(tenant, user_id, content, mentions, relations=()):
    system = Principal.system(tenant.pk)
    user, _ = MemoryUser.objects.get_or_create(tenant=tenant, external_id=user_id)
    fact = fact_write(principal=system, memory_user=user, content=content, source="user_stated", observed_at=PAST)
    fact_entities_link(principal=system, fact=fact.fact, mentions=mentions, relations=relations)
    return fact.fact


@pytest.fixture
def graph(tenant):
    stated(
        tenant,
        "alice",
        "Bob Smith works at Initech.",
        [EntityMention("Bob Smith", "person", "subject"), EntityMention("Initech", "company", "object")],
        [RelationDraft("Bob Smith", "works_at", "Initech")],
    )
    stated(tenant, "alice", "Robert Smith lives in Lisbon.", [EntityMention("Robert Smith", "person", "subject")])
    stated(tenant, "bob", "Umbrella Corp is a client.", [EntityMention("Umbrella Corp", "company", "subject")])
    return {e.name: str(e.pk) for e in Entity.objects.filter(tenant=tenant)}


def test_reading_the_graph(gunicorn_server, tenant, make_key, graph):
    with MemoryAdmin(gunicorn_server, make_key(tenant)) as mem:
        assert [e.name for e in mem.entities.search("bob smith").items] == ["Bob Smith"]
        detail = mem.entities.get(graph["Bob Smith"])
        assert isinstance(detail, EntityDetail) and detail.merged_into is None
        assert [f.content for f in detail.facts] == ["Bob Smith works at Initech."]
        assert [(r.subject.name, r.type, r.object.name) for r in detail.relations] == [
            ("Bob Smith", "works_at", "Initech")
        ]
        around = mem.entities.graph(graph["Bob Smith"], depth=2, as_of=datetime(2025, 6, 1, tzinfo=UTC))
        assert {n.name for n in around.nodes} == {"Bob Smith", "Initech"} and around.as_of.year == 2025
        with pytest.raises(Forbidden):  # an ordinary key reads the graph but does not curate it
            mem.entities.rename(graph["Bob Smith"], "Mallory")


def test_curating_through_the_client(gunicorn_server, tenant, make_key, graph):
    with MemoryAdmin(gunicorn_server, make_key(tenant, admin=True, agent="admin-agent")) as admin:
        merge = admin.entities.merge(graph["Bob Smith"], graph["Robert Smith"], note="same person")
        assert merge.loser.merged_into == graph["Bob Smith"] and "Robert Smith" in merge.survivor.aliases
        merged = admin.entities.get(graph["Robert Smith"])
        assert merged.merged_into == graph["Bob Smith"] and merged.merge_id == merge.id
        assert [(m.id, m.loser.name) for m in admin.entities.get(graph["Bob Smith"]).merges] == [
            (merge.id, "Robert Smith")
        ]
        assert admin.entities.graph(graph["Robert Smith"]).root == graph["Bob Smith"]
        with pytest.raises(EntityMerged):
            admin.entities.rename(graph["Robert Smith"], "Rob")
        assert admin.entities.undo_merge(merge.id).undone_at is not None
        with pytest.raises(AlreadyResolved) as twice:
            admin.entities.undo_merge(merge.id)
        assert twice.value.status_now == "undone"
        with pytest.raises(EntityScopeMismatch):
            admin.entities.merge(graph["Bob Smith"], graph["Umbrella Corp"])

        assert admin.entities.rename(graph["Bob Smith"], "Bobby Smith").name == "Bobby Smith"
        split = admin.entities.split(graph["Bob Smith"], "Bob Smith")
        assert split.split_off.name == "Bob Smith" and split.entity.aliases == ["Bobby Smith"]
        with pytest.raises(EntityAliasUnknown):
            admin.entities.split(graph["Bob Smith"], "Lisbon")

        works = Relation.objects.get(type="works_at")
        assert admin.relations.close(works.pk, note="left").valid_to is not None
        assert admin.relations.reopen(works.pk).valid_to is None
        admin.facts.correct(str(works.source_fact_id), "Bob Smith works at Globex.")
        with pytest.raises(RelationCorrected):
            admin.relations.reopen(works.pk)

        item = EntityMergeReview.objects.create(
            tenant=tenant, memory_user=MemoryUser.objects.get(tenant=tenant, external_id="alice"),
            entity_id=graph["Robert Smith"], candidate_id=split.split_off.id, similarity=0.8,
        )  # fmt: skip
        assert [i.id for i in admin.entity_reviews.list().items] == [str(item.pk)]
        assert admin.entity_reviews.accept(str(item.pk)).merge_id
        assert admin.entity_reviews.reopen(str(item.pk)).status == "open"
        assert admin.entity_reviews.reject(str(item.pk), note="different men").status == "rejected"
        assert admin.entity_reviews.list().items == []

    org = Entity.objects.create(
        tenant=tenant, scope="org", name="Globex Corp", type="company", aliases=["Globex Corp"],
        alias_keys=["globex corp"], first_seen=PAST, last_seen=PAST,
    )  # fmt: skip
    with MemoryAdmin(gunicorn_server, make_key(tenant, admin=True, users=["alice"], agent="limited")) as limited:
        with pytest.raises(ReadOnlyScope):
            limited.entities.rename(str(org.pk), "Globex")
        with pytest.raises(NotFound):
            limited.entities.rename(graph["Umbrella Corp"], "Mallory")
