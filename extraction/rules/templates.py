"""The first-person templates of the offline extractor: one pattern per kind of statement ("I live in
Berlin"), the fact it becomes in the third person, the slot the write path keys it by, and what it says
about the entity graph (`clause_fact`)."""

from __future__ import annotations

import re

from memory_admin.services.entities import SELF_NAME, EntityMention, RelationDraft
from memory_admin.services.entity_kinds import kind_of

HEDGE = re.compile(
    r"\b(maybe|perhaps|probably|might|not sure|i think|i guess|i wonder|if i|would i|should i|"
    r"could i|do i|am i|can i|was wondering|hypothetically|imagine|pretend|let's say)\b",
    re.I,
)
_NAME_VALUE = r"([A-Z][\w'-]+(?:\s+[A-Z][\w'-]+){0,2})"
_VALUE = r"(.{2,160}?)"
_END = r"\s*[.!]?$"

# (pattern over one clause, category, kind, key, template). Templates use {0}, {1} for groups.
_RULES: list[tuple[re.Pattern[str], str, str, str | None, str]] = [
    (
        re.compile(rf"^(?:my name is|call me|i am called|i'm called)\s+{_NAME_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "user.name",
        "The user's name is {0}.",
    ),
    (
        re.compile(rf"^my timezone is\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "user.timezone",
        "The user's timezone is {0}.",
    ),
    (
        re.compile(rf"^i(?:'m| am) (?:based|located|headquartered) in\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "user.location",
        "The user is based in {0}.",
    ),
    (re.compile(rf"^i live in\s+{_VALUE}{_END}", re.I), "personal", "fact", "user.location", "The user lives in {0}."),
    (re.compile(rf"^i(?:'m| am) from\s+{_VALUE}{_END}", re.I), "personal", "fact", None, "The user is from {0}."),
    (
        re.compile(rf"^i(?:'m| am)? (?:currently |now |still )?(?:work|working) (?:at|for)\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "work.employer",
        "The user works at {0}.",
    ),
    (re.compile(rf"^i (?:manage|lead|run)\s+{_VALUE}{_END}", re.I), "project", "fact", None, "The user manages {0}."),
    (
        re.compile(rf"^i(?:'m| am)? (?:currently |now |still )?(?:work|working) on\s+{_VALUE}{_END}", re.I),
        "project",
        "fact",
        None,
        "The user works on {0}.",
    ),
    (
        re.compile(rf"^i(?:'m| am) (?:a|an)\s+{_VALUE}(?: at\s+(.{{2,80}}?))?{_END}", re.I),
        "personal",
        "fact",
        "work.role",
        "The user is a {0}.",
    ),
    (
        re.compile(rf"^my (?:job|role|title) is\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "work.role",
        "The user's role is {0}.",
    ),
    (
        re.compile(rf"^my (?:favou?rite)\s+([\w .+#-]{{2,40}}?)\s+is\s+{_VALUE}{_END}", re.I),
        "preference",
        "preference",
        None,
        "The user's favourite {0} is {1}.",
    ),
    (
        re.compile(rf"^i (?:really |strongly )?(prefer|like|love|enjoy|hate|dislike|avoid)\s+{_VALUE}{_END}", re.I),
        "preference",
        "preference",
        None,
        "The user {0}s {1}.",
    ),
    (
        re.compile(rf"^i (?:don't|do not) (like|use|want|enjoy)\s+{_VALUE}{_END}", re.I),
        "preference",
        "preference",
        None,
        "The user does not {0} {1}.",
    ),
    (
        re.compile(
            rf"^(?:i|we) (?:mostly |usually |always |mainly )?(?:use|am using|'m using|are using|'re using)\s+"
            rf"{_VALUE}{_END}",
            re.I,
        ),
        "technical",
        "fact",
        None,
        "The user uses {0}.",
    ),
    (
        re.compile(rf"^i(?:'ve| have)? (?:just |recently )?(?:moved|relocated) to\s+{_VALUE}{_END}", re.I),
        "personal",
        "fact",
        "user.location",
        "The user moved to {0}.",
    ),
    (
        re.compile(rf"^i (?:visited|went to|travell?ed to|flew to)\s+{_NAME_VALUE}(?:\s.*)?{_END}", re.I),
        "personal",
        "fact",
        None,
        "The user visited {0}.",
    ),
    (
        re.compile(
            rf"^i (?:write|code|program) (?:most |all |mostly )?(?:of )?(?:my )?(?:code )?in\s+{_VALUE}{_END}", re.I
        ),
        "technical",
        "fact",
        None,
        "The user writes code in {0}.",
    ),
    (
        re.compile(rf"^i (?:switched|moved|migrated) (?:from\s+(.{{2,60}}?)\s+)?to\s+{_VALUE}{_END}", re.I),
        "technical",
        "fact",
        None,
        "The user switched to {1}.",
    ),
    (
        re.compile(
            rf"^my (?:main |primary |preferred |favou?rite )?(editor|language|os|shell|ide|stack|laptop|setup) is\s+"
            rf"{_VALUE}{_END}",
            re.I,
        ),
        "technical",
        "fact",
        "tools.{0}",
        "The user's {0} is {1}.",
    ),
    (
        re.compile(rf"^i(?:'ve| have) decided to\s+{_VALUE}{_END}|^i decided to\s+{_VALUE}{_END}", re.I),
        "project",
        "decision",
        None,
        "The user decided to {0}.",
    ),
    (
        re.compile(rf"^i(?:'m| am) (?:planning|going|about) to\s+{_VALUE}{_END}|^i plan to\s+{_VALUE}{_END}", re.I),
        "project",
        "fact",
        None,
        "The user plans to {0}.",
    ),
    (re.compile(rf"^my (?:goal|plan) is to\s+{_VALUE}{_END}", re.I), "project", "fact", None, "The user plans to {0}."),
]

_PRONOUNS = [
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bour\b", re.I), "their"),
    (re.compile(r"\bwe\b", re.I), "they"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
    (re.compile(r"\bmyself\b", re.I), "themself"),
    (re.compile(r"\bme\b", re.I), "them"),
    (re.compile(r"\bI'm\b"), "they are"),
    (re.compile(r"\bI've\b"), "they have"),
    (re.compile(r"\bI\b"), "they"),
]
_VERB_S = {
    "prefer": "prefers",
    "like": "likes",
    "love": "loves",
    "enjoy": "enjoys",
    "hate": "hates",
    "dislike": "dislikes",
    "avoid": "avoids",
}


def _third_person(text: str) -> str:
    for pattern, repl in _PRONOUNS:
        text = pattern.sub(repl, text)
    return text.strip().rstrip(".,;:")


def clause_fact(clause: str) -> tuple[str, str, str, str | None, tuple] | None:
    """(content, category, kind, key, (entities, relations)) of the first rule that matches `clause`;
    None when none matches or the words it captured are too thin to state a fact."""
    for pattern, category, kind, key, template in _RULES:
        m = pattern.match(clause)
        if not m:
            continue
        groups = [g for g in m.groups() if g is not None]
        if not groups:
            return None
        guard = _GUARDS.get(template)
        if guard is not None and not guard(groups):
            continue  # not this rule's kind of statement ("I moved to Neovim"): the next rule may fit
        if template.startswith("The user {0}s"):
            groups[0] = _VERB_S.get(groups[0].lower(), groups[0].lower())[:-1]
        values = [_third_person(g) for g in groups]
        if template == "The user switched to {1}." and len(values) == 1:
            values = ["", values[0]]
        if any(len(v) < 2 for v in values if v) and template.count("{") == 1:
            return None
        content = re.sub(r"\s+", " ", template.format(*values)).strip()
        slot = key.format(*[v.lower() for v in values]) if key and "{" in key else key
        return content, category, kind, slot, _graph(template, values)
    return None


# What a rule's fact says about the graph: template → (relation type, the object's type, its value's
# index), the relation going from the user (the fact's subject) to the object. Preferences take the
# relation type from their verb ({0}).
_RELATIONS: dict[str, tuple[str, str, int]] = {
    "The user moved to {0}.": ("moved_to", "place", 0),
    "The user visited {0}.": ("visited", "place", 0),
    "The user writes code in {0}.": ("uses", "tool", 0),
    "The user is a {0}.": ("works_at", "company", 1),  # "I'm a data engineer at Acme"
    "The user is based in {0}.": ("lives_in", "place", 0),
    "The user lives in {0}.": ("lives_in", "place", 0),
    "The user is from {0}.": ("is_from", "place", 0),
    "The user works at {0}.": ("works_at", "company", 0),
    "The user manages {0}.": ("manages", "", 0),
    "The user works on {0}.": ("works_on", "project", 0),
    "The user {0}s {1}.": ("{0}s", "", 1),
    "The user's favourite {0} is {1}.": ("prefers", "", 1),
    "The user uses {0}.": ("uses", "tool", 0),
    "The user switched to {1}.": ("uses", "tool", 1),
    "The user's {0} is {1}.": ("uses", "tool", 1),
}


def not_a_tool(groups: list[str]) -> bool:
    return kind_of(_WHEN.sub("", groups[-1]).strip(" .,;:!")) != "tool"


def _a_name(groups: list[str]) -> bool:
    return groups[0][:1].isupper()


# Rules that hold only for some values: the template → whether the captured groups fit it.
_GUARDS = {"The user moved to {0}.": not_a_tool, "The user visited {0}.": _a_name}
_WHEN = re.compile(r"\s+(?:now|these days|nowadays|currently|at the moment|right now|today)$", re.I)
_MAX_NAME_WORDS = 5
_NAME_RUN = re.compile(r"[^\W\d_][\w'’&.+#-]*(?:\s+(?:[A-Z0-9][\w'’&.+#-]*|(?:of|de|la|and)\b))*")
USER_SUBJECT = EntityMention(SELF_NAME, "person", "subject")


def _entity_name(value: str) -> str | None:
    """The name in a captured value ("Globex now" → "Globex"); None for a phrase rather than a name."""
    name = _WHEN.sub("", value).strip(" .,;:!\"'")
    if name[:1].isupper():  # a name, then words about it: "Berlin last year" → "Berlin"
        name = _NAME_RUN.match(name).group()
        name = re.sub(r"(?:\s+(?:of|de|la|and))+$", "", name)
    return name if 2 <= len(name) and len(name.split()) <= _MAX_NAME_WORDS else None


def _graph(template: str, values: list[str]) -> tuple[tuple[EntityMention, ...], tuple[RelationDraft, ...]]:
    if template == "The user's name is {0}.":
        return (EntityMention(values[0], "person", "subject", aliases=(SELF_NAME,)),), ()
    if template not in _RELATIONS:
        return (USER_SUBJECT,), ()
    relation, object_type, at = _RELATIONS[template]
    name = _entity_name(values[at]) if at < len(values) and values[at] else None
    if name is None:
        return (USER_SUBJECT,), ()
    kind = relation.format(*values) if "{" in relation else relation
    if not object_type:  # the rule does not say what the object is: its name and neighbours may
        object_type = kind_of(name, "")
    return (USER_SUBJECT, EntityMention(name, object_type, "object")), (RelationDraft(SELF_NAME, kind, name),)
