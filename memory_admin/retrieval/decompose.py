"""The shape of a question (SPEC §6, issue 33), read without a model: what it excludes, and whether it
asks for several memories.

- A negation ("hobbies other than fixing cars", "besides work, what…", "apart from tea") names a topic
  the question does not want: the search compares the question without it (its vector and its keywords),
  and a fact holding the negated words is demoted (`NEGATED_FACTOR` × the share of them it holds), so
  the topic the question excludes is not what it answers first. The fact stays a candidate.
- A question that asks for several things ("What activities…", "Which cities have…", "What do X and Y
  both…", "in what ways…") is answered by statements spread over conversations: its ranking spreads the
  best over conversations more (ranking's SEVERAL_FREE / SEVERAL_STEP), where a question about one thing
  keeps the ranking it had.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What a fact holding every negated word keeps of its score (a share of them: a share of the demotion).
NEGATED_FACTOR = 0.4

# The phrases that exclude what follows them, up to the end of the clause.
_NEGATION = re.compile(
    r"\b(?:other\s+than|apart\s+from|aside\s+from|besides|except(?:\s+for)?|excluding|not\s+including"
    r"|but\s+not|rather\s+than|instead\s+of)\s+(?P<topic>[^?.!,;:]+)",
    re.IGNORECASE,
)
# A clause after the negated topic ("other than tea and what else…") starts again at these words.
_CLAUSE = re.compile(r"\s\b(?:and|but|or|what|which|who|where|when|how|that)\b\s", re.IGNORECASE)

# "What activities…", "Which cities…", "What kinds of…": a wh-word and a plural head noun within two words.
_PLURAL_HEAD = re.compile(
    r"\b(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?(?:\w+\s+){0,1}?(?P<noun>[a-z]{3,}s)\b", re.IGNORECASE
)
_NOT_NOUNS = frozenset({"does", "was", "has", "is", "this", "his", "hers", "its", "yours", "ours", "theirs", "as"})
_SEVERAL = re.compile(
    r"\b(?:both|in\s+common|what\s+ways|in\s+what\s+ways|how\s+many|which\s+\w+\s+have|list|all\s+the)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class QueryShape:
    """A question read for its shape: `positive` is what is compared (the question without its negated
    topic), `negated` the topic it excludes ("" when none), `several` whether it asks for several things."""

    positive: str
    negated: str = ""
    several: bool = False


def shape_of(query: str) -> QueryShape:
    """The question's shape (module docstring). A question without negation compares as written."""
    text = query[:2000]
    positive, negated = text, ""
    match = _NEGATION.search(text)
    if match:
        topic = match.group("topic")
        cut = _CLAUSE.search(topic)
        topic = topic[: cut.start()] if cut else topic
        rest = " ".join((text[: match.start()] + " " + text[match.start("topic") + len(topic) :]).split())
        # A question that is only its negation ("anything besides tea?") keeps its words to compare.
        if re.search(r"\w{3,}", rest) and topic.strip():
            positive, negated = rest, topic.strip()
    return QueryShape(positive=positive if negated else query, negated=negated, several=asks_for_several(positive))


def asks_for_several(query: str) -> bool:
    """Whether the question asks for several things (module docstring)."""
    if _SEVERAL.search(query):
        return True
    match = _PLURAL_HEAD.search(query)
    return bool(match) and match.group("noun").lower() not in _NOT_NOUNS and not match.group("noun").endswith("ss")


def negated_share(lexemes: list[str] | None, negated: frozenset[str]) -> float:
    """The share of the negated lexemes a fact holds (0.0 without negation)."""
    if not negated or not lexemes:
        return 0.0
    return len(negated.intersection(lexemes)) / len(negated)


def negation_factor(share: float) -> float:
    """What a fact holding `share` of the negated lexemes keeps of its score."""
    return 1.0 - (1.0 - NEGATED_FACTOR) * share
