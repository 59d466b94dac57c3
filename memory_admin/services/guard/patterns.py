"""A feature's pattern, compiled to be read fast: a look-ahead on its first characters, or its leading word
boundaries checked in Python (see _Pattern). The same matches as the pattern as written."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Feature:
    name: str
    label: str  # what a person reading the quarantine reason is told
    weight: float
    pattern: _Pattern
    directive: bool = False  # an imperative form (sentence start, "please", "you must") adds IMPERATIVE_BONUS
    view: str = "low"  # low: folded and lower-cased; cased: folded, case kept; plain: not confusable-folded
    distinct: int = 1  # fires when the matches are of this many kinds (a role, a token)
    accept: Callable[[re.Match[str]], bool] | None = None  # a second look at a match, where a pattern can't


class _Pattern:
    """A feature's pattern. Python's engine skips ahead fast to where an alternation of literals can start,
    but not when the pattern opens with a word boundary (`\b(?:ignore|disregard…)`): for a pattern whose
    every alternative opens with one before a word character, `fast` is the pattern without them and
    the boundary is checked on each match (a word character before the match: not one, look again from
    the next character). Two to three times faster on prose, with the same matches."""

    __slots__ = ("exact", "fast")

    def __init__(self, exact: re.Pattern[str], fast: re.Pattern[str] | None):
        self.exact, self.fast = exact, fast

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        if self.fast is None:
            yield from self.exact.finditer(text)
            return
        search, pos = self.fast.search, 0
        while (m := search(text, pos)) is not None:
            start = m.start()
            if start and _is_word_char(text[start - 1]):
                pos = start + 1
                continue
            yield m
            pos = max(m.end(), start + 1)

    def search(self, text: str) -> re.Match[str] | None:
        return next(self.finditer(text), None)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"  # what `\w` matches in a str pattern


def _rx(pattern: str, flags: int = 0) -> _Pattern:
    """Compile a feature's pattern (see _Pattern); one that does not open with word boundaries is led by
    a look-ahead on its possible first characters."""
    fast = None
    alternatives = _top_level_alternatives(pattern)
    if all(alt.startswith(r"\b") for alt in alternatives):
        rests = [alt[2:] for alt in alternatives]
        joined = "|".join(rests)
        if all(_opens_with_word_chars(rest, flags) for rest in rests) and _skips_ahead(joined, flags):
            fast = re.compile(joined, flags | re.M)
    return _Pattern(re.compile(_led(pattern, flags), flags | re.M), fast)


def _led(pattern: str, flags: int) -> str:
    """`pattern` led by a look-ahead on its possible first characters (when they are known and few)."""
    try:
        first, nullable = _first_chars(re._parser.parse(pattern, flags))  # noqa: SLF001 - see _first_chars
    except Exception:  # noqa: BLE001 - the look-ahead is an optimisation only
        return pattern
    if first and not nullable and len(first) <= 64:
        return "(?=[" + "".join(re.escape(ch) for ch in sorted(first)) + "])(?:" + pattern + ")"
    return pattern


def _skips_ahead(pattern: str, flags: int) -> bool:
    """Whether the engine can skip ahead to where `pattern` may start: it opens with a literal, a class,
    or an alternation whose every branch opens with a literal (CPython's `_get_charset_prefix`). Without
    that, a pattern with its boundary is the faster: it fails at once inside a word."""
    from re import _constants as c  # noqa: PLC0415

    try:
        items = list(re._parser.parse(pattern, flags))  # noqa: SLF001 - see _first_chars
    except Exception:  # noqa: BLE001
        return False
    while items and items[0][0] is c.SUBPATTERN:
        items = list(items[0][1][3])
    if not items:
        return False
    op, av = items[0]
    if op in (c.LITERAL, c.IN):
        return True
    return op is c.BRANCH and all(alt and list(alt)[0][0] is c.LITERAL for alt in av[1])


def _opens_with_word_chars(pattern: str, flags: int) -> bool:
    try:
        first, nullable = _first_chars(re._parser.parse(pattern, flags))  # noqa: SLF001 - see _first_chars
    except Exception:  # noqa: BLE001
        return False
    return bool(first) and not nullable and all(_is_word_char(ch) for ch in first)


def _top_level_alternatives(pattern: str) -> list[str]:
    """`pattern` split at the `|` that are outside any group or character class."""
    parts, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1  # a `]` first in a class is a literal
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def _first_chars(items: Iterable[tuple[Any, Any]]) -> tuple[set[str] | None, bool]:
    """(the characters a match of the parsed pattern `items` can start with, or None if any; whether it can
    match the empty string). Reads the parse tree of `re._parser` (stable since 3.11): when the tree has an
    unknown shape, the answer is None and the pattern is compiled as written."""
    chars: set[str] = set()
    for op, av in items:
        sub, nullable = _item_first_chars(op, av)
        if sub is None:
            return None, False
        chars |= sub
        if not nullable:
            return chars, False
    return chars, True


def _item_first_chars(op: Any, av: Any) -> tuple[set[str] | None, bool]:
    """`_first_chars` of one node of the parse tree (an assertion matches empty and consumes nothing)."""
    from re import _constants as c  # noqa: PLC0415

    if op in (c.AT, c.ASSERT, c.ASSERT_NOT):
        return set(), True
    if op is c.LITERAL:
        return {chr(av)}, False
    if op is c.IN:
        return _class_chars(av), False
    if op is c.BRANCH:
        return _branch_chars(av[1])
    if op is c.SUBPATTERN:
        return _first_chars(av[3])
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
        sub, nullable = _first_chars(av[2])
        return sub, nullable or av[0] == 0
    if op is c.ATOMIC_GROUP:
        return _first_chars(av)
    return None, False


def _class_chars(members: Any) -> set[str] | None:
    """The characters of a character class: literals and short ranges only, else None (any)."""
    from re import _constants as c  # noqa: PLC0415

    chars: set[str] = set()
    for kind, value in members:
        if kind is c.LITERAL:
            chars.add(chr(value))
        elif kind is c.RANGE and value[1] - value[0] < 64:
            chars.update(chr(x) for x in range(value[0], value[1] + 1))
        else:
            return None
    return chars


def _branch_chars(alternatives: Iterable[Any]) -> tuple[set[str] | None, bool]:
    chars: set[str] = set()
    nullable = False
    for alternative in alternatives:
        sub, sub_nullable = _first_chars(alternative)
        if sub is None:
            return None, False
        chars |= sub
        nullable |= sub_nullable
    return chars, nullable
