"""Rules that had two copies and now have one home (issue 12): the confidence gap that settles a
contradiction (write path and periodic scan), the write outcomes (model choices → API schema), the
GC's "last access" (scoring's Python and ORM forms). Where a copy was wrong, the corrected behaviour."""

from __future__ import annotations

from django.test import Client

from memory_admin.embedding import embed_one
from memory_admin.models import Contradiction, Fact, MemoryUser, TenantSettings, WriteOutcome
from memory_admin.scoring import _last_access, last_access_expression
from memory_admin.services.facts import content_hash
from memory_admin.services.lifecycle import contradiction_scan


def write(api, content, user="alice", **fields):
    r = api.post(f"users/{user}/facts", {"content": content, **fields})
    assert r.status_code in (200, 201), r.content
    return r.json()


def stored(user: MemoryUser, content: str, **fields) -> Fact:
    """A fact written around the write path (imported), so that only the scan compares it."""
    return Fact.objects.create(
        tenant=user.tenant,
        memory_user=user,
        content=content,
        content_hash=content_hash(content),
        source="user_stated",
        valid_from=user.created_at,
        embedding=embed_one(content),
        **fields,
    )


def test_a_new_value_as_sure_as_the_slot_replaces_it_when_the_tenant_allows_no_gap(api, tenant):
    # The slot update had its own copy of the gap rule, in which a tie went to the standing value:
    # "the standing value is surer (0.80 vs 0.80)". With the one rule a tie goes to the newer value,
    # as it does for a contradicting neighbour.
    TenantSettings.objects.filter(tenant=tenant).update(auto_resolve_gap=0)
    first = write(api, "Alice's editor is vim", key="preference.editor", confidence=0.8)
    second = write(api, "Alice's editor is Helix", key="preference.editor", confidence=0.8)
    assert second["outcome"] == "updated", second["reason"]
    assert second["other_fact_id"] == first["fact"]["id"]
    assert [f["content"] for f in api.get("users/alice/facts", key="preference.editor").json()["items"]] == [
        "Alice's editor is Helix"
    ]


def test_the_scan_settles_a_pinned_fact_as_the_write_path_does(api, tenant):
    # The write path: a new fact that contradicts a pinned one is overruled, however sure it is.
    pinned = write(api, "The user lives in Berlin", confidence=0.7, pinned=True)
    overruled = write(api, "The user lives in Munich", confidence=1.0)
    assert overruled["outcome"] == "overruled" and overruled["other_fact_id"] == pinned["fact"]["id"]

    # The scan had its own copy, in which a surer fact against a pinned one was queued for a person.
    # Now the pinned side wins there too.
    bob = MemoryUser.objects.create(tenant=tenant, external_id="bob")
    kept = stored(bob, "The user lives in Berlin", confidence=0.7, pinned=True)
    loser = stored(bob, "The user lives in Munich", confidence=1.0)
    report = contradiction_scan(tenant_id=tenant.pk)
    assert report["auto_resolved"] == 1 and report["queued"] == 0
    loser.refresh_from_db()
    assert loser.status == "superseded" and loser.superseded_by_id == kept.pk
    item = Contradiction.objects.get(memory_user=bob)
    assert item.status == "auto_resolved" and item.resolution == ("keep_a" if item.fact_a_id == kept.pk else "keep_b")


def test_in_the_scan_a_pinned_fact_wins_whichever_is_newer_and_two_pinned_go_to_a_person(tenant):
    carol = MemoryUser.objects.create(tenant=tenant, external_id="carol")
    surer = stored(carol, "The user lives in Berlin", confidence=1.0)
    pinned = stored(carol, "The user lives in Munich", confidence=0.6, pinned=True)
    assert contradiction_scan(tenant_id=tenant.pk)["auto_resolved"] == 1
    surer.refresh_from_db()
    pinned.refresh_from_db()
    assert (surer.status, surer.superseded_by_id, pinned.status) == ("superseded", pinned.pk, "active")

    dan = MemoryUser.objects.create(tenant=tenant, external_id="dan")
    first = stored(dan, "The user lives in Berlin", confidence=1.0, pinned=True)
    second = stored(dan, "The user lives in Munich", confidence=0.6, pinned=True)
    report = contradiction_scan(tenant_id=tenant.pk)
    assert report["queued"] == 1 and report["auto_resolved"] == 0
    assert set(Fact.objects.filter(pk__in=[first.pk, second.pk]).values_list("status", flat=True)) == {"active"}
    assert Contradiction.objects.get(memory_user=dan).status == "open"


def test_the_api_schema_enumerates_the_write_outcomes_and_the_model_choices(db):
    schema = Client().get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert schema["WriteOutcome"]["enum"] == WriteOutcome.values
    assert schema["WriteOut"]["properties"]["outcome"] == {"$ref": "#/components/schemas/WriteOutcome"}
    fact_in = schema["FactIn"]["properties"]
    sources = next(v["enum"] for v in fact_in["source"].get("anyOf", [fact_in["source"]]) if "enum" in v)
    # A writer cannot claim the sources the service sets itself.
    assert sources == [s for s in Fact.Source.values if s not in ("user_correction", "notebook")]
    kinds = next(v["enum"] for v in fact_in["kind"].get("anyOf", [fact_in["kind"]]) if "enum" in v)
    assert kinds == Fact.Kind.values


def test_stored_outcomes_answer_201_and_the_others_200(api):
    created = api.post("users/dora/facts", {"content": "Dora keeps bees", "source": "user_stated"})
    again = api.post("users/dora/facts", {"content": "Dora keeps bees.", "source": "user_stated"})
    assert (created.status_code, created.json()["outcome"]) == (201, "created")
    assert (again.status_code, again.json()["outcome"]) == (200, "deduplicated")
    assert WriteOutcome("created").stored and not WriteOutcome("deduplicated").stored
    assert not WriteOutcome.ERROR.audited


def test_the_gc_reads_last_access_as_scoring_does(tenant):
    eve = MemoryUser.objects.create(tenant=tenant, external_id="eve")
    facts = [
        stored(eve, "Eve reads at night", confidence=0.9),
        stored(eve, "Eve swims on Mondays", confidence=0.9, last_accessed_at=eve.created_at),
    ]
    annotated = dict(Fact.objects.for_user(eve).annotate(last=last_access_expression()).values_list("pk", "last"))
    assert all(annotated[f.pk] == _last_access(f) for f in facts)
