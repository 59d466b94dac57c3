def test_health_answers_without_a_key(client, db):
    r = client.get("/api/v1/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "database": "ok"}


def test_a_fact_written_is_read_back(api):
    r = api.post("users/alice/facts", {"content": "Alice prefers vim", "key": "preference.editor",
                                       "source": "user_stated"})
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["outcome"] == "created"
    got = api.get(f"facts/{body['fact']['id']}")
    assert got.json()["content"] == "Alice prefers vim"
