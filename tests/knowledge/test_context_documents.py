"""The context block's documents section (issue 34): the chunks a task is about, each cited (source, file
or URL, section), within KNOWLEDGE_CONTEXT_SHARE of the budget, after the notebook, which wins: a chunk
that states an attribute of the notebook with another value is marked. Real uploads, real Postgres."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from memory_admin.models import KnowledgeSource, MemoryUser, Notebook
from memory_admin.retrieval.context.documents import claims, disagreement
from memory_admin.tokens import count_tokens
from tests.knowledge.conftest import crawl_all

pytestmark = pytest.mark.django_db

RUNBOOK = b"""# Payments runbook

## Rollback

To roll back a payments release, run `payctl rollback --to previous` and watch the error rate for
ten minutes before you close the incident.

## Environments

Deploy region: us-east-1
Release window: Tuesdays after 14:00 UTC
"""


def upload(api, name: str, body: bytes, **fields) -> KnowledgeSource:
    data = {"file": SimpleUploadedFile(name, body, content_type="text/markdown"), **fields}
    r = api.client.post("/api/v1/knowledge/sources/upload", data, HTTP_AUTHORIZATION=f"Bearer {api.key}")
    assert r.status_code == 201, r.content
    return crawl_all(KnowledgeSource.objects.get(pk=r.json()["id"]))


def context(api, user: str, task: str, budget: int = 2000) -> dict:
    r = api.get(f"users/{user}/context", task=task, budget_tokens=budget)
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["tokens"] == count_tokens(body["text"]) <= budget
    return body


def section(body: dict, name: str) -> dict | None:
    return next((s for s in body["sections"] if s["name"] == name), None)


def make_user(api, tenant, name: str, notebook: str = "") -> None:
    r = api.post(f"users/{name}/facts", {"content": f"{name} works on the payments team", "source": "user_stated"})
    assert r.status_code in (200, 201)
    if notebook:
        user = MemoryUser.objects.get(tenant=tenant, external_id=name)
        Notebook.objects.create(tenant=tenant, memory_user=user, content=notebook, version=1)


def test_the_block_cites_the_chunk_the_task_is_about(api, tenant):
    upload(api, "runbook.md", RUNBOOK)
    make_user(api, tenant, "dana")
    body = context(api, "dana", "roll back the payments release")
    docs = section(body, "documents")
    assert docs and docs["included"]
    text = body["text"]
    cite = "- [doc 1: runbook.md; runbook.md; section Payments runbook > Rollback; fetched "
    assert cite in text
    assert "> To roll back a payments release, run `payctl rollback --to previous`" in text
    # Inside the fence, after the facts; every line of the chunk quoted.
    assert text.index("## Facts") < text.index("## Documents") < text.rindex("<<<END_MEMORY_DATA")
    block = text[text.index("## Documents") :].split("\n")[1:]
    assert all(line.startswith(("- [doc ", "> ", ">")) for line in block[: block.index("") if "" in block else -1])
    # A task about something else: no document forced into the block.
    assert section(context(api, "dana", "favourite ice cream flavour"), "documents") is None


def test_documents_stay_within_their_share_and_share_zero_leaves_them_out(api, tenant, settings):
    upload(api, "runbook.md", RUNBOOK)
    make_user(api, tenant, "dana")
    for budget in (120, 300, 2000):
        docs = section(context(api, "dana", "roll back the payments release", budget), "documents")
        assert docs is not None and docs["tokens"] <= int(budget * 0.25)
    small = section(context(api, "dana", "roll back the payments release", 120), "documents")
    assert small["truncated"] == small["included"][-1:]  # the share is filled by cutting the chunk, marked
    settings.KNOWLEDGE_CONTEXT_SHARE = 0
    assert section(context(api, "dana", "roll back the payments release"), "documents") is None


def test_a_chunk_that_disagrees_with_the_notebook_is_marked_and_the_notebook_comes_first(api, tenant):
    upload(api, "runbook.md", RUNBOOK)
    make_user(
        api, tenant, "dana", notebook="- **Deploy region:** eu-west-1\n- Release window: Tuesdays after 14:00 UTC\n"
    )
    make_user(api, tenant, "eli", notebook="Release window: Tuesdays after 14:00 UTC\n")
    task = "which deploy region and release window do payments use?"
    body = context(api, "dana", task)
    docs = section(body, "documents")
    envs = [line for line in body["text"].split("\n") if line.startswith("- [doc") and "Environments" in line]
    assert envs and 'disagrees with the notebook on "Deploy region"; the notebook wins' in envs[0]
    assert len(docs["contradicts_notebook"]) == 1 and docs["contradicts_notebook"][0] in docs["included"]
    assert body["text"].index("## Notebook") < body["text"].index("## Documents")
    # Same values as the notebook: nothing to mark.
    agrees = context(api, "eli", task)
    assert section(agrees, "documents")["contradicts_notebook"] == []
    assert "disagrees with the notebook" not in agrees["text"]


def test_the_disagreement_rule():
    notebook = claims("# Me\n- **Editor:** vim\nDeploy target = staging\nSee https://example.com/docs\n")
    assert set(notebook) == {("editor",), ("deploy", "target")}
    assert disagreement(notebook, "Editor: Emacs, always") == "Editor"
    assert disagreement(notebook, "* __Deploy target__: production") == "Deploy target"
    assert disagreement(notebook, "editor: VIM") is None  # the same value, case aside
    assert disagreement(notebook, "We use vim as our editor, not emacs.") is None  # prose: not this rule
    assert disagreement(notebook, "Shell: zsh") is None  # an attribute the notebook does not state
