"""The per-user cap never loses new information on arrival (issue 8 item 13). A fact younger than
FACT_CAP_GRACE_HOURS is evicted only after every older unpinned fact, however often those were read;
in a burst of writes past the cap, young facts go by stated confidence, oldest first, so a new fact at
the same confidence as the others survives its own write. `capped` is left for a new fact less sure
than every other young fact, or one arriving when everything else is pinned."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from memory_admin.models import AuditEvent, Fact
from memory_admin.selectors.access import Principal
from memory_admin.services.lifecycle import lifecycle_gc_run

CITIES = [
    "Oslo",
    "Lima",
    "Quito",
    "Hanoi",
    "Dakar",
    "Perth",
    "Cusco",
    "Bergen",
    "Porto",
    "Tunis",
    "Malmo",
    "Split",
    "Leeds",
    "Turin",
    "Basel",
]


def write(api, content, **fields):
    r = api.post("users/alice/facts", {"content": content, "confidence": 0.8, **fields})
    assert r.status_code in (200, 201), r.content
    return r.json()


def active_ids() -> set[str]:
    return {
        str(pk)
        for pk in Fact.objects.filter(memory_user__external_id="alice", status="active").values_list("id", flat=True)
    }


def test_a_burst_past_the_cap_at_equal_confidence_keeps_every_new_fact(api, admin_api):
    assert admin_api.patch("settings", {"fact_cap": 5}).status_code == 200
    written = []
    for city in CITIES:
        body = write(api, f"Alice has a pen pal in {city}")
        assert body["outcome"] == "created", body
        assert body["fact"]["status"] == "active" and body["fact"]["id"] in active_ids()
        if len(written) >= 5:
            # The oldest of the young facts makes room, and the writer is told which.
            assert body["evicted_ids"] == [written[-5]]
        written.append(body["fact"]["id"])
    assert active_ids() == set(written[-5:])
    assert AuditEvent.objects.filter(action="fact.evict").count() == len(CITIES) - 5


def test_new_facts_displace_older_often_read_facts_at_the_same_confidence(api, admin_api):
    assert admin_api.patch("settings", {"fact_cap": 5}).status_code == 200
    old = [write(api, f"Alice visited {city} last year")["fact"]["id"] for city in CITIES[:5]]
    # Three days old and read forty times each: a higher effective confidence than any new fact.
    Fact.objects.filter(pk__in=old).update(
        created_at=timezone.now() - timedelta(days=3), access_count=40, last_accessed_at=timezone.now()
    )
    for i, city in enumerate(CITIES[5:10]):
        body = write(api, f"Alice collects postcards from {city}")
        assert body["outcome"] == "created" and body["fact"]["id"] in active_ids(), body
        assert len(body["evicted_ids"]) == 1 and str(body["evicted_ids"][0]) in old
        assert len(active_ids() & set(old)) == 4 - i
    assert Fact.objects.filter(pk__in=old, status="evicted").count() == 5


def test_old_behaviour_with_no_grace_period(api, admin_api, settings):
    settings.FACT_CAP_GRACE_HOURS = 0
    assert admin_api.patch("settings", {"fact_cap": 2}).status_code == 200
    old = [write(api, f"Alice visited {city} last year")["fact"]["id"] for city in CITIES[:2]]
    Fact.objects.filter(pk__in=old).update(access_count=40, last_accessed_at=timezone.now())
    assert write(api, "Alice collects postcards from Perth")["outcome"] == "capped"


def test_capped_is_left_for_the_least_sure_or_an_all_pinned_cap(api, admin_api):
    assert admin_api.patch("settings", {"fact_cap": 2}).status_code == 200
    write(api, "Alice's daughter is called Maya", pinned=True)
    write(api, "Alice's son is called Theo", pinned=True)
    body = write(api, "Alice has a cat")
    assert body["outcome"] == "capped" and body["fact"]["status"] == "evicted"
    assert "pinned" in body["reason"]
    assert admin_api.patch("settings", {"fact_cap": 3}).status_code == 200
    write(api, "Alice has a dog", confidence=0.9)
    unsure = write(api, "Alice might have a hamster", confidence=0.75)
    assert unsure["outcome"] == "capped"


def test_lifecycle_still_runs_over_a_capped_user(api, admin_api, tenant):
    assert admin_api.patch("settings", {"fact_cap": 3}).status_code == 200
    for city in CITIES[:6]:
        write(api, f"Alice has a pen pal in {city}", ttl_days=1)
    Fact.objects.filter(memory_user__external_id="alice", status="active").update(
        hard_expires_at=timezone.now() - timedelta(minutes=1)
    )
    report = lifecycle_gc_run(principal=Principal.system(tenant.pk))
    assert report["counts"]["hard_ttl"] == 3
    assert active_ids() == set()


def test_a_batch_at_the_cap_evicts_what_single_writes_would(api, admin_api):
    """The eviction is one statement per stored fact in a batch as in a single write: the same victims,
    in the same order, the same outcomes, the same audit trail. The users start alike: old facts read
    often (a higher effective confidence than new ones), old facts never read, a pinned one, and young
    facts of mixed confidence; then the same writes past the cap, some less sure than what stands."""
    assert admin_api.patch("settings", {"fact_cap": 6}).status_code == 200
    standing = [
        ("visited {} last year", 0.9, {"access_count": 40}),
        ("has a cousin in {}", 0.8, {}),
        ("once lived in {}", 0.95, {}),
        ("sends postcards to {}", 0.7, {"pinned": True}),
    ]
    young = [("is learning the language of {}", 0.85), ("has a flight to {}", 0.75)]
    incoming = [
        ("wants to move to {}", 0.9),
        ("dislikes the weather in {}", 0.72),  # less sure than every young fact: capped
        ("has friends in {}", 0.8),
        ("works remotely from {}", 0.95),
        ("buys coffee beans from {}", 0.74),
        ("reads newspapers from {}", 0.99),
        ("plans a trip to {}", 0.85),
    ]
    trails = {}
    for user, single in (("solo", True), ("bulk", False)):
        ids = {}
        for i, (text, confidence, extra) in enumerate(standing):
            body = api.post(
                f"users/{user}/facts",
                {"content": f"{user} " + text.format(CITIES[i]), "confidence": confidence, "pinned": "pinned" in extra},
            ).json()
            ids[body["fact"]["id"]] = extra
        for pk, extra in ids.items():
            Fact.objects.filter(pk=pk).update(
                created_at=timezone.now() - timedelta(days=3),
                access_count=extra.get("access_count", 0),
                last_accessed_at=timezone.now(),
            )
        for i, (text, confidence) in enumerate(young):
            api.post(
                f"users/{user}/facts", {"content": f"{user} " + text.format(CITIES[4 + i]), "confidence": confidence}
            )
        writes = [
            {"content": f"{user} " + text.format(CITIES[6 + i]), "confidence": confidence}
            for i, (text, confidence) in enumerate(incoming)
        ]
        if single:
            results = [api.post(f"users/{user}/facts", w).json() for w in writes]
        else:
            results = api.post(f"users/{user}/facts/batch", {"facts": writes}).json()["results"]
        content = dict(Fact.objects.filter(memory_user__external_id=user).values_list("id", "content"))

        def text_of(pk, user=user, content=content):
            from uuid import UUID

            return content[UUID(str(pk))].removeprefix(f"{user} ")

        evictions = AuditEvent.objects.filter(action="fact.evict", memory_user__external_id=user).order_by("pk")
        trails[user] = (
            [(r["outcome"], [text_of(pk) for pk in r["evicted_ids"]]) for r in results],
            sorted(
                c.removeprefix(f"{user} ")
                for c in Fact.objects.filter(memory_user__external_id=user, status="active").values_list(
                    "content", flat=True
                )
            ),
            [(text_of(e.target_id), e.before["status"], e.after["status"]) for e in evictions],
        )
    assert trails["bulk"] == trails["solo"]
    outcomes, active, evictions = trails["solo"]
    # The old facts go first (the unread ones before the often-read one), then the young by confidence;
    # a new fact less sure than every other young one is capped on arrival; the pinned one stays.
    assert outcomes == [
        ("created", ["has a cousin in Lima"]),
        ("created", ["once lived in Quito"]),
        ("created", ["visited Oslo last year"]),
        ("created", ["dislikes the weather in Bergen"]),
        ("capped", ["buys coffee beans from Malmo"]),
        ("created", ["has a flight to Perth"]),
        ("created", ["has friends in Porto"]),
    ]
    assert "sends postcards to Hanoi" in active and len(active) == 6
    assert [e[0] for e in evictions] == [evicted for _, (evicted,) in outcomes]
    assert all(before == "active" and after == "evicted" for _, before, after in evictions)
