"""Fitting the context block: what goes in, within the budget. A budget holds a prefix of the gathered
order (a larger budget only adds); a fact a listed one holds collapses into it; the first fact that
does not fit is cut to the room left; notebooks are cut, never dropped silently."""

from __future__ import annotations

import itertools

from memory_admin.knowledge import conf
from memory_admin.retrieval.context.render import (
    NOTEBOOK_SECTIONS,
    TITLES,
    Item,
    Section,
    day_tokens,
    fence_tokens,
    rendered,
    tokens_of,
)
from memory_admin.retrieval.search import Ranking
from memory_admin.tokens import count_tokens, truncate_to_tokens

_CUT_MARK = "\u2026"
# How far into the ranking a block could reach: as many facts as the budget could hold if a line cost
# LINE_TOKENS_PER_LEXEME tokens per lexeme of the fact (the ranking knows how many each has; an
# underestimate), plus MIN_FACT_CANDIDATES. The ranked facts a block does not hold are listed as dropped
# up to there.
LINE_TOKENS_PER_LEXEME = 2
MIN_FACT_CANDIDATES = 30
# The fact cut to fill the end of the budget shows at least this many tokens of its text.
MIN_CUT_TOKENS = 4
# A fact collapses into a listed one whose words contain its own only from this many words on (two
# words, "thanks, Ana", are contained in too many lines to mean the same thing).
CONTAINED_MIN_WORDS = 4
ENTITY_SHARE = 0.025
ENTITY_MAX_TOKENS = 100


class Room:
    """The tokens left in the budget, and the words of the facts listed so far: a fact whose words a
    listed one holds (the same words, or a run of at least CONTAINED_MIN_WORDS of them) collapses into it."""

    def __init__(self, tokens: int):
        self.left = tokens
        self._words: dict[str, str] = {}  # words -> id of the listed fact
        # The first three words of the long ones -> their lengths in words (ever listed: a superset does
        # no harm, `_words` says what is listed).
        self._lengths: dict[str, set[int]] = {}
        self._listed = " \n "

    def duplicate_of(self, item: Item) -> str | None:
        if not item.words:
            return None
        same = self._words.get(item.words)
        if same is not None or item.words.count(" ") + 1 < CONTAINED_MIN_WORDS:
            return same
        if f" {item.words} " not in self._listed:
            return None
        return next(fid for words, fid in self._words.items() if f" {item.words} " in f" {words} ")

    def held_by(self, item: Item) -> list[str]:
        """The listed facts whose words `item` holds: the runs of its words that start as a listed long
        one does and are as long as it is listed (one lookup per length, not a scan of every listed fact
        that starts alike: many do, "Ana: I ...")."""
        words = item.words.split()
        found = set()
        for i in range(len(words) - 2):
            for n in self._lengths.get(" ".join(words[i : i + 3]), ()):
                if i + n <= len(words) and (run := " ".join(words[i : i + n])) in self._words:
                    found.add(run)
        return [self._words[listed] for listed in found if listed != item.words]

    def list(self, item: Item) -> None:
        if item.words and item.words not in self._words:
            self._words[item.words] = item.id
            self._listed += item.words + " \n "
            if item.words.count(" ") + 1 >= CONTAINED_MIN_WORDS:
                words = item.words.split()
                self._lengths.setdefault(" ".join(words[:3]), set()).add(len(words))

    def unlist(self, item: Item) -> None:
        if self._words.get(item.words) == item.id:
            del self._words[item.words]
            self._listed = self._listed.replace(f" \n {item.words} \n ", " \n ", 1)


def _fact_candidates(ranking: Ranking, budget_tokens: int) -> int:
    """How many ranked facts to read first for a budget: what it could hold at the estimated cost of
    their lines, and MIN_FACT_CANDIDATES more."""
    spent = 0
    for n, (_, row, _) in enumerate(ranking.scored):
        spent += 1 + LINE_TOKENS_PER_LEXEME * row.doc_len
        if spent > budget_tokens:
            return n + MIN_FACT_CANDIDATES
    return len(ranking.scored)


