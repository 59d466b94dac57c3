"""The API key statement also looks up the memory user a read names (issue 9 §2: one round trip fewer
per search and context request), with the user lookup `memory_user_for` compiles for the key's previous
principal. What a client must never notice: a change to the key, the user or its rights between two
requests is seen by the very next request, and the answers are those of the separate lookup."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory_admin.models import ApiKey
from memory_admin.services import keys

pytestmark = pytest.mark.django_db


def write(api, user, content):
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    return r.json()["fact"]["id"]


def hits(api, user, q="who grows tomatoes"):
    r = api.get(f"users/{user}/search", q=q)
    assert r.status_code == 200, r.content
    return [h["fact"]["id"] for h in r.json()["hits"]]


def statements(api, path, **params):
    with CaptureQueriesContext(connection) as ctx:
        r = api.get(path, **params)
    return r, [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith("DELETE FROM memory_admin_throttle")]


def test_a_keys_second_read_finds_the_user_in_the_key_statement(tenant, make_api):
    api = make_api(tenant)
    write(api, "ola", "Ola grows tomatoes in the greenhouse")
    keys._previous.clear()  # this process has not seen the key yet
    r, sent = statements(api, "users/ola/context", task="tomatoes")
    assert r.status_code == 200
    first = r.json()["sections"]
    assert sum("memory_admin_memoryuser" in s for s in sent) == 1 and "memory_admin_memoryuser" not in sent[0]
    r, sent = statements(api, "users/ola/context", task="tomatoes")
    assert r.status_code == 200 and r.json()["sections"] == first  # the same answer ...
    assert "key_hash" in sent[0] and "memory_admin_memoryuser" in sent[0]  # ... the user read with the key
    assert sum("memory_admin_memoryuser" in s for s in sent) == 1


def test_a_keys_user_switch_is_seen_at_once(tenant, make_api):
    full = make_api(tenant)
    una = write(full, "una", "Una grows tomatoes on the balcony")
    vic = write(full, "vic", "Vic grows tomatoes in a greenhouse")
    restricted = make_api(tenant, users=["una"], agent="una-agent")
    assert hits(restricted, "una") == [una]
    assert hits(restricted, "una") == [una]  # the key's principal is known: the user comes with the key
    ApiKey.objects.filter(agent__name="una-agent").update(allowed_user_ids=["vic"])
    assert restricted.get("users/una/search", q="who grows tomatoes").status_code == 404
    assert hits(restricted, "vic") == [vic]
    ApiKey.objects.filter(agent__name="una-agent").update(allowed_user_ids=[])  # now the whole tenant
    assert hits(restricted, "una") == [una] and hits(restricted, "vic") == [vic]
    ApiKey.objects.filter(agent__name="una-agent").update(allowed_user_ids=["una"])
    r = restricted.get("users/vic/context", task="tomatoes")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


def test_a_user_erased_or_a_key_revoked_between_two_reads_is_seen_at_once(tenant, make_api):
    api = make_api(tenant, admin=True)
    write(api, "wes", "Wes grows tomatoes by the fence")
    other = make_api(tenant, agent="other")
    assert len(hits(other, "wes")) == 1 and len(hits(other, "wes")) == 1
    assert api.delete("users/wes").status_code == 200
    r = other.get("users/wes/search", q="who grows tomatoes")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    ApiKey.objects.filter(agent__name="other").update(revoked_at="2026-01-01T00:00:00Z")
    r = other.get("users/wes/search", q="who grows tomatoes")
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"


def test_a_user_created_after_a_miss_is_found_by_the_next_read(tenant, make_api):
    api = make_api(tenant)
    write(api, "ann", "Ann grows tomatoes")
    assert api.get("users/bob/search", q="tomatoes").status_code == 404
    assert api.get("users/bob/search", q="tomatoes").status_code == 404  # looked up with the key
    bob = write(api, "bob", "Bob grows tomatoes too")
    assert hits(api, "bob") == [bob]


def test_another_tenants_key_never_gets_a_user_of_this_one(tenant, make_api):
    from memory_admin.services.tenants import tenant_create

    mine = make_api(tenant)
    write(mine, "zoe", "Zoe grows tomatoes")
    theirs = make_api(tenant_create(slug="elsewhere"))
    for _ in range(2):
        r = theirs.get("users/zoe/search", q="tomatoes")
        assert r.status_code == 404 and r.json()["code"] == "not_found"


def test_the_key_statement_is_prepared_once_per_connection(tenant, make_api):
    def prepared() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'WITH k AS%%'")
            return cursor.fetchone()[0]

    api = make_api(tenant)
    write(api, "kit", "Kit grows tomatoes")
    assert len(hits(api, "kit")) == 1
    before = prepared()  # the key statement with the user lookup, and without (the key's first request)
    assert 1 <= before <= 2
    for _ in range(4):
        assert len(hits(api, "kit")) == 1
    assert prepared() == before  # reused, not prepared again


def test_a_write_finds_its_user_in_the_key_statement(tenant, make_api):
    """POST /facts and /facts/batch take the user from the key statement as reads do: one statement
    fewer per write. A first write still creates the user (the lookup found none), a restricted key still
    may not write for another user, and an erased user is written for as before (a new life)."""
    api = make_api(tenant)
    write(api, "xia", "Xia grows tomatoes in pots")  # the key is known from here on; xia exists
    with CaptureQueriesContext(connection) as ctx:
        write(api, "xia", "Xia's tomatoes are cherry tomatoes")
        r = api.post(
            "users/xia/facts/batch", {"facts": [{"content": "Xia waters them at dawn", "source": "user_stated"}]}
        )
    assert r.status_code == 200 and r.json()["results"][0]["outcome"] == "created"
    sent = [q["sql"] for q in ctx.captured_queries]
    lookups = [
        s for s in sent if "memory_admin_memoryuser" in s and not s.endswith(("FOR UPDATE", "FOR NO KEY UPDATE"))
    ]
    assert len(lookups) == 2, sent  # the write lock on the user is not a lookup
    assert all("key_hash" in s for s in lookups)
    # A user the key statement did not find is created by its first write, and found by the next.
    new = write(api, "yan", "Yan grows tomatoes on the roof")
    assert write(api, "yan", "Yan grows tomatoes on the roof") == new  # deduplicated into the same fact
    restricted = make_api(tenant, users=["xia"], agent="xia-agent")
    assert (
        restricted.post("users/xia/facts", {"content": "Xia likes basil", "source": "user_stated"}).status_code == 201
    )
    r = restricted.post("users/yan/facts", {"content": "Yan likes basil"})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = restricted.post("users/yan/facts/batch", {"facts": [{"content": "Yan likes basil"}]})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
