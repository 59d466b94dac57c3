"""Who "her" and "him" are in a message that named one relative of that gender ("My sister Ana lives in
Porto and I visit her every summer" → "the user visits Ana every summer"): a fact that says "her" means
nothing once it stands alone in memory. A pronoun stays as it was when the message named no relative of
its gender, or more than one."""

from __future__ import annotations

import re

from memory_admin.services.entities import SELF_NAME, RelationDraft

_FEMALE = frozenset("girlfriend wife fiancee sister mother daughter aunt niece grandmother".split())
_MALE = frozenset("boyfriend husband fiance brother father son uncle nephew grandfather".split())
# After an object "her" ("visit her every summer", "call her on Sundays", "miss her."); before anything
# else "her" is a possessive ("her garden").
_AFTER_OBJECT = frozenset(
    """every each on at in to for with about from a an the last next this that again often sometimes when
    because and but or so if as since until yesterday today tonight tomorrow soon now more less lots
    twice once""".split()
)
_PRONOUN = re.compile(r"\b(her|him|his)\b(\s+([\w']+))?", re.I)


def relatives(relations: tuple[RelationDraft, ...]) -> dict[str, set[str]]:
    """{"female": names, "male": names} of the relatives the relations name ("Ana" sister_of the user)."""
    out: dict[str, set[str]] = {"female": set(), "male": set()}
    for relation in relations:
        kin = relation.type.removesuffix("_of")
        if relation.object != SELF_NAME:
            continue
        if kin in _FEMALE:
            out["female"].add(relation.subject)
        elif kin in _MALE:
            out["male"].add(relation.subject)
    return out


def resolved(clause: str, named: dict[str, set[str]]) -> str:
    """The clause with "her", "him" and "his" written as the one relative of that gender named before."""

    def name(match: re.Match) -> str:
        word, follows = match.group(1).lower(), (match.group(3) or "").lower()
        people = named["female" if word == "her" else "male"]
        if len(people) != 1:
            return match.group(0)
        (person,) = people
        possessive = word == "his" or (word == "her" and follows and follows not in _AFTER_OBJECT)
        return (f"{person}'s" if possessive else person) + (match.group(2) or "")

    return _PRONOUN.sub(name, clause)
