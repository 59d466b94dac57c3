from django.urls import reverse


def test_health_answers_without_a_key(client, db):
    from memory_admin.services.heartbeats import SWEEP, WORKER, heartbeat_record

    heartbeat_record(SWEEP)
    heartbeat_record(WORKER)
    r = client.get("/api/v1/health")
    assert r.status_code == 200
    assert {key: r.json()[key] for key in ("status", "database")} == {"status": "ok", "database": "ok"}


def test_a_fact_written_is_read_back(api):
    r = api.post(
        "users/alice/facts", {"content": "Alice prefers vim", "key": "preference.editor", "source": "user_stated"}
    )
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["outcome"] == "created"
    got = api.get(f"facts/{body['fact']['id']}")
    assert got.json()["content"] == "Alice prefers vim"


def test_pages_forbid_inline_script_even_if_escaping_failed(client, db):
    r = client.get(reverse("login"))
    assert r.status_code == 200
    csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
