"""Rate limits (issue 8 item 11, SPEC §11): per API key, and per (account, address) and per client
address for the dashboard sign-in (an account under attack is slowed, never locked); 429 with a JSON
`rate_limited` body and Retry-After; counters in Postgres so
every server process sees the same count; and the password policy for dashboard accounts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from memory_admin.models import ApiKey, Fact, ThrottleWindow
from memory_admin.services.staff import staff_create

ROOT = Path(__file__).resolve().parent.parent.parent
PASSWORD = "correct horse battery"


def assert_rate_limited(response, window: int):
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["code"] == "rate_limited"
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= window and body["retry_after"] == retry_after
    return retry_after


def test_a_key_past_its_limit_gets_429_and_writes_nothing(settings, tenant, make_api):
    settings.API_RATE_LIMIT, settings.API_RATE_WINDOW_SECONDS = 5, 3600
    api, other = make_api(tenant), make_api(tenant, agent="other")
    for i in range(5):
        assert api.post("users/alice/facts", {"content": f"Alice owns {i + 1} bicycles"}).status_code in (200, 201)
    stored = Fact.objects.count()
    assert_rate_limited(api.post("users/alice/facts", {"content": "Alice owns a unicycle"}), 3600)
    assert_rate_limited(api.get("users/alice/facts"), 3600)
    assert Fact.objects.count() == stored
    # Another key of the same tenant has its own count; a bad key is still a 401, not a 429.
    assert other.get("users/alice/facts").status_code == 200
    assert type(api)("mk_" + "x" * 40).get("users/alice/facts").status_code == 401


def test_old_windows_are_swept_as_hits_arrive_and_the_current_one_stays(settings, tenant, make_api, monkeypatch):
    """Housekeeping rides on a request (one in _SWEEP_ONE_IN; every one here): windows older than a day
    go, the current window and its count stay."""
    from memory_admin.services import throttle

    monkeypatch.setattr(throttle, "_SWEEP_ONE_IN", 1)
    old = int(time.time()) - 2 * 24 * 3600
    ThrottleWindow.objects.create(bucket="key:gone", window_start=old, hits=7)
    api = make_api(tenant)
    assert api.get("users/nobody-yet/facts").status_code == 404  # any authenticated request counts
    assert not ThrottleWindow.objects.filter(window_start__lt=int(time.time()) - 24 * 3600).exists()
    assert ThrottleWindow.objects.filter(hits__gte=1).exists()


def test_the_limit_lifts_when_the_window_ends(settings, tenant, make_api):
    settings.API_RATE_LIMIT, settings.API_RATE_WINDOW_SECONDS = 2, 2
    api = make_api(tenant)
    api.get("skills")
    api.get("skills")
    responses = [api.get("skills") for _ in range(3)]
    limited = [r for r in responses if r.status_code == 429]
    if not limited:  # the window turned over between the calls: go once more
        limited = [r for r in (api.get("skills"), api.get("skills"), api.get("skills")) if r.status_code == 429]
    time.sleep(assert_rate_limited(limited[0], 2))
    assert api.get("skills").status_code == 200


def test_zero_turns_the_api_limit_off(settings, tenant, make_api):
    settings.API_RATE_LIMIT = 0
    api = make_api(tenant)
    assert all(api.get("skills").status_code == 200 for _ in range(5))
    assert not ThrottleWindow.objects.exists()


def _database_url() -> str:
    db = connection.settings_dict
    netloc = f"{quote(db['USER'])}:{quote(db['PASSWORD'] or '')}@" + (f":{db['PORT']}" if db["PORT"] else "")
    host = db["HOST"]
    if host.startswith("/"):
        return f"postgresql://{netloc}/{db['NAME']}?host={quote(host)}"
    return f"postgresql://{quote(db['USER'])}:{quote(db['PASSWORD'] or '')}@{host}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_the_count_is_shared_across_processes(settings, tenant, make_api):
    settings.API_RATE_LIMIT, settings.API_RATE_WINDOW_SECONDS = 6, 3600
    api = make_api(tenant)
    key_id = ApiKey.objects.get(tenant=tenant).pk
    assert api.get("skills").status_code == 200
    # Another server process spends five more requests of the same key.
    code = (
        "import django; django.setup()\n"
        "from memory_admin.services.throttle import api_key_hit\n"
        f"for _ in range(5): api_key_hit({key_id})\n"
    )
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "DJANGO_SETTINGS_MODULE": "memory_admin.settings",
        "API_RATE_LIMIT": "6",
        "API_RATE_WINDOW_SECONDS": "3600",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("TEST_DB_NAME", None)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=120)
    assert_rate_limited(api.get("skills"), 3600)


# --- dashboard sign-in ---------------------------------------------------------------------------------


def sign_in(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.fixture
def account(tenant):
    staff_create(tenant_slug=tenant.slug, username="olga", role="operator", password=PASSWORD)
    return "olga"


@pytest.mark.slow
def test_sign_in_slows_an_account_under_attack_without_locking_its_owner_out(settings, account, tenant):
    settings.LOGIN_FAILURE_LIMIT = 10
    for i in range(10):
        r = sign_in(Client(), account, f"wrong guess {i}", address=f"10.0.1.{i}")
        assert r.status_code == 200 and "do not match" in r.content.decode()
    # Under attack, a new address gets few tries for the account (guessing is slowed)...
    for i in range(3):
        assert sign_in(Client(), account, f"more guesses {i}", address="10.0.3.1").status_code == 200
    slowed = sign_in(Client(), account, PASSWORD, address="10.0.3.1")
    assert slowed.status_code == 429 and 1 <= int(slowed["Retry-After"]) <= 15 * 60
    assert "_auth_user_id" not in slowed.client.session
    # ...but the right password from the owner's own address still signs in (tests/security/test_signin_*).
    assert sign_in(Client(), account, PASSWORD, address="10.0.2.1").status_code == 302
    # Another account, from an address that failed once, is unaffected.
    staff_create(tenant_slug=tenant.slug, username="piet", role="operator", password=PASSWORD)
    assert sign_in(Client(), "piet", PASSWORD, address="10.0.1.3").status_code == 302


@pytest.mark.slow
def test_sign_in_locks_an_address_trying_many_accounts(settings, account, tenant):
    settings.LOGIN_FAILURE_LIMIT = 10
    for i in range(10):
        assert sign_in(Client(), f"someone{i}", "wrong password", address="10.9.9.9").status_code == 200
    assert sign_in(Client(), account, PASSWORD, address="10.9.9.9").status_code == 429
    # The account itself is fine from elsewhere.
    ok = sign_in(Client(), account, PASSWORD, address="10.0.0.7")
    assert ok.status_code == 302


def test_typed_user_names_are_not_stored(settings, account):
    sign_in(Client(), "hunter2-typed-in-the-wrong-box", "x")
    buckets = " ".join(ThrottleWindow.objects.values_list("bucket", flat=True))
    assert "hunter2" not in buckets and "10.0.0.1" not in buckets and buckets


# --- password policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "password",
    ["short1", "password1234", "123456789012", "olga-operator-olga"],
    ids=["too-short", "common", "numeric", "like-the-username"],
)
def test_create_staff_refuses_weak_passwords(tenant, password):
    with pytest.raises(CommandError, match="too weak"):
        call_command("create_staff", tenant.slug, "olga-operator", "--role", "operator", "--password", password)
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(username="olga-operator").first()
    assert user is None or not user.check_password(password)


def test_create_staff_accepts_a_strong_or_generated_password(tenant, capsys):
    call_command("create_staff", tenant.slug, "olga", "--role", "operator", "--password", PASSWORD)
    call_command("create_staff", tenant.slug, "pia", "--role", "auditor")
    generated = capsys.readouterr().out.split("generated password: ")[1].strip()
    assert len(generated) >= 20
    assert sign_in(Client(), "olga", PASSWORD).status_code == 302
    assert sign_in(Client(), "pia", generated).status_code == 302
