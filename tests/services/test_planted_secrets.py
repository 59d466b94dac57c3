"""Planted secrets: every kind of SPEC §4, through every write route; a full dump holds none of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pgserver
import pytest
from django.db import connection

from memory_admin.models import AuditEvent, Fact, PiiBlock

# Built at run time so the literal secrets do not sit in the repository as-is.
SECRETS = {
    "openai_key": "sk-" + "proj-Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s",
    "github_token": "ghp_" + "R2d2C3p0Xw1ngY0d4Lu8eSkyw4lkerHan5oL0",
    "aws_access_key": "AKIA" + "QX7Z2LMN4PRT8VWY",
    "slack_token": "xoxb-" + "1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiJhbGljZSIsImFkbWluIjp0cnVlfQ" + ".Qm9ndXNTaWduYXR1cmVGb3JUZXN0czEyMw",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzq9PlantedKeyMaterialLine0001\n"
    "Zm9vYmFyYmF6cXV4UGxhbnRlZEtleU1hdGVyaWFs\n-----END RSA PRIVATE KEY-----",
    "card_number": "4539 1488 0343 6467",
    "email": "alice.secret.mail@example.org",
    "phone": "+44 20 7946 0958",
    "national_id": "078-05-1120",
}
# What must never appear in the dump (the distinctive core of each value).
NEEDLES = {
    "openai_key": ["Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s"],
    "github_token": ["R2d2C3p0Xw1ngY0d4Lu8eSkyw4lkerHan5oL0"],
    "aws_access_key": ["QX7Z2LMN4PRT8VWY"],
    "slack_token": ["0987654321-AbCdEfGhIjKlMnOp"],
    "jwt": ["eyJzdWIiOiJhbGljZSIsImFkbWluIjp0cnVlfQ", "Qm9ndXNTaWduYXR1cmVGb3JUZXN0czEyMw"],
    "private_key": ["PlantedKeyMaterialLine0001", "Zm9vYmFyYmF6cXV4UGxhbnRlZEtleU1hdGVyaWFs"],
    "card_number": ["4539 1488 0343 6467", "4539148803436467"],
    "email": ["alice.secret.mail"],
    "phone": ["7946 0958", "79460958"],
    "national_id": ["078-05-1120"],
}


def pg_dump_text() -> str:
    settings = connection.settings_dict
    binary = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
    env = {"PGPASSWORD": settings["PASSWORD"] or ""}
    args = [
        str(binary),
        "--no-owner",
        "-h",
        settings["HOST"] or "localhost",
        "-U",
        settings["USER"] or "postgres",
        "-d",
        settings["NAME"],
    ]
    if settings["PORT"]:
        args += ["-p", str(settings["PORT"])]
    return subprocess.run(args, check=True, capture_output=True, env=env, text=True).stdout


@pytest.mark.django_db(transaction=True)
def test_no_planted_secret_survives_any_write_route(api):
    seed = api.post("users/alice/facts", {"content": "Alice keeps her notes in Obsidian", "source": "user_stated"})
    fact_id = seed.json()["fact"]["id"]
    refusals = 0
    for kind, secret in SECRETS.items():
        text = f"Remember this for Alice ({kind}): {secret} thanks"
        routes = [
            ("fact", lambda t: api.post("users/alice/facts", {"content": t, "source": "user_stated"})),
            ("notebook", lambda t: api.put("users/alice/notebook", {"content": f"# Alice\n{t}\n", "version": 0})),
            ("skill", lambda t: api.put("skills/ops/secrets.md", {"content": t})),
            ("correction", lambda t: api.post(f"facts/{fact_id}/correct", {"content": t})),
        ]
        for route, send in routes:
            r = send(text)
            assert r.status_code == 422, (kind, route, r.content)
            body = r.json()
            assert body["code"] == "blocked", (kind, route)
            for needle in NEEDLES[kind]:
                assert needle not in r.content.decode(), (kind, route)
            block = PiiBlock.objects.get(pk=body["block_id"])
            assert kind in block.kinds and block.route == route
            events = AuditEvent.objects.filter(target_type="piiblock", target_id=str(block.pk), outcome="blocked")
            assert events.exists()
            refusals += 1
    assert PiiBlock.objects.count() == refusals == len(SECRETS) * 4
    assert Fact.objects.count() == 1  # only the seed fact; the correction never happened

    dump = pg_dump_text()
    assert "Alice keeps her notes in Obsidian" in dump  # the dump does hold the data
    for kind, needles in NEEDLES.items():
        for needle in needles:
            assert needle not in dump, f"{kind} leaked into the database"


@pytest.mark.django_db(transaction=True)
def test_redact_policy_stores_the_fact_without_the_value(api, admin_api):
    admin_api.patch("settings", {"pii_policy": {"email": "redact"}})
    r = api.post("users/alice/facts", {"content": f"Alice's email is {SECRETS['email']}", "source": "user_stated"})
    assert r.status_code == 201
    assert r.json()["fact"]["content"] == "Alice's email is [REDACTED:email]"
    assert PiiBlock.objects.get().action == "redacted"
    assert "alice.secret.mail" not in pg_dump_text()
