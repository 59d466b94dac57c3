"""Import of the export format (`POST /users/{id}/import`, `manage.py import_memory`), through the real
HTTP API on the real Postgres: export → erase → import → export round-trips; a second import writes
nothing; a user moves between tenants; secrets in an export are still blocked; bad exports are refused
whole."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from memory_admin.models import (
    AuditEvent,
    Episode,
    Fact,
    ImportedItem,
    MemoryUser,
    Message,
    Notebook,
    NotebookRevision,
    PiiBlock,
    Skill,
    SkillRevision,
    Thread,
)
from memory_admin.selectors.access import Principal
from memory_admin.services.contradictions import contradiction_resolve

IMPORT = "users/{u}/import"
SECRET = "sk-proj-4f9Qx2Lm8Zr7Tb1Vn6Kc3Hd5Jw0Ys9Ua"


def ok(response, status: int = 200) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:600])
    return response.json()


@pytest.fixture
def dana_history(tenant, admin_api) -> dict:
    """dana with every kind of history an export carries, written through the API."""
    api = admin_api
    v1 = ok(
        api.post(
            "users/dana/facts",
            {"content": "Dana uses vim", "key": "preference.editor", "source": "user_stated", "category": "preference"},
        ),
        201,
    )
    ok(
        api.post(
            "users/dana/facts",
            {
                "content": "Dana uses helix",
                "key": "preference.editor",
                "source": "user_stated",
                "category": "preference",
            },
        ),
        201,
    )
    lives = ok(
        api.post(
            "users/dana/facts",
            {"content": "Dana works at Acme Robotics", "source": "user_stated", "metadata": {"ticket": "T-7", "n": 3}},
        ),
        201,
    )
    ok(api.post(f"facts/{lives['fact']['id']}/correct", {"content": "Dana works at Initech", "reason": "moved"}), 201)
    gone = ok(api.post("users/dana/facts", {"content": "Dana owns a red bicycle", "source": "user_stated"}), 201)
    ok(api.delete(f"facts/{gone['fact']['id']}", {"reason": "sold it"}))
    ok(
        api.post(
            "users/dana/facts",
            {
                "content": "Dana pins the release checklist",
                "source": "user_stated",
                "pinned": True,
                "importance": 0.9,
                "observed_at": "2024-03-01T09:00:00Z",
            },
        ),
        201,
    )
    ok(
        api.post(
            "users/dana/facts",
            {
                "content": "The deploy of project Falcon needs two approvals",
                "source": "tool_verified",
                "task_id": "falcon-release",
            },
        ),
        201,
    )
    ok(api.post("users/dana/facts", {"content": "A web page says Dana likes jazz", "source": "external"}), 201)
    ok(api.put("users/dana/notebook", {"content": "# Dana\n- Dana lives in Lyon", "version": 0}))
    ok(
        api.put(
            "users/dana/notebook",
            {"content": "# Dana\n- Dana lives in Lyon\n- Dana drinks tea", "version": 1, "note": "added tea"},
        )
    )
    overruled = ok(
        api.post("users/dana/facts", {"content": "Dana lives in Paris", "source": "agent_inferred", "confidence": 0.8}),
        201,
    )
    assert overruled["outcome"] == "overruled", overruled
    ok(api.put("skills/dana/setup.md", {"content": "Install helix first", "user_id": "dana"}))
    ok(
        api.put(
            "skills/dana/setup.md", {"content": "Install helix, then the LSP servers", "user_id": "dana", "version": 1}
        )
    )
    ok(
        api.post(
            "users/dana/messages",
            {
                "thread_id": "onboarding",
                "messages": [
                    {"role": "user", "content": "Hi, I am Dana and I just moved to Lyon."},
                    {"role": "assistant", "content": "Welcome, Dana!"},
                ],
            },
        ),
        202,
    )
    tea = ok(
        api.post("users/dana/facts", {"content": "Dana likes espresso", "source": "agent_inferred", "confidence": 0.8}),
        201,
    )
    no_tea = ok(
        api.post(
            "users/dana/facts",
            {"content": "Dana does not like espresso", "source": "agent_inferred", "confidence": 0.85},
        ),
        201,
    )
    assert no_tea["outcome"] == "queued_for_review", no_tea
    # A reviewer keeps the second: the first is superseded by a fact that does not name it as corrected.
    contradiction_resolve(
        principal=Principal.system(tenant.pk, actor="staff:reviewer"),
        contradiction_id=no_tea["contradiction_id"],
        action="keep_b",
    )
    assert Fact.objects.get(pk=tea["fact"]["id"]).status == "superseded"
    old = ok(api.post("users/dana/facts", {"content": "Dana once used a Nokia 3310", "source": "user_stated"}), 201)
    Fact.objects.filter(pk=old["fact"]["id"]).update(status="stale", status_reason="low confidence for 60 days")
    ok(api.post("users/dana/facts", {"content": "Dana's cat is called Pixel", "source": "user_stated"}), 201)
    ok(
        api.post(
            "users/dana/facts",
            {"content": "Dana's cat is not called Pixel", "source": "user_stated", "confidence": 0.95},
        ),
        201,
    )  # an open review item: both stay active
    dana = MemoryUser.objects.get(tenant=tenant, external_id="dana")
    now = timezone.now()
    episode = Episode.objects.create(
        tenant=tenant,
        memory_user=dana,
        thread=Thread.objects.get(memory_user=dana),
        started_at=now - timedelta(hours=1),
        ended_at=now,
        summary="Dana introduced herself and her move to Lyon",
        outcome="success",
    )
    episode.facts.set(Fact.objects.filter(memory_user=dana, content__startswith="Dana works at Initech"))
    return {"first_editor": v1["fact"]["id"]}


def normalised(export: dict) -> dict:
    """The export without what must differ between installs or runs: ids (replaced by positions),
    created/exported times, and the authors of revisions (the importer wrote them here)."""
    position = {f["id"]: i for i, f in enumerate(export["facts"])}

    def fact(f: dict) -> dict:
        out = {k: v for k, v in f.items() if k not in ("id", "created_at")}
        for ref in ("supersedes", "superseded_by"):
            out[ref] = position.get(f[ref], "outside") if f[ref] else None
        return out

    def revision(r: dict) -> dict:
        return {k: v for k, v in r.items() if k not in ("created_at", "author")}

    return {
        "facts": [fact(f) for f in export["facts"]],
        "notebook": {**export["notebook"], "revisions": [revision(r) for r in export["notebook"]["revisions"]]},
        "skills": [{**s, "revisions": [revision(r) for r in s["revisions"]]} for s in export["skills"]],
        "episodes": [
            {**{k: v for k, v in e.items() if k != "id"}, "fact_ids": sorted(position[i] for i in e["fact_ids"])}
            for e in export["episodes"]
        ],
        "messages": export["messages"],
    }


def differences(a, b, path: str = "") -> list[tuple[str, object, object]]:
    """Where two decoded JSON values differ, as (path, left, right): a readable failure message."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path, a, b)]


