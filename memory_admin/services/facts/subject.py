"""Who a statement is about: the memory user, however a writer names them.

The extractor writes "The user prefers neovim over VS Code."; an agent writes "Dana prefers neovim"; the
user said "I prefer neovim". The write path compares statements about the user in one spelling (`about`:
the user's names and the first person become "the user") and as a set of content words (`claim`), so the
three meet: deduplicated, merged, or judged against each other."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory_admin.models import Fact, MemoryUser
from memory_admin.services.judge import NEGATIONS, stem

USER = "the user"
# The slot where the extractor keeps the user's name ("The user's name is Dana.").
NAME_KEY = "user.name"
_NAME_FACT = re.compile(r"\bname is ([A-Z][\w'-]+(?:\s+[A-Z][\w'-]+){0,2})")

# First person, as the user would say it (case matters for "I"; "my"/"me" in any case).
_FIRST_PERSON: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bI(?:'m| am)\b"), "the user is"),
    (re.compile(r"\bI(?:'ve| have)\b"), "the user has"),
    (re.compile(r"\bI(?:'ll| will)\b"), "the user will"),
    (re.compile(r"\bI'd\b"), "the user would"),
    (re.compile(r"\bI\b"), USER),
    (re.compile(r"\b(?:my|mine)\b", re.I), "the user's"),
    (re.compile(r"\b(?:me|myself)\b", re.I), USER),
)
_THE_USER = re.compile(r"\b(?:the\s+)?user\b", re.I)
_THE_USER_FIRST = re.compile(r"\s*(?:the\s+)?user\b", re.I)
_FIRST_PERSON_FIRST = re.compile(r"\s*(?:I\b|(?:my|mine|me)\b)", re.I)
# A name the user goes by: a word of letters (an id such as `u_123` names nobody in a sentence).
_NAME_LIKE = re.compile(r"[A-Za-z][A-Za-z'-]{1,39}")
_WORD = re.compile(r"[a-z0-9+#]+")
# Words that say nothing of the claim itself: articles, the subject, the copula, fillers. Negations
# stay (so "does not like" never equals "likes").
_FILLER = frozenset(
    "a an the user user's users s is are am was were be been being to of and or in on at for with as by "
    "from that this it its their they he she his her him also really very now currently still usually "
    "mostly always just does do did has have had will would".split()
)
# Words that never name the user: the filler and the first person.
_NOT_A_NAME = _FILLER | {"i", "me", "my", "mine", "myself"}
# The user is the statement's subject ("the user works at ..."), or owns it ("the user's editor is ...";
# then only the same claim is the same statement: "the user's brother works at Acme" is about the brother).
_SUBJECT_FIRST = re.compile(r"^the user('s)?\b")


@dataclass(frozen=True)
class UserSubject:
    """The names of one memory user, for `about` and `claim`."""

    names: tuple[str, ...]

    @classmethod
    def of(cls, memory_user: MemoryUser, *, known_name: str | None) -> UserSubject:
        """The user's display name (and its first word), the user id when it reads as a name, and the
        name their active `user.name` fact gives (`known_name`: its content, "The user's name is Dana.")."""
        candidates = [memory_user.display_name, memory_user.external_id]
        if memory_user.display_name:
            candidates.append(memory_user.display_name.split()[0])
        match = _NAME_FACT.search(known_name or "")
        if match:
            candidates += [match.group(1), match.group(1).split()[0]]
        names = {n.strip() for n in candidates if n and _NAME_LIKE.fullmatch(n.split()[0])}
        # A name made of the words a statement is spelled with ("user", "The", "Will") would rewrite
        # every statement: "user" turns "the user prefers" into "the the user prefers", about no one.
        names = {n for n in names if not set(n.lower().split()) <= _NOT_A_NAME}
        return cls(tuple(sorted(names, key=len, reverse=True)))

    @staticmethod
    def known_name(memory_user_id: int) -> str | None:
        """The content of the user's active `user.name` fact (the write path reads it with the user's state)."""
        return (
            Fact.objects.filter(memory_user_id=memory_user_id, key=NAME_KEY, status=Fact.Status.ACTIVE)
            .values_list("content", flat=True)
            .first()
        )

    def about(self, text: str) -> str:
        """The statement with the user named one way: "the user"."""
        for name in self.names:
            # As written in a sentence: with a capital first (the id "may" names "May", never "may"), or
            # as a person spelled it ("de Vries"); and not the first word of a longer name ("Dana Jones"
            # is not the user Dana).
            spellings = {name[0].upper() + name[1:]} | ({name} if name != name.lower() else set())
            spelled = "|".join(re.escape(n) for n in sorted(spellings))
            text = re.sub(rf"\b(?:{spelled})\b(?!\s+[A-Z][a-z])", USER, text)
        for pattern, replacement in _FIRST_PERSON:
            text = pattern.sub(replacement, text)
        text = _THE_USER.sub(USER, text)
        return re.sub(r"\s+", " ", text).strip()

    @staticmethod
    def spelling(text: str) -> str:
        """How the statement names its subject: "the user", the first person ("I"), or otherwise (a name)."""
        if _THE_USER_FIRST.match(text):
            return USER
        if _FIRST_PERSON_FIRST.match(text):
            return "I"
        return "name"

    def claim(self, text: str) -> Claim | None:
        """What the statement says of the user, as a set of content words; None when the user is neither
        its subject nor its owner (it is about someone or something else, or only mentions them)."""
        about = self.about(text).lower()
        match = _SUBJECT_FIRST.match(about)
        if match is None:
            return None
        words = frozenset(stem(w) for w in _WORD.findall(about) if w not in _FILLER)
        return Claim(words, possessive=bool(match.group(1))) if words else None


@dataclass(frozen=True)
class Claim:
    """The content words of a statement about the user; `possessive`: about something of theirs."""

    words: frozenset[str]
    possessive: bool = False

    def same(self, other: Claim) -> bool:
        return self.words == other.words and self.possessive == other.possessive

    def within(self, other: Claim) -> bool:
        """Everything this says, `other` says too, and more (both with the user as their subject)."""
        if self.possessive or other.possessive or len(self.words) < 2 or not self.words < other.words:
            return False
        return not (other.words - self.words) & NEGATIONS  # "does not like X" says more, and the opposite
