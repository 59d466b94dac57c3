"""Logs carry no memory content and no identifier an agent sent: 4xx and 500 paths are masked, an
exception keeps its frames but not its message (which may quote a value)."""

from __future__ import annotations

import io
import logging

import pytest
from django.test import Client, RequestFactory
from django.utils.log import log_response

SECRET = "sk-" + "proj-Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s"
MARKER = "QuietMarker" + "7731"  # not a secret to the scanner: shows that identifiers are masked anyway


@pytest.fixture
def server_log():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    yield stream
    root.removeHandler(handler)


@pytest.mark.django_db
def test_refusals_and_unknown_routes_log_masked_paths(api, server_log):
    assert api.post(f"users/{SECRET}/facts", {"content": "Alice likes tea"}).status_code == 422
    assert api.get(f"users/{MARKER}/facts").status_code == 404
    assert api.get(f"users/{MARKER}/no-such-route/{SECRET}", q=MARKER).status_code == 404
    log = server_log.getvalue()
    assert "/api/v1/users/*/facts" in log
    assert SECRET not in log and "Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s" not in log and MARKER not in log


@pytest.mark.django_db
def test_a_server_error_logs_the_route_and_the_frames_but_no_value(api, server_log):
    # A 201-character user id overflows its column: a server error today, a 4xx once validated.
    client = Client(raise_request_exception=False)
    response = client.post(
        f"/api/v1/users/{MARKER}{'x' * 190}/facts",
        '{"content": "Alice likes tea"}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api.key}",
    )
    assert response.status_code >= 400
    # The error path Django takes for any 500, with an exception that quotes a value.
    request = RequestFactory().get(f"/api/v1/users/{SECRET}/facts")
    try:
        raise ValueError(f"Failing row contains ({MARKER}, {SECRET})")
    except ValueError as exc:
        failure = exc
        log_response(
            "Internal Server Error: %s",
            request.path,
            response=type("R", (), {"status_code": 500})(),
            request=request,
            exception=failure,
        )
    log = server_log.getvalue()
    assert "Internal Server Error: /api/v1/users/*/facts" in log
    assert "Traceback" in log and "builtins.ValueError: (message withheld)" in log
    assert SECRET not in log and "Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s" not in log and MARKER not in log


def test_a_value_in_a_plain_message_is_redacted():
    stream = io.StringIO()
    logger = logging.getLogger("memory_admin.test")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    try:
        logger.warning("could not reach alice.secret.mail@example.org with %s", SECRET)
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue().strip() == "could not reach [REDACTED:email] with [REDACTED:openai_key]"