def test_export_erase_import_export_round_trips(tenant, admin_api, dana_history):
    first = ok(admin_api.get("users/dana/export"))
    assert {f["status"] for f in first["facts"]} == {"active", "superseded", "evicted", "quarantined", "stale"}
    ok(admin_api.delete("users/dana"))
    assert not MemoryUser.objects.filter(tenant=tenant, external_id="dana").exists()

    report = ok(admin_api.post(IMPORT.format(u="dana"), first))
    assert report["refused"] == [] and report["diverged"] == [], report
    assert report["imported"] == {
        "facts": 14,
        "notebook_revisions": 2,
        "skill_revisions": 2,
        "messages": 2,
        "episodes": 1,
    }, report
    second = ok(admin_api.get("users/dana/export"))

    assert differences(normalised(first), normalised(second)) == []
    # What does differ: every id and created_at (this install's own), and who wrote the revisions.
    assert {f["id"] for f in first["facts"]}.isdisjoint(f["id"] for f in second["facts"])
    assert {r["author"] for r in second["notebook"]["revisions"]} == {"agent:admin-agent"}
    # The imported conversation is history, not new input: nothing of it waits for extraction.
    dana = MemoryUser.objects.get(tenant=tenant, external_id="dana")
    assert not Message.objects.filter(memory_user=dana, status="pending").exists()
    assert Thread.objects.get(memory_user=dana).extract_due_at is None


