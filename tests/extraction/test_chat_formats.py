"""An agent posts its conversation as its framework holds it: OpenAI's chat messages (content as a list
of parts, the `developer` role, an assistant turn that only calls a tool, the tool's answer) and Anthropic's
content blocks (text, tool_use, tool_result). The text is stored and extracted; a turn without text is
passed over and reported; everything else is refused as before."""

from __future__ import annotations

import pytest

from memory_admin.models import Fact, Message
from tests.extraction.conftest import drain
from tests.extraction.test_pipeline import SECRET, later

pytestmark = pytest.mark.django_db

OPENAI_HISTORY = [
    {"role": "developer", "content": "You are a helpful travel assistant. Keep answers short."},
    {"role": "user", "content": [{"type": "text", "text": "My sister Ana lives in Porto and I visit her every May."}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Porto"}'}}
        ],
        "refusal": None,
        "annotations": [],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"city": "Porto", "forecast": "sunny, 24 C"}'},
    {"role": "assistant", "content": "It will be sunny in Porto, 24 degrees. Enjoy the visit to Ana!"},
]

JOB = "I switched jobs: I now work at Globex as a product manager."
LOOKED_UP = "Globex: a software company with 800 staff in Springfield"
ANTHROPIC_HISTORY = [
    {"role": "user", "content": [{"type": "text", "text": JOB}]},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup_company", "input": {"name": "Globex"}}],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": LOOKED_UP}],
            }
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "text", "text": "This is a photo of my new desk at Globex."},
        ],
    },
]


def post(api, messages, user="ana-fan"):
    return api.post(f"users/{user}/messages", {"thread_id": "t1", "messages": messages})


def test_an_openai_history_posted_as_it_is_is_stored_and_extracted(api, offline, dispatched):
    r = post(api, OPENAI_HISTORY)
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["accepted"] == 4 and body["skipped"] == [{"index": 2, "reason": "no_text"}]
    stored = list(Message.objects.order_by("pk").values_list("role", "content"))
    assert stored == [
        ("system", OPENAI_HISTORY[0]["content"]),
        ("user", "My sister Ana lives in Porto and I visit her every May."),
        ("tool", OPENAI_HISTORY[3]["content"]),
        ("assistant", OPENAI_HISTORY[4]["content"]),
    ]
    drain(now=later())
    facts = " ".join(Fact.objects.values_list("content", flat=True))
    assert "Porto" in facts and "Ana" in facts, facts
    assert "get_weather" not in facts and "call_1" not in facts


def test_anthropic_content_blocks_are_read_for_their_text(api, offline, dispatched):
    r = post(api, ANTHROPIC_HISTORY)
    assert r.status_code == 202, r.content
    assert r.json()["skipped"] == [{"index": 1, "reason": "no_text"}]
    stored = list(Message.objects.order_by("pk").values_list("content", flat=True))
    assert stored == [
        JOB,
        LOOKED_UP,
        "This is a photo of my new desk at Globex.",
    ]
    assert not any("iVBORw0KGgo" in s or "lookup_company" in s for s in stored)
    drain(now=later())
    assert Fact.objects.filter(content__icontains="Globex").exists()


def test_a_secret_in_a_content_part_is_redacted_like_any_message(api, offline, dispatched):
    r = post(api, [{"role": "user", "content": [{"type": "text", "text": f"My OpenAI key is {SECRET}, keep it"}]}])
    assert r.status_code == 202 and r.json()["redacted"], r.content
    assert SECRET not in Message.objects.get().content


@pytest.mark.parametrize(
    "turn",
    [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function"}]},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]},  # content left out
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
    ],
)
def test_a_turn_with_nothing_to_read_is_passed_over_even_alone(api, dispatched, turn):
    r = post(api, [turn])
    assert r.status_code == 202, r.content
    assert r.json()["accepted"] == 0 and r.json()["skipped"] == [{"index": 0, "reason": "no_text"}]
    assert r.json()["extraction"] == "nothing_to_extract" and not Message.objects.exists()


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "user", "content": ""}, "messages.1.content"),  # a plain message must say something
        ({"role": "user", "content": "   "}, "messages.1.content"),
        ({"role": "user", "content": None}, "messages.1.content"),
        ({"role": "user"}, "messages.1.content"),
        ({"role": "robot", "content": "hello there friend"}, "messages.1.role"),
        ({"role": "model", "content": "hello there friend"}, "messages.1.role"),
        ({"role": "user", "contnet": "hello there friend"}, "messages.1.contnet"),
        ({"role": "user", "content": "hello there", "colour": "red"}, "messages.1.colour"),
        ({"role": "user", "content": [{"text": "no type"}]}, "messages.1.content.0.type"),
        ({"role": "user", "content": [{"type": "text", "text": "bell\x07 rings"}]}, "messages.1.content.0.text"),
        ({"role": "user", "content": [{"type": "text", "text": 5}]}, "messages.1.content.0.text"),
        ({"role": "user", "content": [{"type": "text", "text": "x"}] * 101}, "messages.1.content"),
        ({"role": "user", "content": {"type": "text", "text": "not a list"}}, "messages.1.content"),
        ({"role": "assistant", "content": "ok", "type": "function_call"}, "messages.1.type"),
    ],
)
def test_what_no_format_allows_is_still_refused_and_nothing_is_written(api, dispatched, message, field):
    r = post(api, [{"role": "user", "content": "A fine first message about my garden."}, message])
    assert r.status_code == 422, r.content
    assert r.json()["code"] == "invalid" and r.json()["field"].startswith(field), r.json()
    assert not Message.objects.exists()


def test_langchains_message_types_are_taken_as_roles(api, dispatched):
    r = post(api, [{"role": "human", "content": "I keep bees on my roof."}, {"role": "ai", "content": "Lovely hobby!"}])
    assert r.status_code == 202, r.content
    assert list(Message.objects.order_by("pk").values_list("role", flat=True)) == ["user", "assistant"]
