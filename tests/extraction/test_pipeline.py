"""The extraction pipeline in-process, over the API, against a real (fake) OpenAI-compatible HTTP server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from extraction import pipeline
from memory_admin.models import (
    AuditEvent,
    Episode,
    ExtractionBatch,
    Fact,
    LlmCall,
    MemoryUser,
    Message,
    PiiBlock,
    TenantSettings,
    Thread,
)
from memory_admin.selectors.access import Principal
from memory_admin.services.extraction import batch_retry
from memory_admin.services.facts import fact_write
from tests.extraction.conftest import drain

LATER = timedelta(seconds=31)
SECRET = "sk-proj-" + "Zq8" * 12


def post(api, user="alice", thread="t1", *contents, role="user"):
    return api.post(
        f"users/{user}/messages", {"thread_id": thread, "messages": [{"role": role, "content": c} for c in contents]}
    )


def later():
    return timezone.now() + LATER


# --- API: accepting messages ---------------------------------------------------------------------


def test_post_answers_202_with_the_due_time_and_never_calls_the_model(api, fake_llm, dispatched):
    before = timezone.now()
    r = post(api, "alice", "t1", "I prefer vim over emacs for everything.", "I work at Acme Robotics these days.")
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["accepted"] == 2 and body["pending"] == 2 and body["extraction"] == "scheduled"
    due = timezone.datetime.fromisoformat(body["extract_due_at"])
    assert timedelta(seconds=29) < due - before < timedelta(seconds=32)  # the default 30 s window
    assert fake_llm.count() == 0 and not ExtractionBatch.objects.exists()


def test_each_new_message_pushes_the_deadline_and_one_batch_takes_them_all(api, tenant, fake_llm, dispatched):
    first = post(api, "alice", "t1", "I prefer vim over emacs for everything.").json()
    second = post(api, "alice", "t1", "I work at Acme Robotics these days.").json()
    assert second["extract_due_at"] > first["extract_due_at"]
    assert pipeline.plan_due_threads() == []  # still inside the window: nothing happens
    results = drain(now=later())
    assert [r.status for r in results] == ["done"]
    assert fake_llm.count("extraction") == 1
    assert set(Message.objects.values_list("status", flat=True)) == {"extracted"}
    facts = set(Fact.objects.values_list("content", flat=True))
    assert facts == {
        "The user said: I prefer vim over emacs for everything.",
        "The user said: I work at Acme Robotics these days.",
    }
    fact = Fact.objects.first()
    assert fact.extractor == "llm:gpt-4o-mini" and fact.batch_id and fact.message_id
    assert fact.source == "user_stated"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"thread_id": "t", "messages": []}, "messages"),
        ({"thread_id": "t", "messages": [{"role": "robot", "content": "hello there friend"}]}, "messages.0.role"),
        ({"thread_id": "t", "messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"thread_id": "", "messages": [{"role": "user", "content": "hello there friend"}]}, "thread_id"),
        ({"thread_id": "t", "messages": [{"role": "user", "content": "hi", "extra": 1}]}, "messages.0.extra"),
        (
            {"thread_id": "t", "messages": [{"role": "user", "content": "hi", "created_at": "yesterday"}]},
            "messages.0.created_at",
        ),
    ],
)
def test_bad_input_is_422_and_nothing_is_written(api, body, field):
    r = api.post("users/alice/messages", body)
    assert r.status_code == 422, r.content
    assert r.json()["code"] == "invalid" and r.json()["field"] == field
    assert not Message.objects.exists()


def test_a_message_over_64_kb_is_413_and_nothing_is_written(api, settings):
    ok = "x" * settings.MAX_MESSAGE_BYTES
    r = api.post(
        "users/alice/messages",
        {"thread_id": "t", "messages": [{"role": "user", "content": ok}, {"role": "user", "content": ok + "é"}]},
    )
    assert r.status_code == 413
    assert r.json()["code"] == "content_too_large" and r.json()["limit"] == settings.MAX_MESSAGE_BYTES
    assert not Message.objects.exists() and not Thread.objects.exists()


def test_unknown_thread_close_is_404_and_other_tenants_see_nothing(api, make_api, other_tenant, dispatched):
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    assert api.post("users/alice/threads/nope/close").status_code == 404
    other = make_api(other_tenant)
    assert other.post("users/alice/threads/t1/close").status_code == 404
    assert other.get("users/alice/episodes").status_code == 404


# --- secrets ---------------------------------------------------------------------------------------


def test_a_secret_in_a_message_is_stored_redacted_and_never_reaches_a_fact(api, tenant, fake_llm, dispatched):
    r = post(api, "alice", "t1", f"I deploy with the key {SECRET} on Fridays.", "I use Terraform for everything.")
    assert r.status_code == 202
    redacted = r.json()["redacted"]
    assert redacted[0]["index"] == 0 and redacted[0]["kinds"] == ["openai_key"]
    stored = Message.objects.order_by("id").first().content
    assert SECRET not in stored and "[REDACTED:openai_key]" in stored
    block = PiiBlock.objects.get(pk=redacted[0]["block_id"])
    assert block.route == "message" and block.action == "redacted" and SECRET not in block.redacted_preview
    drain(now=later())
    assert SECRET not in fake_llm.calls[0]["prompt"]  # the model never saw it
    assert not Fact.objects.filter(content__contains="sk-").exists()
    assert not Fact.objects.filter(content__contains="[REDACTED").exists()  # placeholders carry nothing
    assert Fact.objects.filter(content__contains="Terraform").exists()


def test_a_secret_the_model_makes_up_is_blocked_by_the_write_path(api, tenant, fake_llm, dispatched):
    token = "ghp_" + "A1b2C3d4E5" * 4
    fake_llm.extraction = lambda prompt: {
        "facts": [
            {"content": f"The user's GitHub token is {token}", "confidence": 0.95, "message": 0},
            {"content": "The user ships on Fridays", "confidence": 0.95, "message": 0},
        ]
    }
    post(api, "alice", "t1", "I ship on Fridays, always have.")
    (result,) = drain(now=later())
    assert result.status == "done" and result.outcomes == {"blocked": 1, "created": 1}
    assert not Fact.objects.filter(content__contains="ghp_").exists()
    assert PiiBlock.objects.filter(route="extraction", action="blocked").count() == 1
    assert not AuditEvent.objects.filter(after__icontains=token).exists()


# --- cost gates --------------------------------------------------------------------------------------


def test_the_kill_switch_stores_messages_but_never_calls_the_model(api, tenant, fake_llm, dispatched):
    TenantSettings.objects.update_or_create(tenant=tenant, defaults={"extraction_enabled": False})
    r = post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    assert r.status_code == 202 and r.json()["extraction"] == "disabled"
    drain(now=later())
    assert fake_llm.count() == 0 and LlmCall.objects.count() == 0
    assert list(Message.objects.values_list("status", "skip_reason")) == [("skipped", "extraction_disabled")]
    assert not Fact.objects.exists()


def test_short_messages_are_logged_but_not_extracted(api, tenant, fake_llm, dispatched):
    r = post(api, "alice", "t1", "ok", "thanks!", "I prefer tabs.")  # all under the default 20 characters
    assert r.json()["pending"] == 0 and r.json()["extraction"] == "nothing_to_extract"
    assert [s["reason"] for s in r.json()["skipped"]] == ["too_short"] * 3
    drain(now=later())
    assert fake_llm.count() == 0
    post(api, "alice", "t1", "yes", "I prefer tabs over spaces in all my Go code.")
    drain(now=later())
    assert fake_llm.count() == 1
    assert "yes" not in fake_llm.calls[0]["prompt"].split(": ")[-1]
    assert Message.objects.filter(status="skipped").count() == 4


def test_recalled_memory_echoed_by_the_agent_is_not_extracted_again(api, tenant, fake_llm, dispatched):
    user = MemoryUser.objects.create(tenant=tenant, external_id="alice")
    known = fact_write(
        principal=Principal.system(tenant.pk),
        memory_user=user,
        content="The user prefers vim over emacs",
        source="user_stated",
    ).fact
    fake_llm.extraction = lambda prompt: {
        "facts": [
            {"content": line.split(": ", 1)[1], "confidence": 0.9, "message": int(line[1])}
            for line in prompt.splitlines()[1:]
        ]
    }
    post(
        api,
        "alice",
        "t1",
        "<<<MEMORY_DATA abc123>>>\n## Facts\n- The user plays chess on Sundays\n<<<END_MEMORY_DATA abc123>>>",
        "The user prefers vim over emacs. Shall I open the config?",
        role="assistant",
    )
    post(api, "alice", "t1", "I also started learning Rust this month.")
    drain(now=later())
    prompt = fake_llm.calls[0]["prompt"]
    assert "chess" not in prompt and "vim" not in prompt and "Rust" in prompt and "Shall I" in prompt
    assert Message.objects.get(content__startswith="<<<MEMORY").skip_reason == "recalled_memory"
    assert not Fact.objects.filter(content__contains="chess").exists()
    known.refresh_from_db()
    assert known.status == "active" and Fact.objects.filter(content__icontains="vim").count() == 1


# --- failures and retries ------------------------------------------------------------------------------


def test_malformed_json_is_retried_then_the_batch_fails_with_the_reason(api, tenant, fake_llm, dispatched):
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    post(api, "bob", "t2", "I work at Acme Robotics these days.")
    fake_llm.fail_matching("vim", "badjson", "badschema")
    drain(now=later())
    failed = ExtractionBatch.objects.get(status="failed")
    assert "malformed" in failed.error and failed.attempts == 3
    assert list(failed.messages.values_list("status", flat=True)) == ["pending"]  # kept for a retry
    assert LlmCall.objects.filter(batch=failed, ok=False).count() == 3
    # The other thread was not affected.
    assert ExtractionBatch.objects.get(status="done").thread.external_id in {"t1", "t2"}
    assert fake_llm.count("extraction") == 4
    assert AuditEvent.objects.filter(action="extraction.batch", outcome="failed").count() == 1


def test_a_rate_limit_then_success_ends_done_with_both_calls_costed(api, tenant, fake_llm, dispatched):
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    fake_llm.fail_next("429")
    results = drain(now=later())
    assert [r.status for r in results] == ["pending", "done"]
    batch = ExtractionBatch.objects.get()
    assert batch.status == "done" and batch.attempts == 2 and batch.error == ""
    calls = LlmCall.objects.filter(batch=batch).order_by("id")
    assert [c.ok for c in calls] == [False, True] and "RateLimitError" in calls[0].error
    ok = calls[1]
    assert ok.model == "gpt-4o-mini" and ok.tenant_id == tenant.pk and ok.layer == "extraction"
    assert ok.prompt_tokens > 0 and ok.cost_usd > 0
    assert batch.prompt_tokens == ok.prompt_tokens and batch.cost_usd == ok.cost_usd


def test_a_server_error_is_retried(api, tenant, fake_llm, dispatched):
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    fake_llm.fail_next("500", "500")
    assert [r.status for r in drain(now=later())] == ["pending", "pending", "done"]


def test_a_timeout_is_retried_then_fails_and_a_manual_retry_extracts(
    api, admin_api, tenant, fake_llm, dispatched, settings
):
    settings.OPENAI_TIMEOUT_SECONDS = 0.3
    fake_llm.stall_seconds = 1
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    fake_llm.fail_next("stall", "stall", "stall")
    drain(now=later())
    batch = ExtractionBatch.objects.get()
    assert batch.status == "failed" and "timeout" in batch.error and batch.attempts == 3
    assert Message.objects.get().status == "pending"
    # The API is unaffected, and lists the failure for the dashboard.
    listed = admin_api.get("batches", status="failed").json()
    assert [b["id"] for b in listed] == [batch.pk] and "timeout" in listed[0]["error"]
    # Agents (no curate/admin right) may not spend money on retries; admins may.
    assert api.post(f"batches/{batch.pk}/retry").status_code == 403
    r = admin_api.post(f"batches/{batch.pk}/retry")
    assert r.status_code == 202 and r.json()["status"] == "pending"
    assert admin_api.post(f"batches/{batch.pk}/retry").status_code == 409
    assert pipeline.run_batch(batch.pk).status == "done"
    assert Message.objects.get().status == "extracted" and Fact.objects.count() == 1


def test_a_non_retryable_error_fails_at_once(api, tenant, fake_llm, dispatched, settings):
    settings.OPENAI_BASE_URL = fake_llm.base_url.replace("/v1", "/nowhere")
    from extraction import llm

    llm.client.cache_clear()
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    drain(now=later())
    batch = ExtractionBatch.objects.get()
    assert batch.status == "failed" and batch.attempts == 1 and "404" in batch.error


def test_batch_retry_service_is_tenant_scoped(tenant, other_tenant, api, fake_llm, dispatched):
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    fake_llm.fail_next("500", "500", "500")
    drain(now=later())
    batch = ExtractionBatch.objects.get()
    from memory_admin.errors import NotFound

    with pytest.raises(NotFound):
        batch_retry(Principal.system(other_tenant.pk), batch.pk)
    assert batch_retry(Principal.system(tenant.pk), batch.pk).status == "pending"


# --- exactly once --------------------------------------------------------------------------------------


def test_a_duplicate_delivery_does_nothing(api, fake_llm, dispatched):
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    (batch_id,) = pipeline.plan_due_threads(now=later())
    assert pipeline.run_batch(batch_id).status == "done"
    assert pipeline.run_batch(batch_id).status == "not_claimed"
    assert fake_llm.count() == 1 and Fact.objects.count() == 1


def test_a_worker_whose_lease_expired_throws_its_result_away(api, fake_llm, dispatched):
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    (batch_id,) = pipeline.plan_due_threads(now=later())
    batch, token = pipeline._claim(batch_id)
    # The first worker stalls past its lease; the sweeper hands the batch to a second worker.
    ExtractionBatch.objects.filter(pk=batch_id).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert pipeline.recover_batches() == [batch_id]
    assert pipeline.run_batch(batch_id).status == "done"
    late = pipeline._commit(batch_id, token, [], {}, model="gpt-4o-mini")
    assert late.status == "lost"
    assert Fact.objects.count() == 1 and ExtractionBatch.objects.get().attempts == 2


def test_lost_workers_count_as_attempts(api, fake_llm, dispatched, settings):
    post(api, "alice", "t1", "I prefer vim over emacs for everything.")
    (batch_id,) = pipeline.plan_due_threads(now=later())
    for _ in range(3):
        pipeline._claim(batch_id)
        ExtractionBatch.objects.filter(pk=batch_id).update(lease_until=timezone.now() - timedelta(seconds=1))
        pipeline.recover_batches()
    batch = ExtractionBatch.objects.get()
    assert batch.status == "failed" and "worker was lost" in batch.error


# --- offline extractor, close, episodes ----------------------------------------------------------------


def test_offline_extraction_and_episode_on_close(api, tenant, offline, dispatched):
    post(
        api,
        "alice",
        "t1",
        "Hi! My name is Dana Scully and I work at Acme Robotics.",
        "Can you help me set up my editor? I prefer neovim over VS Code.",
    )
    post(api, "alice", "t1", "Sure, here is a config you could try.", role="assistant")
    post(api, "alice", "t1", "Thanks, that worked perfectly!")
    r = api.post("users/alice/threads/t1/close")
    assert r.status_code == 202 and r.json()["extraction"] == "now"
    thread = Thread.objects.get()
    assert thread.closed_at and thread.extract_due_at <= timezone.now()
    episode = pipeline.close_thread(thread.pk)
    facts = {f.content: f for f in Fact.objects.all()}
    assert set(facts) == {
        "The user's name is Dana Scully.",
        "The user works at Acme Robotics.",
        "The user prefers neovim over VS Code.",
    }
    assert {f.extractor for f in facts.values()} == {"rules-v2"}
    assert facts["The user's name is Dana Scully."].key == "user.name"
    assert ExtractionBatch.objects.get().extractor == "rules-v2"
    assert episode.outcome == "success" and "Dana Scully" in episode.summary and episode.summarizer == "rules-v2"
    assert set(episode.facts.all()) == set(facts.values())
    assert Message.objects.filter(episode=episode).count() == 4
    assert LlmCall.objects.count() == 0
    # Reading it back over the API.
    listed = api.get("users/alice/episodes").json()["items"]
    assert [e["id"] for e in listed] == [str(episode.pk)]
    assert listed[0]["fact_count"] == 3 and listed[0]["message_count"] == 4 and listed[0]["thread_id"] == "t1"
    detail = api.get(f"episodes/{episode.pk}").json()
    assert len(detail["messages"]) == 4 and len(detail["facts"]) == 3
    # A second close builds nothing new; a new message reopens the thread for the next episode.
    assert pipeline.close_thread(thread.pk) is None
    post(api, "alice", "t1", "One more thing: I live in Berlin now.")
    assert Thread.objects.get().closed_at is None


def test_close_with_the_agents_outcome_and_an_llm_summary(api, tenant, fake_llm, dispatched):
    post(api, "alice", "t1", "I need the deploy to stop failing on staging.")
    api.post("users/alice/threads/t1/close", {"outcome": "failure"})
    episode = pipeline.close_thread(Thread.objects.get().pk, outcome="failure")
    assert episode.outcome == "failure" and episode.summarizer == "llm:gpt-4o-mini"
    assert fake_llm.count("extraction") == 1 and fake_llm.count("summary") == 1
    assert LlmCall.objects.filter(layer="summary", tenant=tenant).count() == 1


def test_idle_threads_become_episodes_and_filters_work(api, tenant, offline, dispatched):
    post(api, "alice", "t1", "I work at Acme Robotics these days.")
    post(api, "alice", "t2", "The build is still failing, I give up for today.")
    drain(now=later())
    assert pipeline.idle_threads() == []  # not idle yet (30 minutes by default)
    Thread.objects.update(last_message_at=timezone.now() - timedelta(minutes=31))
    idle = pipeline.idle_threads()
    assert len(idle) == 2
    for thread_id in idle:
        pipeline.episode_build(thread_id)
    assert Episode.objects.count() == 2 and pipeline.idle_threads() == []
    failures = api.get("users/alice/episodes", outcome="failure").json()["items"]
    assert [e["thread_id"] for e in failures] == ["t2"]
    assert [e["thread_id"] for e in api.get("users/alice/episodes", thread_id="t1").json()["items"]] == ["t1"]
    soon = (timezone.now() + timedelta(hours=1)).isoformat()
    assert api.get("users/alice/episodes", since=soon).json()["items"] == []
    assert len(api.get("users/alice/episodes", until=soon).json()["items"]) == 2
    page = api.get("users/alice/episodes", limit=1).json()
    assert len(page["items"]) == 1 and page["next_cursor"]
    assert api.get("users/alice/episodes", outcome="bogus").status_code == 422


def test_user_context_updates_are_keyed_facts_and_a_new_value_supersedes(api, tenant, fake_llm, dispatched):
    zone = {"value": "Europe/Berlin"}
    fake_llm.extraction = lambda prompt: {
        "facts": [],
        "user_context": [
            {
                "key": "timezone",
                "statement": f"The user's timezone is {zone['value']}",
                "confidence": 0.95,
                "message": 0,
            },
            {"key": "Not A Valid Key!", "statement": "dropped: the item breaks the schema", "confidence": 0.9},
        ],
    }
    post(api, "alice", "t1", "I am in Berlin for the foreseeable future.")
    drain(now=later())
    first = Fact.objects.get(key="user.timezone")
    assert first.content == "The user's timezone is Europe/Berlin" and first.category == "personal"
    zone["value"] = "America/New_York"
    post(api, "alice", "t1", "I just moved to New York, new job and all.")
    drain(now=later())
    first.refresh_from_db()
    current = Fact.objects.get(key="user.timezone", status="active")
    assert first.status == "superseded" and current.content.endswith("America/New_York")
    assert current.supersedes_id == first.pk and Fact.objects.count() == 2