def test_history_survives_the_round_trip(tenant, admin_api, dana_history):
    """What a reviewer reads after the move: the correction chain, the key's versions, the overruled fact."""
    export = ok(admin_api.get("users/dana/export"))
    ok(admin_api.delete("users/dana"))
    ok(admin_api.post(IMPORT.format(u="dana"), export))
    dana = MemoryUser.objects.get(tenant=tenant, external_id="dana")
    initech = Fact.objects.get(memory_user=dana, content="Dana works at Initech")
    history = ok(admin_api.get(f"facts/{initech.pk}/history"))
    assert [f["content"] for f in history["chain"]][-2:] == ["Dana works at Acme Robotics", "Dana works at Initech"]
    assert [(f["version"], f["status"]) for f in history["chain"]][-2:] == [(1, "superseded"), (2, "active")]
    editor = ok(admin_api.get("users/dana/facts", key="preference.editor", status="any"))["items"]
    assert sorted((f["version"], f["content"], f["status"]) for f in editor) == [
        (1, "Dana uses vim", "superseded"),
        (2, "Dana uses helix", "active"),
    ]
    paris = Fact.objects.get(memory_user=dana, content="Dana lives in Paris")
    assert (paris.status, paris.superseded_by_notebook.version) == ("superseded", 2)
    pinned = Fact.objects.get(memory_user=dana, content="Dana pins the release checklist")
    assert pinned.pinned and pinned.valid_from.isoformat().startswith("2024-03-01T09:00")
    task = Fact.objects.get(memory_user=dana, content__contains="Falcon")
    assert (task.scope, task.task_ref) == ("task", "falcon-release")
    context = ok(admin_api.get("users/dana/context", task="what editor does dana use"))
    assert "helix" in context["text"] and "Dana uses vim" not in context["text"]
    assert "jazz" not in context["text"], "a quarantined fact must stay out of the context after an import"


def _row_counts() -> dict[str, int]:
    return {
        m.__name__: m.objects.count()
        for m in (
            Fact,
            Notebook,
            NotebookRevision,
            Skill,
            SkillRevision,
            Message,
            Episode,
            MemoryUser,
            ImportedItem,
            PiiBlock,
        )
    }


def test_importing_twice_writes_nothing_the_second_time(tenant, admin_api, dana_history):
    export = ok(admin_api.get("users/dana/export"))
    first = ok(admin_api.post(IMPORT.format(u="dana-copy"), export))
    assert first["imported"]["facts"] == 14
    counts = _row_counts()
    again = ok(admin_api.post(IMPORT.format(u="dana-copy"), export))
    assert again["imported"] == {}
    assert again["already_imported"] == first["imported"]
    assert _row_counts() == counts
    # An export that grew since: only the new fact is written.
    export["facts"].append(
        {
            **export["facts"][-1],
            "id": "6f1d4b52-8f0e-4a3c-9d55-0d7f2b1e9a11",
            "content": "Dana learns Rust this winter",
            "key": None,
            "status": "active",
            "supersedes": None,
            "superseded_by": None,
            "superseded_by_notebook_version": None,
        }
    )
    grown = ok(admin_api.post(IMPORT.format(u="dana-copy"), export))
    assert grown["imported"] == {"facts": 1}
    copy = MemoryUser.objects.get(tenant=tenant, external_id="dana-copy")
    assert Fact.objects.filter(memory_user=copy, content="Dana learns Rust this winter").count() == 1
    # Erasing the user forgets what was imported into it: the same export imported again is new data.
    ok(admin_api.delete("users/dana-copy"))
    assert not ImportedItem.objects.filter(memory_user=copy).exists()
    assert ok(admin_api.post(IMPORT.format(u="dana-copy"), export))["imported"]["facts"] == 15


