"""Screening over HTTP (issue 27): the worst shapes at the largest allowed sizes answer promptly with JSON;
a write whose screening runs past the budget is refused with a stable code and leaves what was stored as it
was; credentials in the spellings people paste are refused, never stored."""

from __future__ import annotations

import time

import pytest
from django.conf import settings

from memory_admin.models import Fact, MemoryUser, Notebook, NotebookRevision, PiiBlock
from memory_admin.textnorm import DEFAULT_SCREENING_BUDGET_SECONDS
from tests.security.corpus import format_cases
from tests.security.shapes import shape

pytestmark = pytest.mark.django_db

# The shapes that cost the screens the most per character at a notebook's size (bench/screening.py),
# and the ones that were quadratic before this round.
NOTEBOOK_SHAPES = ["stretch/ignore+'-'", "run/dash", "run/digits", "prefix/sk", "guard/turns"]
FACT_SHAPES = ["stretch/ignore+'-'", "run/digits", "run/at", "prefix/sk", "guard/image_link", "run/leet_mix"]
# The request's CPU in this process (the test client runs the view in-process; Postgres's own work is not
# counted), and its wall clock against gunicorn's 60 s timeout with room for a busy shared machine. Before
# this round a 64 KB notebook ran past that timeout and its client got no answer at all.
PROMPT_CPU_SECONDS = 10
WALL_SECONDS = 50


def _timed(call):
    started, cpu = time.perf_counter(), time.process_time()
    response = call()
    return response, time.process_time() - cpu, time.perf_counter() - started


@pytest.mark.parametrize("name", NOTEBOOK_SHAPES)
def test_a_largest_notebook_of_the_worst_shapes_answers_promptly_with_json(api, name):
    content = shape(name).text(settings.MAX_NOTEBOOK_BYTES - 16)
    response, cpu, wall = _timed(lambda: api.put("users/alice/notebook", {"content": content, "version": 0}))
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert cpu < PROMPT_CPU_SECONDS and wall < WALL_SECONDS, f"{name}: {cpu:.1f} s of CPU, {wall:.1f} s"
    if response.status_code == 200:
        assert body["version"] == 1
    else:  # refused by a screen, with its code
        assert response.status_code in (413, 422), body
        assert body["code"] in ("instruction_like", "blocked", "screening_budget_exceeded"), body


@pytest.mark.parametrize("name", FACT_SHAPES)
def test_a_largest_fact_of_the_worst_shapes_answers_promptly_with_json(api, name):
    content = shape(name).text(settings.MAX_FACT_BYTES - 16)
    response, cpu, wall = _timed(lambda: api.post("users/alice/facts", {"content": content, "source": "user_stated"}))
    assert response["Content-Type"].startswith("application/json")
    assert cpu < 2 and wall < WALL_SECONDS, f"{name}: {cpu:.2f} s of CPU, {wall:.1f} s"
    assert response.status_code in (200, 201, 413, 422), response.json()


@pytest.fixture(scope="module", autouse=True)
def _embedder_loaded():
    """The embedding model loads on the first write of a process: not part of any request's answer time."""
    from memory_admin.embedding import embed

    embed(["warm up"])


@pytest.fixture
def alice_notebook(api):
    response = api.put("users/alice/notebook", {"content": "# Alice\n- Alice lives in Lyon", "version": 0})
    assert response.status_code == 200
    return response.json()


def test_a_notebook_refused_by_the_screening_budget_leaves_the_previous_revision_intact(api, alice_notebook, settings):
    settings.SCREENING_BUDGET_SECONDS = 0
    response = api.put("users/alice/notebook", {"content": "# Alice\n- Alice moved to Paris", "version": 1})
    assert response.status_code == 413
    body = response.json()
    assert body["code"] == "screening_budget_exceeded"
    assert "nothing was stored" in body["detail"]
    settings.SCREENING_BUDGET_SECONDS = DEFAULT_SCREENING_BUDGET_SECONDS
    current = api.get("users/alice/notebook").json()
    assert (current["version"], current["content"]) == (1, "# Alice\n- Alice lives in Lyon")
    notebook = Notebook.objects.get(memory_user__external_id="alice")
    assert list(NotebookRevision.objects.filter(notebook=notebook).values_list("version", "content")) == [
        (1, "# Alice\n- Alice lives in Lyon")
    ]


def test_a_fact_refused_by_the_screening_budget_is_not_stored_and_the_user_keeps_their_facts(api, settings):
    kept = api.post("users/alice/facts", {"content": "Alice keeps her notes in Obsidian", "source": "user_stated"})
    assert kept.status_code in (200, 201)
    settings.SCREENING_BUDGET_SECONDS = 0
    response = api.post("users/alice/facts", {"content": "Alice moved to Paris in May", "source": "user_stated"})
    assert response.status_code == 413
    assert response.json()["code"] == "screening_budget_exceeded"
    settings.SCREENING_BUDGET_SECONDS = DEFAULT_SCREENING_BUDGET_SECONDS
    contents = [f["content"] for f in api.get("users/alice/facts").json()["items"]]
    assert contents == ["Alice keeps her notes in Obsidian"]


PLAIN_FORMATS = [c for c in format_cases() if c.name.endswith("/plain")]


@pytest.mark.parametrize("case", PLAIN_FORMATS, ids=[c.name.rsplit("/", 1)[0] for c in PLAIN_FORMATS])
def test_a_credential_in_any_common_spelling_is_refused_and_never_stored(api, case):
    response = api.post("users/alice/facts", {"content": case.text, "source": "user_stated"})
    assert response.status_code == 422, response.json()
    body = response.json()
    assert body["code"] == "blocked"
    assert case.needle not in response.content.decode()
    assert not Fact.objects.filter(memory_user__external_id="alice").exists()
    assert PiiBlock.objects.filter(action="blocked").count() == 1


def test_the_aws_credentials_file_spelling_without_spaces_is_refused_like_the_one_with_spaces(api):
    value = "Zx9qL2mN8pR4tV6wY1bC3dF5gH7jK0sE2uI4oA6r"
    for text in (f"aws_secret_access_key={value}", f"aws_secret_access_key = {value}"):
        response = api.post("users/alice/facts", {"content": text, "source": "user_stated"})
        assert (response.status_code, response.json()["code"]) == (422, "blocked"), text
    assert not MemoryUser.objects.filter(external_id="alice", facts__isnull=False).exists()
