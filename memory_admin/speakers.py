"""Who speaks on a transcript line ("Ana: I moved to Porto"): the offline extractor reads a relayed
two-person chat by its labels, and the contradiction judge never sets one speaker's words against another's."""

from __future__ import annotations

import re

SPEAKER_LINE = re.compile(r"^\s*([A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*){0,2}):\s+(?=\S)")
# Labels that are not a person's name: the line is read as unlabelled ("Note: I moved to Porto").
NOT_SPEAKERS = frozenset(
    """note ps update edit todo fyi re warning error hint question answer summary context reminder important
    example fact facts info background also btw""".split()
)
# Labels that name the user of a transcript ("User: I live in Berlin"): the user's own words.
USER_LABELS = frozenset({"user", "me", "human", "customer", "client"})
# Labels that name the agent: its words are not the user's life.
AGENT_LABELS = frozenset({"assistant", "ai", "bot", "agent", "system", "model", "gpt", "claude"})


def speaker_of(text: str) -> tuple[str | None, str]:
    """(speaker, words) of a transcript line ("Ana: I moved to Porto"): a two-person chat relayed by an
    agent names who speaks; (None, text) for a line without such a label, (None, words) for a label that
    names no one ("Note:"); "user" / "assistant" (lower case) for the labels that name the two sides."""
    m = SPEAKER_LINE.match(text)
    label = m.group(1).casefold() if m else ""
    if m is None:
        return None, text
    if label in NOT_SPEAKERS:
        return None, text[m.end() :]
    if label in USER_LABELS or label in AGENT_LABELS:
        return label, text[m.end() :]
    return m.group(1), text[m.end() :]