def test_a_user_moves_to_another_tenant_with_new_ids(tenant, other_tenant, admin_api, make_api, dana_history):
    export = ok(admin_api.get("users/dana/export"))
    b_api = make_api(other_tenant, agent="b-importer")  # an ordinary agent key: import is a write
    report = ok(b_api.post(IMPORT.format(u="dana"), export))
    assert report["refused"] == [] and report["diverged"] == []
    b_dana = MemoryUser.objects.get(tenant=other_tenant, external_id="dana")
    moved = Fact.objects.filter(memory_user=b_dana)
    assert moved.count() == len(export["facts"])
    assert all(f.tenant_id == other_tenant.pk for f in moved)
    assert {str(f.pk) for f in moved}.isdisjoint(f["id"] for f in export["facts"])
    b_admin = make_api(other_tenant, admin=True, agent="b-admin")
    assert normalised(ok(b_admin.get("users/dana/export"))) == normalised(export)
    # The source is untouched.
    assert normalised(ok(admin_api.get("users/dana/export"))) == normalised(export)


def test_a_secret_in_an_export_is_still_blocked_and_the_rest_imported(tenant, api):
    export = {
        "format": "memory-admin/export-v1",
        "facts": [
            {
                "id": "0b7c9a52-1c3e-4f57-a2a4-4b1f3e0a9d01",
                "content": f"Erin's OpenAI key is {SECRET}",
                "confidence": 1.0,
                "source": "user_stated",
                "valid_from": "2025-01-02T03:04:05Z",
                "created_at": "2025-01-02T03:04:05Z",
            },
            {
                "id": "0b7c9a52-1c3e-4f57-a2a4-4b1f3e0a9d02",
                "content": "Erin prefers dark mode",
                "confidence": 1.0,
                "source": "user_stated",
                "valid_from": "2025-01-02T03:04:06Z",
                "created_at": "2025-01-02T03:04:06Z",
            },
        ],
        "notebook": {
            "version": 1,
            "content": f"# Erin\n- token {SECRET}",
            "revisions": [{"version": 1, "content": f"# Erin\n- token {SECRET}", "created_at": "2025-01-01T00:00:00Z"}],
        },
    }
    response = api.post(IMPORT.format(u="erin"), export)
    report = ok(response)
    assert SECRET not in response.content.decode()
    assert [(r["kind"], r["code"]) for r in report["refused"]] == [
        ("notebook_revisions", "blocked"),
        ("facts", "blocked"),
    ]
    assert all(PiiBlock.objects.filter(pk=r["block_id"], tenant=tenant).exists() for r in report["refused"])
    erin = MemoryUser.objects.get(tenant=tenant, external_id="erin")
    assert list(Fact.objects.filter(memory_user=erin).values_list("content", flat=True)) == ["Erin prefers dark mode"]
    stored = json.dumps(
        [
            list(Fact.objects.values_list("content", "metadata")),
            list(NotebookRevision.objects.values_list("content", flat=True)),
            list(AuditEvent.objects.values_list("before", "after", "reason")),
        ],
        default=str,
    )
    assert SECRET not in stored
    # Refusals are remembered too: a second import does not record the blocks again.
    blocks = PiiBlock.objects.count()
    assert ok(api.post(IMPORT.format(u="erin"), export))["imported"] == {}
    assert PiiBlock.objects.count() == blocks


def _valid_export(n_facts: int = 1) -> dict:
    return {
        "format": "memory-admin/export-v1",
        "facts": [
            {
                "id": f"00000000-0000-4000-8000-{i:012d}",
                "content": f"Fact number {i} about Gus",
                "confidence": 1.0,
                "source": "user_stated",
                "valid_from": "2025-01-02T03:04:05Z",
                "created_at": "2025-01-02T03:04:05Z",
            }
            for i in range(n_facts)
        ],
    }


def test_an_export_over_the_item_limit_is_413_and_nothing_is_written(tenant, api, settings):
    settings.IMPORT_MAX_ITEMS = 3
    before = _row_counts()
    response = api.post(IMPORT.format(u="gus"), _valid_export(4))
    assert response.status_code == 413, response.content
    body = response.json()
    assert (body["code"], body["limit"]) == ("too_many_items", 3)
    assert _row_counts() == before


