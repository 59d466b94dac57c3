"""The query's keywords, widened (SPEC §6, issue 33): the words a fact may use for what the query says.

Postgres' english stemmer folds regular forms ("fixing", "fixed" -> "fix") but not irregular ones
("broken" stays "broken", a fact says "broke down"), and it knows no chat abbreviations ("gf"). The
keyword component therefore matches the query's words plus:

- ABBREVIATIONS: a small, closed map of the chat abbreviations people write to an assistant, each to the
  words it stands for ("gf" -> "girlfriend"); the abbreviation itself stays (a fact may use it too);
- IRREGULAR: irregular participles a question uses as adjectives, each bringing its verb's other forms
  ("broken" -> "broke", "break"), so that "what was broken?" finds "it broke down".

Only the keywords are widened: the vector component compares the question as written (an embedding knows
these forms already). A widened word is one more lexeme of the query, weighted by its own IDF over the
candidates like any other, so a rare form does not crowd out the words the question holds.
"""

from __future__ import annotations

from memory_admin.retrieval.names import WORD

# Chat abbreviations -> the words they stand for. Closed and small on purpose: an entry that is also an
# ordinary word ("kids", "mom") would add a second, equally weighted keyword to questions that match well
# already (LoCoMo dev: "kids" -> "children" lost "What do Melanie's kids like?").
ABBREVIATIONS: dict[str, str] = {
    "gf": "girlfriend",
    "bf": "boyfriend",
    "bff": "best friend",
    "bday": "birthday",
    "hubby": "husband",
    "bro": "brother",
    "sis": "sister",
    "pic": "picture photo",
    "pics": "pictures photos",
    "vacay": "vacation",
    "uni": "university",
    "appt": "appointment",
    "convo": "conversation",
    "fav": "favourite favorite",
    "fave": "favourite favorite",
    "hw": "homework",
}

# Irregular participles, which questions use as adjectives ("what was broken?", "the stolen bike") where
# statements tell what happened ("it broke down", "someone stole it"): each brings its verb's past and
# base. Only the participles: widening every form ("win" -> "won", "make" -> "made") adds a common,
# equally weighted keyword to questions that match well as written (LoCoMo dev: R@10 fell).
IRREGULAR: dict[str, tuple[str, ...]] = {
    "broken": ("broke", "break"),
    "stolen": ("stole", "steal"),
    "lost": ("lose",),
    "forgotten": ("forgot", "forget"),
    "torn": ("tore", "tear"),
    "frozen": ("froze", "freeze"),
    "bitten": ("bit", "bite"),
    "hidden": ("hid", "hide"),
    "shaken": ("shook", "shake"),
    "spoken": ("spoke", "speak"),
    "chosen": ("chose", "choose"),
    "written": ("wrote", "write"),
    "driven": ("drove", "drive"),
    "ridden": ("rode", "ride"),
    "eaten": ("ate", "eat"),
    "fallen": ("fell", "fall"),
    "given": ("gave", "give"),
    "taken": ("took", "take"),
    "thrown": ("threw", "throw"),
    "worn": ("wore", "wear"),
    "grown": ("grew", "grow"),
    "flown": ("flew", "fly"),
    "sold": ("sell",),
    "bought": ("buy",),
    "built": ("build",),
}
# Words added to one query at most: the keyword lexemes are bounded (candidates.MAX_LEXEMES).
MAX_ADDED = 12


def widened(words: list[str]) -> list[str]:
    """The words the query's `words` (lowercased) bring beyond themselves, in order, without repeats."""
    seen = set(words)
    added: list[str] = []
    for word in words:
        for other in (*ABBREVIATIONS.get(word, "").split(), *IRREGULAR.get(word, ())):
            if other not in seen:
                seen.add(other)
                added.append(other)
    return added[:MAX_ADDED]


def keyword_text(query: str) -> str:
    """The text the keyword component matches: the query, then the words it brings (`widened`)."""
    added = widened([w.lower() for w in WORD.findall(query[:2000])])
    return f"{query} {' '.join(added)}" if added else query
