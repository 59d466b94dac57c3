"""A request id follows a message from the POST through its extraction batch to the facts it produced:
the response names it, the batch stores it, and the log lines of the batch carry it with the fact ids
(in-process here; tests/ops/test_observability.py follows it through a real worker)."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
from django.utils import timezone

from memory_admin.models import ExtractionBatch, Fact, Message, Thread
from memory_admin.requestlog import JsonFormatter, RequestIdFilter
from tests.extraction.conftest import drain

pytestmark = pytest.mark.django_db

SECRET = "sk-" + "proj-Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s"


@pytest.fixture
def json_log():
    """The production handler setup: JSON formatter and request-id filter, at INFO."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)
    root.setLevel(level)


def post(api, body, **headers):
    return api.client.post(
        "/api/v1/users/nora/messages",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api.key}",
        **headers,
    )


def test_the_request_id_of_a_message_reaches_the_log_lines_naming_its_facts(
    api, tenant, offline, dispatched, json_log, settings
):
    said = [
        "Hi! My name is Nora Quill and I work at Lumen Labs as a data engineer.",
        "I prefer neovim over VS Code, and I am planning to learn Rust this winter.",
    ]
    r = post(
        api,
        {"thread_id": "t1", "messages": [{"role": "user", "content": s} for s in said]},
        HTTP_X_REQUEST_ID="req-7f3a9c21-obs",
    )
    assert r.status_code == 202 and r["X-Request-ID"] == "req-7f3a9c21-obs"
    other = post(api, {"thread_id": "t1", "messages": [{"role": "user", "content": "I live in Lisbon near the sea."}]})
    generated = other["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    assert set(Message.objects.values_list("request_id", flat=True)) == {"req-7f3a9c21-obs", generated}

    Thread.objects.update(extract_due_at=timezone.now())  # the debounce window has passed
    results = drain()
    assert [r.status for r in results] == ["done"]
    batch = ExtractionBatch.objects.get()
    assert sorted(batch.request_ids) == sorted(["req-7f3a9c21-obs", generated])
    fact_ids = {str(pk) for pk in Fact.objects.filter(batch=batch).values_list("pk", flat=True)}
    assert fact_ids

    lines = json_log()
    done = [line for line in lines if line["message"].startswith(f"batch {batch.pk} done")]
    assert len(done) == 1
    assert set(done[0]["request_id"].split(",")) == {"req-7f3a9c21-obs", generated}
    assert set(done[0]["fact_ids"]) == fact_ids
    writes = [line for line in lines if line["logger"] == "memory_admin.write" and line.get("route") == "extraction"]
    assert {line["fact_id"] for line in writes if line["fact_id"]} >= fact_ids
    assert {line["request_id"] for line in writes} == {done[0]["request_id"]}
    posts = [line for line in lines if line["logger"] == "memory_admin.request"]
    assert [p["request_id"] for p in posts] == ["req-7f3a9c21-obs", generated]
    assert posts[0]["message"] == "POST api/v1/users/<user_id>/messages 202"
    text = "\n".join(json.dumps(line) for line in lines)
    for words in said + ["Lisbon", "Nora", "nora", "neovim"]:
        assert words not in text


@pytest.mark.parametrize(
    "incoming",
    [
        "short",
        "has space in it",
        "x" * 65,
        "new\nline-0123456789",
        SECRET,
        "alice@example.org-12345678",
    ],
)
def test_an_unsafe_incoming_request_id_is_replaced(api, incoming):
    r = api.client.get("/api/v1/users", HTTP_AUTHORIZATION=f"Bearer {api.key}", HTTP_X_REQUEST_ID=incoming)
    assert r.status_code == 200
    assert re.fullmatch(r"[0-9a-f]{32}", r["X-Request-ID"]) and r["X-Request-ID"] != incoming


def test_every_answer_names_its_request_id_even_a_refusal(client):
    r = client.get("/api/v1/users")
    assert r.status_code == 401 and re.fullmatch(r"[0-9a-f]{32}", r["X-Request-ID"])
    r = client.get("/no/such/page", HTTP_X_REQUEST_ID="lb-2026-11-22T18:00:00.123")
    assert r["X-Request-ID"] == "lb-2026-11-22T18:00:00.123"


def test_ids_whose_digits_look_like_a_card_or_a_phone_are_logged_whole(api, json_log, monkeypatch):
    # About one uuid4 hex in 500 holds a digit run that passes the card check (5651350599044 here), and one
    # UUID in 200 digits the scan reads as a phone number (…-8237-4543-9249-…). Such ids must still be
    # logged whole, or a request could not be followed through the logs; a secret next to them is not.
    import logging
    import uuid

    from memory_admin import requestlog

    monkeypatch.setattr(requestlog.uuid, "uuid4", lambda: uuid.UUID("5651350599044eaab54212ec9b4e2304"))
    r = api.client.get("/api/v1/users", HTTP_AUTHORIZATION=f"Bearer {api.key}")
    assert r.status_code == 200 and r["X-Request-ID"] == "5651350599044eaab54212ec9b4e2304"
    fact_id = "2705dd00-8237-4543-9249-aabcfd99a80e"
    logging.getLogger("memory_admin.write").info(
        f"fact {fact_id} written; card 4111 1111 1111 1111", extra={"fact_id": fact_id}
    )
    lines = json_log()
    requests = [line for line in lines if line["logger"] == "memory_admin.request"]
    assert requests and all(line["request_id"] == "5651350599044eaab54212ec9b4e2304" for line in requests)
    (write,) = [line for line in lines if line["logger"] == "memory_admin.write"]
    assert write["fact_id"] == fact_id
    assert write["message"] == f"fact {fact_id} written; card [REDACTED:card_number]"


def test_a_load_balancers_uuid_request_id_is_kept_even_when_its_digits_look_like_a_phone(api):
    incoming = "2705dd00-8237-4543-9249-aabcfd99a80e"
    r = api.client.get("/api/v1/users", HTTP_AUTHORIZATION=f"Bearer {api.key}", HTTP_X_REQUEST_ID=incoming)
    assert r.status_code == 200 and r["X-Request-ID"] == incoming
