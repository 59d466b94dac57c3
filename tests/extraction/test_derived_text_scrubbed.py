"""Text we derive and store (a model's episode summary, a provider's error) is scrubbed of secrets
and of the contact PII the policy blocks: the messages were stored redacted, but a model can still
write a value into its summary, and an error string can quote the request."""

from __future__ import annotations

import pytest

from extraction import pipeline
from memory_admin.models import LlmCall, Thread
from tests.security.corpus import canon

SECRET = "sk-" + "proj-Zq8LmN3pR7tV1wX5yB9cD2fG6hJ0kP4s"


@pytest.mark.django_db
def test_a_summary_and_an_error_never_carry_a_value(api, tenant, fake_llm, dispatched):
    fake_llm.summary = lambda prompt: {
        "summary": f"Alice pasted {SECRET} and asked to mail alice.secret.mail@example.org",
        "outcome": "success",
    }
    r = api.post(
        "users/alice/messages",
        {
            "thread_id": "t1",
            "messages": [{"role": "user", "content": "Please keep the deploy notes for the staging cluster handy."}],
        },
    )
    assert r.status_code == 202
    episode = pipeline.close_thread(Thread.objects.get().pk, outcome="success")
    assert episode.summarizer.startswith("llm:")
    assert episode.summary == "Alice pasted [REDACTED:openai_key] and asked to mail [REDACTED:email]"
    served = api.get(f"episodes/{episode.pk}").json()["summary"]
    assert "Zq8LmN3pR7tV1wX5" not in canon(served) and "alicesecretmail" not in canon(served)

    from extraction.llm import record_call

    call = record_call(
        tenant_id=tenant.pk,
        layer="summary",
        model="m",
        ok=False,
        error=f"BadRequestError: the prompt contains {SECRET}",
    )
    assert SECRET not in LlmCall.objects.get(pk=call.pk).error