def fit_entities(section: Section, room: Room, budget_tokens: int) -> None:
    """Entity lines in order while they fit their share of the budget; the rest dropped (over_budget)."""
    section.title_tokens = tokens_of(TITLES[section.name])
    share = min(int(budget_tokens * ENTITY_SHARE), ENTITY_MAX_TOKENS)
    for item in section.items:
        item.tokens = item.tokens or tokens_of(item.text)
        if room.left > 0 and section.tokens() + section.cost(item) <= share and admit(section, item, room):
            continue
        section.dropped.append({"id": item.id, "reason": "over_budget"})


def fit_documents(section: Section, room: Room, budget_tokens: int) -> None:
    """Document chunks in order within their share of the budget (KNOWLEDGE_CONTEXT_SHARE, at most what
    they all take, at most the room left after the notebooks), the first that does not fit cut to fill
    the share; the rest dropped (over_budget). The facts' room is the room left less the share reserved,
    not less what the chunks took, so it grows with the budget and the fill stays monotone."""
    if not section.items:
        return
    section.title_tokens = tokens_of(TITLES[section.name])
    for item in section.items:
        item.tokens = item.tokens or tokens_of(item.text)
    every = section.title_tokens + sum(item.tokens for item in section.items)
    reserved = max(0, min(int(budget_tokens * float(conf.CONTEXT_SHARE())), every, room.left))
    share = Room(reserved)
    for item in section.items:
        if item.id in section.placed:
            continue
        if admit(section, item, share):
            section.placed.add(item.id)
        else:
            _cut(section, item, share)
            break
    section.dropped += [{"id": i.id, "reason": "over_budget"} for i in section.items if i.id not in section.placed]
    room.left -= reserved


def admit(section: Section, item: Item, room: Room, keep: int = 0) -> bool:
    """Include `item` if it fits in the room less `keep` tokens."""
    if not item.tokens:
        item.tokens = tokens_of(item.text)
    cost = section.cost(item)
    if cost > room.left - keep:
        return False
    section.included.append(item)
    if item.day:
        section.days.add(item.day)
    room.left -= cost
    return True


def _absorb(section: Section, item: Item, room: Room) -> None:
    """Listed facts of this section whose words the newly listed `item` holds collapse into its line,
    and give back their tokens."""
    if section.name != "facts" or item.words.count(" ") + 1 < CONTAINED_MIN_WORDS:
        return
    held = set(room.held_by(item))
    for other in [i for i in section.included if i.id in held]:
        section.included.remove(other)
        room.unlist(other)
        room.left += other.tokens
        if other.day and all(i.day != other.day for i in section.included):
            section.days.discard(other.day)
            room.left += day_tokens(other.day)
        section.dropped.append({"id": other.id, "reason": "duplicate", "of": item.id})


def _fit_facts(pinned: Section, facts: Section, room: Room, ranking: Ranking, budget_tokens: int) -> None:
    """Pinned facts, then the fact sequence, each included while it fits (a ranked fact that a listed one
    already holds is collapsed into it); the first that does not fit is cut to the room left, and the
    fill stops there. A budget holds a prefix of one order, the same at every budget, so a larger budget
    holds every fact a smaller one did."""
    for section in (pinned, facts):
        section.title_tokens = tokens_of(TITLES[section.name])
    offered = itertools.chain(((pinned, i) for i in pinned.items), ((facts, i) for i in facts.sequence))
    for section, item in offered:
        if item.id in section.placed:
            continue
        rendered(item)
        same = room.duplicate_of(item) if section is facts else None
        if same is not None:
            section.placed.add(item.id)
            section.dropped.append({"id": item.id, "reason": "duplicate", "of": same})
        elif admit(section, item, room):
            section.placed.add(item.id)
            _absorb(section, item, room)
            room.list(item)
        else:
            _cut(section, item, room)
            break
    pinned.dropped += [{"id": i.id, "reason": "over_budget"} for i in pinned.items if i.id not in pinned.placed]
    # The ranked facts the block does not hold, as far as the block could have reached.
    reach = max(_fact_candidates(ranking, budget_tokens), len(facts.placed) + MIN_FACT_CANDIDATES)
    for _, row, _ in ranking.scored[:reach]:
        if str(row.id) not in facts.placed:
            facts.dropped.append({"id": str(row.id), "reason": "over_budget"})


