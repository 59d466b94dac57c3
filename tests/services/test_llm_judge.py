"""The LLM contradiction judge, over real HTTP to an OpenAI-compatible server started by the test."""

from __future__ import annotations

import pytest

from extraction import llm
from memory_admin.models import LlmCall
from tests.fake_openai import FakeOpenAI


@pytest.fixture
def judge_server(settings):
    server = FakeOpenAI().start()
    settings.OPENAI_API_KEY = "sk-test-not-a-real-key"
    settings.OPENAI_BASE_URL = server.base_url
    settings.OPENAI_TIMEOUT_SECONDS = 2.0
    settings.CONTRADICTION_JUDGE = "llm"
    llm.client.cache_clear()
    yield server
    llm.client.cache_clear()
    server.stop()


def test_the_llm_judge_decides_and_its_call_is_costed(api, judge_server):
    # Statements the rule judge would call compatible; the model says they conflict.
    judge_server.judge = lambda prompt: {"contradictory": "commute" in prompt, "reason": "cycling vs driving"}
    api.post("users/alice/facts", {"content": "Alice cycles to the office every day", "confidence": 0.8})
    r = api.post("users/alice/facts", {"content": "Alice commutes by car to the office daily", "confidence": 0.85})
    assert r.json()["outcome"] == "queued_for_review"
    assert judge_server.count("judge") >= 1
    call = LlmCall.objects.filter(layer="judge").latest("created_at")
    assert call.ok and call.prompt_tokens > 0 and call.model == "gpt-4o-mini" and call.cost_usd > 0


def test_a_failing_judge_falls_back_to_rules_and_the_write_still_lands(api, judge_server):
    judge_server.fail_next("500", "500", "500", "500", "500")
    api.post("users/bob/facts", {"content": "Bob lives in Berlin", "confidence": 0.8})
    r = api.post("users/bob/facts", {"content": "Bob lives in Paris", "confidence": 0.85})
    assert r.status_code == 201
    assert r.json()["outcome"] == "queued_for_review"  # the rule judge's verdict
    assert LlmCall.objects.filter(layer="judge", ok=False).exists()
