"""What a question excludes (SPEC §6, issue 33), read without a model.

A negation ("hobbies other than fixing cars", "besides work, what…", "apart from tea") names a topic the
question does not want. The question is still compared as written (its vector, its keywords): the
statement that answers such a question often names the excluded topic too ("I know a bit of German, and
Spanish" answers "what language does Tim know besides German?"), so the topic's words still find it.
What changes is the order of the best: among the NEGATION_HEAD best, the facts that hold the negated
topic's words come after the others (ranking.negated_last). The set of the best is unchanged, so a
search's recall of them is too; what it answers first is not the topic the question excludes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The best re-ordered when a question negates a topic (a search's default k).
NEGATION_HEAD = 10

# The phrases that exclude what follows them, up to the end of the clause.
_NEGATION = re.compile(
    r"\b(?:other\s+than|apart\s+from|aside\s+from|besides|except(?:\s+for)?|excluding|not\s+including"
    r"|but\s+not|rather\s+than|instead\s+of)\s+(?P<topic>[^?.!,;:]+)",
    re.IGNORECASE,
)
# A clause after the negated topic ("other than tea and what else…") starts again at these words.
_CLAUSE = re.compile(r"\s\b(?:and|but|or|what|which|who|where|when|how|that)\b\s", re.IGNORECASE)


@dataclass(frozen=True)
class QueryShape:
    """A question read for what it excludes: `negated`, the negated topic's text ("" when none)."""

    negated: str = ""


def shape_of(query: str) -> QueryShape:
    """The question's shape (module docstring)."""
    match = _NEGATION.search(query[:2000])
    if not match:
        return QueryShape()
    topic = match.group("topic")
    cut = _CLAUSE.search(topic)
    return QueryShape(negated=(topic[: cut.start()] if cut else topic).strip())


def holds_negated(lexemes: list[str] | None, negated: frozenset[str]) -> bool:
    """Whether a fact's lexemes hold every lexeme of the negated topic."""
    return bool(negated) and bool(lexemes) and negated.issubset(lexemes)