@pytest.mark.parametrize(
    ("change", "status", "code", "field"),
    [
        pytest.param({"format": "memory-admin/export-v9"}, 422, "invalid", "format", id="unknown format"),
        pytest.param({"facts": [{"id": "x"}]}, 422, "invalid", "facts.0.id", id="fact without its fields"),
        pytest.param({"facts": _valid_export(2)["facts"][:1] * 2}, 422, "invalid", "facts.id", id="duplicate ids"),
        pytest.param(
            {"facts": [{**_valid_export()["facts"][0], "content": "x" * 9000}]},
            413,
            "content_too_large",
            None,
            id="fact over 8 KB",
        ),
        pytest.param(
            {"facts": [{**_valid_export()["facts"][0], "created_at": "2025-01-02T03:04:05"}]},
            422,
            "invalid",
            "facts.0.created_at",
            id="naive time",
        ),
        pytest.param(
            {"skills": [{"path": "../etc/passwd", "content": "x"}]},
            422,
            "invalid",
            "skills.0.path",
            id="bad skill path",
        ),
        pytest.param(
            {"messages": [{"thread_id": "t/1", "role": "user", "content": "hi", "created_at": "2025-01-02T03:04:05Z"}]},
            422,
            "invalid",
            "messages.0.thread_id",
            id="bad thread id",
        ),
    ],
)
def test_a_bad_export_is_refused_whole(tenant, api, change, status, code, field):
    before = _row_counts()
    body = {**_valid_export(), **change}
    response = api.post(IMPORT.format(u="gus"), body)
    assert response.status_code == status, response.content
    out = response.json()
    assert out["code"] == code
    if field:
        assert out["field"] == field
    assert _row_counts() == before
    assert not MemoryUser.objects.filter(external_id="gus").exists()


def test_a_hand_made_export_with_only_the_current_notebook_imports_it_as_one_revision(tenant, api):
    export = {
        "format": "memory-admin/export-v1",
        "exported_at": "2025-02-01T00:00:00Z",
        "notebook": {"version": 7, "content": "# Ivo\n- Ivo lives in Porto"},
    }
    report = ok(api.post(IMPORT.format(u="ivo"), export))
    assert report["imported"] == {"notebook_revisions": 1}
    notebook = ok(api.get("users/ivo/notebook"))
    assert (notebook["version"], notebook["content"]) == (1, "# Ivo\n- Ivo lives in Porto")


def test_a_thread_id_that_is_a_secret_refuses_its_messages_and_keeps_the_rest(tenant, api):
    stamp = "2025-01-02T03:04:05Z"
    export = {
        "format": "memory-admin/export-v1",
        "messages": [
            {"thread_id": "ok-thread", "role": "user", "content": "Jo says hello", "created_at": stamp},
            {"thread_id": SECRET, "role": "user", "content": "Jo pasted a key as a thread id", "created_at": stamp},
        ],
        "facts": _valid_export()["facts"],
    }
    blocks = PiiBlock.objects.count()
    report = ok(api.post(IMPORT.format(u="jo"), export))
    assert [(r["kind"], r["index"], r["code"]) for r in report["refused"]] == [("messages", 1, "blocked")]
    assert report["imported"] == {"messages": 1, "facts": 1}
    assert PiiBlock.objects.count() == blocks + 1, "the refusal is recorded, and kept"
    jo = MemoryUser.objects.get(tenant=tenant, external_id="jo")
    assert list(Message.objects.filter(memory_user=jo).values_list("content", flat=True)) == ["Jo says hello"]
    assert SECRET not in json.dumps(list(Thread.objects.values_list("external_id", flat=True)))


