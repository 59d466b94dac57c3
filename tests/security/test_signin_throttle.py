"""Sign-in throttling that cannot be used to lock a person out (services.throttle): guessing is slowed
and then refused, per (account, address) and per address, while the real user signs in, during the
attack, from another address and from a browser where they signed in before."""

from __future__ import annotations

import pytest
from django.test import Client

from memory_admin.models import ThrottleWindow
from memory_admin.services.staff import staff_create
from memory_admin.services.throttle import KNOWN_DEVICE_COOKIE

PASSWORD = "correct horse battery"
LIMIT = 10


def sign_in(client: Client, username: str, password: str, address: str):
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def olga(tenant, settings):
    settings.LOGIN_FAILURE_LIMIT = LIMIT
    staff_create(tenant_slug=tenant.slug, username="olga", role="admin", password=PASSWORD)
    return "olga"


def signed_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


def attack(account: str, *, addresses: int, tries: int, first: int = 0) -> list[int]:
    """Wrong passwords from `addresses` addresses (203.0.113.<first>...), `tries` each: the answers."""
    return [
        sign_in(Client(), account, f"guess {a}-{t}", address=f"203.0.113.{a}").status_code
        for a in range(first, first + addresses)
        for t in range(tries)
    ]


def test_guessing_from_one_address_is_refused_after_the_limit(olga):
    codes = attack(olga, addresses=1, tries=LIMIT + 5)
    assert codes[:LIMIT] == [200] * LIMIT and codes[LIMIT:] == [429] * 5
    # No password is checked any more from there, not even the right one.
    refused = sign_in(Client(), olga, PASSWORD, address="203.0.113.0")
    assert refused.status_code == 429 and not signed_in(refused) and int(refused["Retry-After"]) >= 1
    assert "Too many failed sign-ins from this address" in refused.content.decode()


def test_guessing_from_many_addresses_is_slowed_once_the_account_is_under_attack(olga):
    first = attack(olga, addresses=1, tries=LIMIT)  # the account is now under attack
    assert first == [200] * LIMIT
    spread = attack(olga, addresses=5, tries=LIMIT, first=1)  # now from 5 more addresses...
    # ...each new address gets LIMIT // 3 tries, not LIMIT: 15 guesses checked instead of 50.
    assert spread.count(200) == 5 * (LIMIT // 3) and spread.count(429) == 5 * (LIMIT - LIMIT // 3)


def test_an_address_guessing_across_accounts_is_refused(olga, tenant):
    codes = [sign_in(Client(), f"someone{i}", "wrong", address="198.51.100.9").status_code for i in range(LIMIT + 1)]
    assert codes[:LIMIT] == [200] * LIMIT and codes[LIMIT] == 429


def test_the_real_user_signs_in_from_another_address_during_an_attack(olga):
    codes = attack(olga, addresses=4, tries=LIMIT)
    assert 429 in codes and codes.count(200) >= LIMIT
    assert signed_in(sign_in(Client(), olga, PASSWORD, address="192.0.2.44"))


def test_the_real_user_signs_in_from_a_known_browser_even_at_the_attackers_address(olga):
    browser = Client()
    assert signed_in(sign_in(browser, olga, PASSWORD, address="192.0.2.10"))
    assert browser.cookies[KNOWN_DEVICE_COOKIE].value
    browser.post("/accounts/logout/")
    # The attacker shares the owner's address (one office, one NAT) and exhausts it.
    codes = attack(olga, addresses=1, tries=LIMIT + 2)
    assert codes[-1] == 429
    assert sign_in(Client(), olga, PASSWORD, address="203.0.113.0").status_code == 429  # a new browser there: no
    assert signed_in(sign_in(browser, olga, PASSWORD, address="203.0.113.0"))  # the known browser: yes


def test_a_known_device_cookie_is_not_a_free_pass_for_guessing(olga, tenant):
    browser = Client()
    assert signed_in(sign_in(browser, olga, PASSWORD, address="192.0.2.10"))
    browser.post("/accounts/logout/")
    codes = [sign_in(browser, olga, f"guess {i}", address=f"192.0.2.{20 + i}").status_code for i in range(LIMIT + 1)]
    assert codes[:LIMIT] == [200] * LIMIT and codes[LIMIT] == 429
    # Another account's cookie counts for nothing on this one: the ordinary rules apply.
    staff_create(tenant_slug=tenant.slug, username="piet", role="operator", password=PASSWORD)
    assert sign_in(browser, "piet", PASSWORD, address="192.0.2.99").status_code == 302


def test_the_counters_hold_no_name_and_no_address(olga):
    attack(olga, addresses=2, tries=2)
    buckets = " ".join(ThrottleWindow.objects.values_list("bucket", flat=True))
    assert buckets and "olga" not in buckets and "203.0.113" not in buckets


def test_a_failed_sign_in_reads_its_counts_in_one_statement_and_counts_in_one(olga):
    """A burst of guesses costs the database two statements each, however many counters an attempt has
    (the occasional sweep of old windows aside)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert sign_in(Client(), olga, "a wrong guess", address="203.0.113.7").status_code == 200
    table = ThrottleWindow._meta.db_table
    on_counters = [q["sql"] for q in queries if table in q["sql"] and not q["sql"].startswith("DELETE")]
    assert [sql.split()[0] for sql in on_counters] == ["SELECT", "INSERT"], on_counters
    assert ThrottleWindow.objects.count() == 3  # the account, the (account, address) pair, the address