def _cut(section: Section, item: Item, room: Room) -> None:
    """The first fact that does not fit, cut to fill the room left: its note or quote mark whole, then
    as much of its text as fits and a mark where it was cut (listed in the section's `truncated`).
    Nothing when less than MIN_CUT_TOKENS of its text would show."""
    extra = section.cost(item) - item.tokens  # the title, a new day's line
    allowed = room.left - extra
    body = item.text[len(item.lead) :].rstrip("\n")
    limit = allowed - tokens_of(item.lead + _CUT_MARK + "\n")
    while limit >= MIN_CUT_TOKENS:
        text = item.lead + truncate_to_tokens(body, limit).rstrip() + _CUT_MARK + "\n"
        tokens = count_tokens(text)
        if tokens <= allowed:
            item.text, item.tokens = text, tokens
            room.left -= section.cost(item)
            section.included.append(item)
            if item.day:
                section.days.add(item.day)
            section.placed.add(item.id)
            section.truncated.append(item.id)
            return
        limit -= tokens - allowed


def _fit_notebook(section: Section, item: Item, room: Room, budget_tokens: int, warnings: list[str]) -> None:
    """Notebooks are cut, never left out: the reader is told, in the block and the response."""
    if room.left - section.title_tokens <= 1:
        section.dropped.append({"id": item.id, "reason": "over_budget"})
        if section.name == "notebook":
            warnings.append(f"The notebook does not fit a budget of {budget_tokens} tokens at all.")
        return
    room_for_text = room.left - section.title_tokens
    limit = room_for_text - 1
    while True:
        item.text = truncate_to_tokens(item.text, limit).rstrip() + "\n"
        item.tokens = count_tokens(item.text)
        if item.tokens <= room_for_text or limit <= 0:
            break
        limit -= item.tokens - room_for_text
    if item.tokens <= room_for_text:
        section.included.append(item)
        section.truncated.append(item.id)
        room.left -= item.tokens + section.title_tokens
    else:
        section.dropped.append({"id": item.id, "reason": "over_budget"})
    warnings.append(
        f"The {section.name.replace('_', ' ')} does not fit the budget of {budget_tokens} tokens; it was truncated."
    )


def _fit_section(section: Section, room: Room, budget_tokens: int, warnings: list[str]) -> None:
    section.title_tokens = tokens_of(TITLES[section.name])
    for item in section.items:
        if room.left > 0 and admit(section, item, room):
            continue
        if section.name in NOTEBOOK_SECTIONS:
            _fit_notebook(section, item, room, budget_tokens, warnings)
        else:
            section.dropped.append({"id": item.id, "reason": "over_budget"})


def fit_sections(sections: list[Section], ranking: Ranking, budget_tokens: int, warnings: list[str]) -> Room:
    overhead = fence_tokens()
    room = Room(budget_tokens - overhead)
    if room.left <= 0:
        warnings.append(
            f"A budget of {budget_tokens} tokens cannot hold the fence around the block "
            f"({overhead} tokens); nothing was included."
        )
    by_name = {s.name: s for s in sections}
    for section in sections:
        if section.name == "pinned":
            # The entity lines' small share first (it grows with the budget, never shrinks, so the facts'
            # room does too and the fill stays monotone), then pinned and ranked facts as one prefix.
            fit_entities(by_name["entities"], room, budget_tokens)
            fit_documents(by_name["documents"], room, budget_tokens)
            _fit_facts(section, by_name["facts"], room, ranking, budget_tokens)
        elif section.name not in ("facts", "entities", "documents"):
            _fit_section(section, room, budget_tokens, warnings)
    return room
