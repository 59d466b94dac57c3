"""The offline extractor: no model, no network, so the product works out of the box.

It reads first-person statements clause by clause ("I moved from Berlin to Lisbon last month and I now work
at Globex as a product manager": four facts) and rewrites them in the third person: slots the write path
keys (where the speaker lives, works, and as what), relatives ("my sister Ana"), likes, hobbies, pets,
plans and events, with relative dates written out from the message's time. A line that names its speaker
("Ana: ...", a two-person chat relayed by an agent) is about that speaker; otherwise only the user's own
words count. It is deliberately conservative: questions, hedges ("I think", "maybe"), hypotheticals,
reactions ("I'm so happy for you") and what the other person is told ("your ...") are skipped, because a
wrong memory costs more than a missing one. Facts it writes are labelled `extractor="rules-v2"` so nobody
mistakes them for a model's output. The entities and relations it finds (`clause_graph`) are also what the
offline entity drawing (services.entity_draw) reads from every stored fact. It also writes the extractive
episode summary used when no model is configured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from extraction.rules.clauses import Said, clause_graph, normal_clause, said_in, unfront
from extraction.rules.episodes import WITHHELD_QUOTE, outcome_of, summarize
from extraction.rules.pronouns import relatives, resolved
from extraction.rules.sentences import CAPTION, dated, statements
from memory_admin.services.entities import SELF_NAME, EntityMention, RelationDraft
from memory_admin.speakers import AGENT_LABELS, USER_LABELS, speaker_of

__all__ = [
    "NAME",
    "WITHHELD_QUOTE",
    "RuleFact",
    "clause_graph",
    "extract",
    "outcome_of",
    "statements",
    "summarize",
]

NAME = "rules-v2"


@dataclass(frozen=True)
class RuleFact:
    content: str
    category: str
    kind: str
    confidence: float
    key: str | None
    message_index: int
    # The entities the fact names (the user themself as its subject) and the relations it states.
    entities: tuple[EntityMention, ...] = ()
    relations: tuple[RelationDraft, ...] = ()


def extract(messages: list[tuple[int, str, str]], *, times: dict[int, datetime] | None = None) -> list[RuleFact]:
    """Facts from (index, role, text) triples: the user's own first-person statements, about "the user";
    a line that names its speaker ("Ana: I moved to Porto", a two-person chat relayed by an agent) gives
    facts about that speaker, whatever its role; an unnamed assistant's words give none (its suggestions
    are not the user's life). `times` ({index: the message's time}) turns "yesterday" into a date."""
    found: list[RuleFact] = []
    seen: set[str] = set()
    for index, role, text in messages:
        speaker, words = speaker_of(text)
        if speaker in AGENT_LABELS:
            continue
        if speaker in USER_LABELS:
            speaker, role = None, "user"
        if role not in ("user", "assistant") or (speaker is None and role != "user"):
            continue
        when = (times or {}).get(index)
        named: dict[str, set[str]] = {"female": set(), "male": set()}  # the relatives this message named
        for clause in statements(CAPTION.sub("", words)):
            clause = resolved(normal_clause(dated(unfront(clause), when)), named)
            stated = said_in(clause)
            for gender, names in relatives(tuple(r for said in stated for r in said.relations)).items():
                named[gender] |= names
            for said in stated:
                fact = _as_fact(said, speaker, index)
                if fact.content.lower() in seen:
                    continue
                seen.add(fact.content.lower())
                found.append(fact)
    return found


def _as_fact(said: Said, speaker: str | None, index: int) -> RuleFact:
    """The statement with its speaker named: "the user", or the speaker of a named line."""
    subject, possessive = (speaker, f"{speaker}'s") if speaker else ("the user", "the user's")
    content = said.content.replace("{S}", subject).replace("{P}", possessive)
    content = content[:1].upper() + content[1:]
    content = re.sub(r"\s+([.,!])", r"\1", re.sub(r"\s+", " ", content)).strip()
    content = re.sub(r"[;:,]+([.!])$", r"\1", content)  # "taught them to cook;." -> "cook."
    slot = said.slot
    entities, relations = said.entities, said.relations
    if speaker:
        slug = re.sub(r"[^a-z0-9]+", "_", speaker.lower()).strip("_")
        slot = f"person.{slug}.{slot.split('.', 1)[-1]}" if slot and slot != "user.name" else None
        me = EntityMention(speaker, "person", "subject")
        entities = tuple(EntityMention(speaker, "person", e.role) if e.name == SELF_NAME else e for e in entities) or (
            (me,) if relations else ()
        )
        relations = tuple(
            RelationDraft(
                speaker if r.subject == SELF_NAME else r.subject, r.type, speaker if r.object == SELF_NAME else r.object
            )
            for r in relations
        )
    return RuleFact(
        content=content,
        category=said.category,
        kind=said.kind,
        confidence=said.confidence,
        key=slot,
        message_index=index,
        entities=entities,
        relations=relations,
    )
