"""The query's keywords, widened (SPEC §6, issue 33): the words a fact may use for what the query says.

Postgres' english stemmer folds regular forms ("fixing", "fixed" -> "fix") but not irregular ones
("broken" stays "broken", a fact says "broke down"), and it knows no chat abbreviations ("gf"). The
keyword component therefore matches the query's words plus:

- ABBREVIATIONS: a small, closed map of the chat abbreviations people write to an assistant, each to the
  words it stands for ("gf" -> "girlfriend"); the abbreviation itself stays (a fact may use it too);
- IRREGULAR: the forms of common irregular verbs, each form of a family bringing the others ("broken" ->
  "break", "broke"), so that a question in one tense finds a statement in another.

Only the keywords are widened: the vector component compares the question as written (an embedding knows
these forms already). A widened word is one more lexeme of the query, weighted by its own IDF over the
candidates like any other, so a rare form does not crowd out the words the question holds.
"""

from __future__ import annotations

from memory_admin.retrieval.names import WORD

# Chat abbreviations -> the words they stand for. Closed and small on purpose: an entry that is also an
# ordinary word ("mum", "bro" in a name) would widen questions that never meant it.
ABBREVIATIONS: dict[str, str] = {
    "gf": "girlfriend",
    "bf": "boyfriend",
    "bff": "best friend",
    "bday": "birthday",
    "hubby": "husband",
    "bro": "brother",
    "sis": "sister",
    "mom": "mother",
    "mum": "mother",
    "dad": "father",
    "grandma": "grandmother",
    "grandpa": "grandfather",
    "kid": "child",
    "kids": "children",
    "pic": "picture photo",
    "pics": "pictures photos",
    "vacay": "vacation",
    "uni": "university",
    "appt": "appointment",
    "convo": "conversation",
    "fav": "favourite favorite",
    "fave": "favourite favorite",
    "info": "information",
    "hw": "homework",
}

# Irregular verbs: each family's forms (base, past, participle); any form found brings the others.
_FAMILIES = (
    "break broke broken",
    "buy bought",
    "bring brought",
    "build built",
    "catch caught",
    "choose chose chosen",
    "draw drew drawn",
    "drink drank drunk",
    "drive drove driven",
    "eat ate eaten",
    "fall fell fallen",
    "feel felt",
    "fight fought",
    "find found",
    "fly flew flown",
    "forget forgot forgotten",
    "give gave given",
    "go went gone",
    "grow grew grown",
    "hear heard",
    "hold held",
    "keep kept",
    "know knew known",
    "leave left",
    "lose lost",
    "make made",
    "meet met",
    "pay paid",
    "ride rode ridden",
    "run ran",
    "say said",
    "see saw seen",
    "sell sold",
    "send sent",
    "sing sang sung",
    "sleep slept",
    "speak spoke spoken",
    "spend spent",
    "steal stole stolen",
    "swim swam swum",
    "take took taken",
    "teach taught",
    "tell told",
    "think thought",
    "throw threw thrown",
    "wear wore worn",
    "win won",
    "write wrote written",
)
IRREGULAR: dict[str, tuple[str, ...]] = {
    form: tuple(other for other in family.split() if other != form) for family in _FAMILIES for form in family.split()
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
