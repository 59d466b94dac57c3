"""The access log (which key read which fact, how, when) and the key states (paused, expired, read-only),
through the agent API and the dashboard pages a person uses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.errors import DomainError, Invalid
from memory_admin.models import ApiKey, AuditEvent, FactRead, MemoryUser
from memory_admin.selectors.access import Principal
from memory_admin.services import access_counts
from memory_admin.services.keys import api_key_create, api_key_pause, api_key_revoke
from memory_admin.services.tenant_admin import dashboard_key_create
from tests.conftest import Api


def _key(tenant, **fields) -> tuple[ApiKey, Api]:
    key, raw = api_key_create(tenant_id=tenant.pk, agent_name=fields.pop("agent", "reader"), **fields)
    return key, Api(raw)


def _write(api: Api, user: str, content: str) -> str:
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    return r.json()["fact"]["id"]


@pytest.fixture
def owner_api(tenant, make_api):
    return make_api(tenant, agent="writer")


def test_a_search_hit_and_a_context_block_are_logged_with_the_key_and_the_door(tenant, owner_api):
    fact_id = _write(owner_api, "alice", "Alice keeps bees in her garden")
    key, reader = _key(tenant)
    assert reader.get("users/alice/search", q="bees garden").status_code == 200
    assert reader.get("users/alice/context", task="tell me about the bees").status_code == 200
    rows = list(FactRead.objects.filter(api_key=key).order_by("read_at"))
    assert [(str(r.fact_id), r.via) for r in rows] == [(fact_id, "search"), (fact_id, "context")]
    assert {r.memory_user.external_id for r in rows} == {"alice"}
    assert all(r.reads == 1 and r.tenant_id == tenant.pk for r in rows)


def test_reads_through_mcp_are_logged_as_mcp(tenant, owner_api):
    from memory_admin.retrieval import fact_search
    from memory_admin.selectors.access import memory_user_for

    _write(owner_api, "alice", "Alice plays the theremin")
    key, _ = _key(tenant)
    principal = Principal(tenant_id=tenant.pk, role="agent", actor="agent:reader", api_key_id=key.pk)
    with access_counts.reads_through_mcp():
        fact_search(principal=principal, memory_user=memory_user_for(principal, "alice"), query="theremin", k=5)
    assert list(FactRead.objects.filter(api_key=key).values_list("via", flat=True)) == ["mcp_search"]


def test_reads_between_two_flushes_are_one_row_with_their_count(tenant, owner_api, settings):
    fact_id = _write(owner_api, "alice", "Alice cycles to work")
    key, _ = _key(tenant)
    principal = Principal(tenant_id=tenant.pk, role="agent", actor="agent:reader", api_key_id=key.pk)
    settings.ACCESS_COUNT_FLUSH_SECONDS = 3600  # accumulate; the test flushes by hand
    access_counts.record_access([fact_id], principal, "search")
    access_counts.record_access([fact_id], principal, "search")
    access_counts.record_access([fact_id], principal, "context")
    assert not FactRead.objects.exists()  # nothing written on the read path
    access_counts.flush()
    assert sorted(FactRead.objects.values_list("via", "reads")) == [("context", 1), ("search", 2)]


def test_a_staff_read_is_counted_but_not_logged_as_a_key_read(tenant, owner_api):
    fact_id = _write(owner_api, "alice", "Alice owns a red kayak")
    staff = Principal(tenant_id=tenant.pk, role="operator", actor="staff:otto", actor_type="staff")
    access_counts.record_access([fact_id], staff, "search")
    assert not FactRead.objects.exists()


def test_the_beat_prunes_reads_past_the_retention_and_keeps_the_rest(tenant, owner_api, settings):
    fact_id = _write(owner_api, "alice", "Alice collects stamps")
    key, _ = _key(tenant)
    now = timezone.now()
    for days in (1, 29, 31, 400):
        FactRead.objects.create(
            tenant=tenant, fact_id=fact_id, api_key=key, via="search", read_at=now - timedelta(days=days)
        )
    settings.ACCESS_LOG_RETENTION_DAYS = 30
    from extraction.tasks import access_log_prune

    assert access_log_prune() == 2
    kept = sorted((now - r).days for r in FactRead.objects.values_list("read_at", flat=True))
    assert kept == [1, 29]


def test_a_paused_key_is_refused_with_key_paused_until_resumed(tenant, owner_api):
    _write(owner_api, "alice", "Alice likes jazz")
    key, reader = _key(tenant)
    admin = Principal(tenant_id=tenant.pk, role="admin", actor="staff:ada", actor_type="staff")
    assert reader.get("users/alice/search", q="jazz").status_code == 200
    api_key_pause(principal=admin, key_id=key.pk, paused=True)
    r = reader.get("users/alice/search", q="jazz")
    assert r.status_code == 403 and r.json()["code"] == "key_paused"
    assert reader.post("users/alice/facts", {"content": "Alice likes blues"}).json()["code"] == "key_paused"
    api_key_pause(principal=admin, key_id=key.pk, paused=False)
    assert reader.get("users/alice/search", q="jazz").status_code == 200
    actions = list(AuditEvent.objects.filter(action__startswith="api_key.").values_list("action", flat=True))
    assert actions.count("api_key.pause") == 1 and actions.count("api_key.resume") == 1


def test_a_revoked_key_cannot_be_resumed(tenant):
    key, _ = _key(tenant)
    api_key_revoke(key=key)
    admin = Principal(tenant_id=tenant.pk, role="admin", actor="staff:ada", actor_type="staff")
    with pytest.raises(DomainError) as caught:
        api_key_pause(principal=admin, key_id=key.pk, paused=False)
    assert caught.value.code == "key_revoked" and caught.value.status == 409


def test_an_expired_key_is_refused_with_key_expired(tenant, owner_api):
    _write(owner_api, "alice", "Alice likes chess")
    key, reader = _key(tenant, expires_at=timezone.now() + timedelta(hours=1))
    assert reader.get("users/alice/search", q="chess").status_code == 200
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    r = reader.get("users/alice/search", q="chess")
    assert r.status_code == 401 and r.json()["code"] == "key_expired"


def test_a_read_only_key_reads_but_every_write_is_refused_with_read_only_key(tenant, owner_api):
    fact_id = _write(owner_api, "alice", "Alice speaks Portuguese")
    _, reader = _key(tenant, read_only=True)
    assert reader.get("users/alice/search", q="Portuguese").status_code == 200
    assert reader.get(f"facts/{fact_id}").status_code == 200
    for r in (
        reader.post("users/alice/facts", {"content": "Alice speaks Spanish"}),
        reader.delete(f"facts/{fact_id}"),
        reader.put("users/alice/notebook", {"content": "# hi", "base_version": 0}),
    ):
        assert r.status_code == 403 and r.json()["code"] == "read_only_key", r.content
    assert reader.post("store/search", {"namespace_prefix": ["x"]}).status_code != 403


def test_a_read_only_principal_is_refused_in_the_services_too(tenant):
    from memory_admin.selectors.access import memory_user_for
    from memory_admin.services.facts import fact_write

    principal = Principal(tenant_id=tenant.pk, role="agent_admin", actor="agent:r", read_only=True)
    user = memory_user_for(Principal.system(tenant.pk), "alice", create=True)
    with pytest.raises(DomainError) as caught:
        fact_write(principal=principal, memory_user=user, content="Alice is tall")
    assert caught.value.code == "read_only_key"


def test_a_key_for_memory_users_that_do_not_exist_is_refused_naming_them(tenant):
    MemoryUser.objects.create(tenant=tenant, external_id="user-001")
    admin = Principal(tenant_id=tenant.pk, role="admin", actor="staff:ada", actor_type="staff")
    with pytest.raises(Invalid) as caught:
        dashboard_key_create(principal=admin, agent_name="bot", allowed_user_ids=["user-001", "user-999", "nobody"])
    assert caught.value.code == "unknown_memory_user"
    assert caught.value.extra["unknown"] == ["user-999", "nobody"]
    assert not ApiKey.objects.filter(tenant=tenant).exists()
    key, _ = dashboard_key_create(principal=admin, agent_name="bot", allowed_user_ids=["user-001"])
    assert key.allowed_user_ids == ["user-001"]


def test_an_expiry_in_the_past_is_refused(tenant):
    admin = Principal(tenant_id=tenant.pk, role="admin", actor="staff:ada", actor_type="staff")
    with pytest.raises(Invalid) as caught:
        dashboard_key_create(principal=admin, agent_name="bot", expires_at=timezone.now() - timedelta(days=1))
    assert caught.value.code == "expiry_in_past"


# --- The pages ------------------------------------------------------------------------------------


def test_the_keys_page_refuses_unknown_users_and_keeps_what_was_typed(tenant, admin):
    r = admin.post(f"/t/{tenant.slug}/keys/", {"agent": "support-bot", "users": "user-999, nobody"})
    assert r.status_code == 422
    page = r.content.decode()
    assert "No memory user with the id user-999, nobody" in page
    assert 'value="support-bot"' in page
    assert not ApiKey.objects.filter(tenant=tenant).exists()


def test_the_keys_page_refuses_a_malformed_expiry(tenant, admin):
    r = admin.post(f"/t/{tenant.slug}/keys/", {"agent": "bot", "expires": "next tuesday"})
    assert r.status_code == 422 and "YYYY-MM-DD" in r.content.decode()


def test_a_new_key_is_shown_once_with_a_copy_button_read_only_and_its_expiry(tenant, admin):
    r = admin.post(f"/t/{tenant.slug}/keys/", {"agent": "bot", "read_only": "on", "expires": "2099-01-31"}, follow=True)
    page = r.content.decode()
    key = ApiKey.objects.get(tenant=tenant)
    assert key.read_only and key.expires_at.date().isoformat() == "2099-01-31"
    assert 'data-copy="new-key"' in page and "Copy key" in page
    assert "This key is read-only." in page and "It expires 2099-01-31." in page
    again = admin.get(f"/t/{tenant.slug}/keys/").content.decode()
    assert "Copy key" not in again and "read-only" in again and "2099-01-31" in again


def test_pause_and_resume_from_the_keys_page(tenant, admin, operator):
    key, reader = _key(tenant)
    assert operator.post(f"/t/{tenant.slug}/keys/{key.pk}/pause/").status_code == 403
    page = admin.post(f"/t/{tenant.slug}/keys/{key.pk}/pause/", follow=True).content.decode()
    assert "paused: its requests get 403 key_paused" in page and "paused since" in page and ">Resume<" in page
    assert reader.get("users/alice/search", q="x").json()["code"] == "key_paused"
    page = admin.post(f"/t/{tenant.slug}/keys/{key.pk}/resume/", follow=True).content.decode()
    assert "resumed" in page and ">Pause<" in page
    assert admin.post(f"/t/{tenant.slug}/keys/{key.pk}/explode/").status_code == 404


def test_the_access_log_page_browses_by_key_fact_and_user(tenant, owner_api, operator):
    alice_fact = _write(owner_api, "alice", "Alice keeps bees in her garden")
    _write(owner_api, "bob", "Bob keeps bees on his roof")
    key, reader = _key(tenant, agent="bee-bot")
    other, other_reader = _key(tenant, agent="other-bot")
    reader.get("users/alice/search", q="bees")
    other_reader.get("users/bob/search", q="bees")
    base = f"/t/{tenant.slug}/access/"
    everything = operator.get(base).content.decode()
    assert "Alice keeps bees in her garden" in everything and "Bob keeps bees on his roof" in everything
    by_key = operator.get(base, {"key": key.pk}).content.decode()
    assert "bee-bot" in by_key and "Alice keeps bees" in by_key and "Bob keeps bees" not in by_key
    by_user = operator.get(base, {"user": "bob"}).content.decode()
    assert "Bob keeps bees" in by_user and "Alice keeps bees in her garden" not in by_user
    by_fact = operator.get(base, {"fact": alice_fact}).content.decode()
    assert "search hit" in by_fact and "Bob keeps bees" not in by_fact
    assert operator.get(base, {"fact": "not-a-uuid", "key": "x"}).status_code == 200


def test_the_access_log_is_not_for_members_nor_other_tenants(tenant, other_tenant, owner_api, make_staff, member):
    _write(owner_api, "alice", "Alice keeps bees in her garden")
    _, reader = _key(tenant)
    reader.get("users/alice/search", q="bees")
    assert member.get(f"/t/{tenant.slug}/access/").status_code in (403, 404)
    stranger = make_staff(other_tenant, "admin")
    assert "Alice keeps bees" not in stranger.get(f"/t/{other_tenant.slug}/access/").content.decode()


def test_erasing_a_user_removes_the_log_of_reads_of_their_memories(tenant, owner_api, make_api):
    _write(owner_api, "alice", "Alice keeps bees in her garden")
    _write(owner_api, "bob", "Bob keeps bees on his roof")
    _, reader = _key(tenant)
    reader.get("users/alice/search", q="bees")
    reader.get("users/bob/search", q="bees")
    assert FactRead.objects.filter(memory_user__external_id="alice").exists()
    admin_api = make_api(tenant, admin=True, agent="eraser")
    assert admin_api.delete("users/alice").status_code in (200, 204)
    assert not FactRead.objects.filter(memory_user__external_id="alice").exists()
    assert list(FactRead.objects.values_list("memory_user__external_id", flat=True)) == ["bob"]


def test_the_access_log_page_escapes_memory_content_and_its_queries_do_not_grow_with_rows(
    tenant, owner_api, admin, django_assert_max_num_queries
):
    hostile = _write(owner_api, "alice", 'Alice wrote <img src=x onerror="alert(1)"> in her diary')
    key, _ = _key(tenant)
    now = timezone.now()
    FactRead.objects.bulk_create(
        FactRead(
            tenant=tenant,
            fact_id=hostile,
            memory_user=MemoryUser.objects.get(external_id="alice"),
            api_key=key,
            via="search",
            read_at=now - timedelta(minutes=n),
        )
        for n in range(40)
    )
    url = f"/t/{tenant.slug}/access/"
    admin.get(url)
    # session, user, memberships; the page: count, ids, the page's rows with their joins, the summary
    with django_assert_max_num_queries(8):
        html = admin.get(url).content.decode()
    assert "&lt;img src=x" in html and "<img src=x" not in html
    assert html.count('class="read-user"') >= 25
    assert "<b>40</b> reads of <b>1</b> memory by <b>1</b> key" in html