def test_more_messages_than_one_post_takes_are_imported_and_checked_by_their_place(tenant, api):
    stamp = "2025-01-02T03:04:05Z"
    messages = [
        {"thread_id": f"t{i // 300}", "role": "user", "content": f"Kim's message {i}", "created_at": stamp}
        for i in range(700)
    ]
    export = {"format": "memory-admin/export-v1", "messages": messages}
    assert ok(api.post(IMPORT.format(u="kim"), export))["imported"] == {"messages": 700}
    assert Message.objects.filter(memory_user__external_id="kim", skip_reason="imported").count() == 700
    messages[650] = {**messages[650], "content": "x" * (64 * 1024 + 1)}
    response = api.post(IMPORT.format(u="kim-2"), export)
    assert response.status_code == 413, response.content
    assert response.json()["field"] == "messages.650.content"
    assert "messages[650]" in response.json()["detail"]


def test_the_command_imports_a_file_idempotently(tenant, admin_api, dana_history, tmp_path, capsys):
    path = tmp_path / "dana.json"
    path.write_text(json.dumps(ok(admin_api.get("users/dana/export"))))
    call_command("import_memory", tenant.slug, "dana-2", str(path))
    report = json.loads(capsys.readouterr().out)
    assert report["imported"]["facts"] == 14
    call_command("import_memory", tenant.slug, "dana-2", str(path))
    assert json.loads(capsys.readouterr().out)["imported"] == {}
    copy = MemoryUser.objects.get(tenant=tenant, external_id="dana-2")
    assert AuditEvent.objects.filter(memory_user=copy, action="import.write", actor="system:import").exists()
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "memory-admin/export-v1", "facts": [{"id": 1}]')
    with pytest.raises(CommandError, match=re.escape("not an export")):
        call_command("import_memory", tenant.slug, "dana-3", str(bad))
    assert not MemoryUser.objects.filter(external_id="dana-3").exists()


@pytest.mark.django_db(transaction=True)
def test_no_planted_secret_in_an_export_reaches_the_database(api):
    """Every kind of secret, in every part of an export (fact text, key, metadata, notebook, skill,
    message, episode summary): a full pg_dump afterwards holds none of them."""
    from tests.services.test_planted_secrets import NEEDLES, SECRETS, pg_dump_text

    stamp = "2025-01-02T03:04:05Z"
    facts, messages, revisions, skills, episodes = [], [], [], [], []
    for i, (kind, secret) in enumerate(SECRETS.items()):
        text = f"Remember this for Hana ({kind}): {secret} thanks"
        base = {"confidence": 1.0, "source": "user_stated", "valid_from": stamp, "created_at": stamp}
        facts += [
            {**base, "id": f"00000000-0000-4000-8000-{i:06d}000001", "content": text},
            {
                **base,
                "id": f"00000000-0000-4000-8000-{i:06d}000002",
                "content": f"Hana's note {i}",
                "metadata": {"note": text},
            },
        ]
        messages.append({"thread_id": "t1", "role": "user", "content": text, "created_at": stamp})
        revisions.append({"version": i + 1, "content": f"# Hana\n- {text}", "created_at": stamp})
        skills.append({"path": f"hana/s{i}.md", "content": text})
        episodes.append(
            {"id": f"00000000-0000-4000-9000-{i:012d}", "started_at": stamp, "ended_at": stamp, "summary": text}
        )
    facts.append(
        {
            "id": "00000000-0000-4000-8000-999999999999",
            "content": "Hana keeps her notes in Obsidian",
            "confidence": 1.0,
            "source": "user_stated",
            "valid_from": stamp,
            "created_at": stamp,
        }
    )
    export = {
        "format": "memory-admin/export-v1",
        "facts": facts,
        "messages": messages,
        "episodes": episodes,
        "notebook": {"revisions": revisions},
        "skills": skills,
    }
    response = api.post(IMPORT.format(u="hana"), export)
    report = ok(response)
    for needles in NEEDLES.values():
        assert not any(n in response.content.decode() for n in needles)
    refused = Counter(r["kind"] for r in report["refused"])
    assert refused["facts"] >= len(SECRETS) and refused["skill_revisions"] == len(SECRETS), report["refused"]
    dump = pg_dump_text()
    assert "Hana keeps her notes in Obsidian" in dump
    for kind, needles in NEEDLES.items():
        for needle in needles:
            assert needle not in dump, f"{kind} leaked into the database through an import"
