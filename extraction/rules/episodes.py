"""The extractive episode summary and outcome written when no model is configured."""

from __future__ import annotations

import re

from memory_admin.services.guard import verdict

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_SUCCESS = re.compile(
    r"\b(thanks?|thank you|that worked|it works|works now|worked|fixed|solved|perfect|great|"
    r"done|resolved|all good|awesome)\b",
    re.I,
)
_FAILURE = re.compile(
    r"\b(still (?:fails|failing|broken|doesn't work|not working)|doesn't work|didn't work|"
    r"not working|give up|gave up|no luck|still an error|won't work|failed)\b",
    re.I,
)


def outcome_of(messages: list[tuple[str, str]]) -> str:
    """success / failure / unknown from the last user turns (an offline, honest guess)."""
    user_turns = [text for role, text in messages if role == "user"][-2:]
    tail = " ".join(user_turns)
    if _FAILURE.search(tail):
        return "failure"
    if _SUCCESS.search(tail):
        return "success"
    return "unknown"


def _first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence that says something (greetings such as "Hi!" are skipped)."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]
    sentence = next((s for s in sentences if len(s.split()) >= 3), sentences[0] if sentences else "")
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


WITHHELD_QUOTE = "(a message that reads as instructions to a model, not quoted)"


def _quote(text: str) -> str:
    """A user's sentence quoted into the summary, which context blocks serve to agents: one that reads as
    instructions to a model (the poisoning guard) is described, never quoted."""

    if verdict(text).flagged:
        return WITHHELD_QUOTE
    sentence = _first_sentence(text)
    return WITHHELD_QUOTE if verdict(sentence).flagged else f"“{sentence}”"


def summarize(messages: list[tuple[str, str]]) -> str:
    """An extractive summary: what the user opened with, what else they said, how it ended."""
    user = [text for role, text in messages if role == "user" and text.strip()]
    if not user:
        return f"{len(messages)} messages without user turns."
    parts = [f"The user opened with: {_quote(user[0])}"]
    if len(user) > 2:
        parts.append(f"Along the way: {_quote(user[len(user) // 2])}")
    if len(user) > 1:
        parts.append(f"Last user turn: {_quote(user[-1])}")
    parts.append(f"({len(messages)} messages.)")
    return " ".join(parts)
