"""Who sees what: the dashboard uses the API's access check, so other tenants' and other users'
objects are 404, and each role gets exactly its pages and actions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory_admin.models import Fact, Membership
from memory_admin.selectors.access import Principal
from memory_admin.selectors.staff import memberships_of, principal_from_membership


def test_signed_out_visitors_are_sent_to_sign_in(client, tenant):
    r = client.get(reverse("overview", args=[tenant.slug]))
    assert r.status_code == 302 and r["Location"].startswith(reverse("login"))


def test_sign_in_with_a_password_lands_on_the_overview(client, tenant, make_staff):
    from tests.dashboard.conftest import PASSWORD

    staff = make_staff(tenant, "operator", username="olga")
    r = client.post(reverse("login"), {"username": "olga", "password": PASSWORD}, follow=True)
    assert r.status_code == 200
    assert r.redirect_chain[-1][0] == reverse("overview", args=[tenant.slug])
    assert b"Memory health" in r.content
    assert staff.username == "olga"


def test_a_wrong_password_is_refused(client, tenant, make_staff):
    make_staff(tenant, "operator", username="olga")
    r = client.post(reverse("login"), {"username": "olga", "password": "nope"})
    assert r.status_code == 200 and b"do not match" in r.content


def test_principal_for_staff_carries_role_and_member_user(tenant, make_staff, memory_user):
    # What tenant_view does for every page: the account's membership of this tenant, as a Principal.
    member = make_staff(tenant, "member", memory_user, username="mia")
    user = Membership.objects.get(user__username=member.username).user
    (membership,) = (m for m in memberships_of(user) if m.tenant.slug == tenant.slug)
    principal = principal_from_membership(membership, user.get_username())
    assert principal == Principal(
        tenant_id=tenant.pk, role="member", actor="staff:mia", actor_type="staff", member_user_id=memory_user.pk
    )


def test_another_tenant_is_404(operator, other_tenant):
    assert operator.get(reverse("overview", args=[other_tenant.slug])).status_code == 404
    assert operator.get(reverse("tenant_home", args=[other_tenant.slug])).status_code == 404


def test_another_tenants_user_and_fact_are_404_even_inside_my_tenant_url(operator, tenant, foreign_user, make_fact):
    fact = make_fact(foreign_user, "secret plans")
    assert operator.get(reverse("user_facts", args=[tenant.slug, foreign_user.pk])).status_code == 404
    assert operator.get(reverse("fact_detail", args=[tenant.slug, fact.pk])).status_code == 404
    r = operator.post(reverse("fact_forget", args=[tenant.slug, fact.pk]))
    assert r.status_code == 404
    fact.refresh_from_db()
    assert fact.status == "active"


def test_a_member_sees_only_their_own_memory(member, tenant, memory_user, other_user, make_fact):
    mine = make_fact(memory_user, "Alice likes tea")
    theirs = make_fact(other_user, "Bob likes coffee")
    assert member.get(reverse("user_facts", args=[tenant.slug, memory_user.pk])).status_code == 200
    assert member.get(reverse("fact_detail", args=[tenant.slug, mine.pk])).status_code == 200
    for url in (
        reverse("user_facts", args=[tenant.slug, other_user.pk]),
        reverse("user_notebook", args=[tenant.slug, other_user.pk]),
        reverse("fact_detail", args=[tenant.slug, theirs.pk]),
    ):
        assert member.get(url).status_code == 404, url
    assert member.post(reverse("fact_forget", args=[tenant.slug, theirs.pk])).status_code == 404
    theirs.refresh_from_db()
    assert theirs.status == "active"


@pytest.mark.parametrize(
    "page", ["overview", "users", "review", "skills", "batches", "audit", "keys", "settings", "pii"]
)
def test_a_member_has_no_staff_pages(member, tenant, page):
    assert member.get(reverse(page, args=[tenant.slug])).status_code in (403, 404)


def test_a_member_lands_on_their_notebook_and_may_not_open_other_tabs(member, tenant, memory_user):
    r = member.get(reverse("tenant_home", args=[tenant.slug]))
    assert r["Location"] == reverse("user_notebook", args=[tenant.slug, memory_user.pk])
    assert member.get(reverse("user_episodes", args=[tenant.slug, memory_user.pk])).status_code in (403, 404)


def test_a_member_corrects_and_forgets_their_facts_but_cannot_pin(member, tenant, memory_user, make_fact):
    fact = make_fact(memory_user, "Alice lives in Paris")
    other = make_fact(memory_user, "Alice has a cat")
    assert member.post(reverse("fact_pin", args=[tenant.slug, fact.pk]), {"pinned": "1"}).status_code == 403
    r = member.post(reverse("fact_correct", args=[tenant.slug, fact.pk]), {"content": "Alice lives in Berlin"})
    assert r.status_code == 302
    fact.refresh_from_db()
    assert fact.status == "superseded"
    assert Fact.objects.get(supersedes=fact).content == "Alice lives in Berlin"
    member.post(reverse("fact_forget", args=[tenant.slug, other.pk]))
    other.refresh_from_db()
    assert other.status == "evicted"


def test_an_auditor_reads_everything_and_changes_nothing(auditor, tenant, memory_user, make_fact, make_contradiction):
    fact = make_fact(memory_user, "Alice lives in Paris")
    item = make_contradiction(memory_user)
    assert auditor.get(reverse("pii", args=[tenant.slug])).status_code == 200
    assert auditor.get(reverse("audit", args=[tenant.slug])).status_code == 200
    page = auditor.get(reverse("user_facts", args=[tenant.slug, memory_user.pk])).content.decode()
    assert "Alice lives in Paris" in page and "Forget" not in page
    assert auditor.post(reverse("fact_forget", args=[tenant.slug, fact.pk])).status_code == 403
    assert auditor.post(reverse("fact_correct", args=[tenant.slug, fact.pk]), {"content": "x y z"}).status_code == 403
    assert auditor.post(reverse("review_resolve", args=[tenant.slug, item.pk]), {"action": "keep_a"}).status_code == 403
    assert (
        auditor.post(
            reverse("user_notebook", args=[tenant.slug, memory_user.pk]), {"content": "x", "base_version": "0"}
        ).status_code
        == 403
    )
    assert auditor.post(reverse("settings", args=[tenant.slug]), {"fact_cap": "5"}).status_code == 403
    assert auditor.post(reverse("keys", args=[tenant.slug]), {"agent": "x"}).status_code == 422
    fact.refresh_from_db()
    item.refresh_from_db()
    assert fact.status == "active" and item.status == "open"


def test_operators_do_not_see_pii_blocks(operator, tenant):
    assert operator.get(reverse("pii", args=[tenant.slug])).status_code == 403


def test_an_account_in_two_tenants_switches_between_them(tenant, other_tenant, make_staff):
    from memory_admin.services.staff import staff_create

    client = make_staff(tenant, "operator", username="two-hats")
    staff_create(tenant_slug=other_tenant.slug, username="two-hats", role="auditor")
    r = client.get(reverse("home"))
    assert r.status_code == 200 and other_tenant.slug.encode() in r.content  # the picker
    assert client.get(reverse("tenant_home", args=[other_tenant.slug])).status_code == 302
    assert client.get(reverse("pii", args=[other_tenant.slug])).status_code == 200  # auditor there
    assert client.get(reverse("pii", args=[tenant.slug])).status_code == 403  # operator here
    assert client.get(reverse("home"))["Location"] == reverse("overview", args=[other_tenant.slug])
