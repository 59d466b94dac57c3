"""Secrets with a shape of their own: prefixed tokens (API keys, JWTs), private keys, AWS secret keys."""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from memory_admin.services.pii.findings import _Collector
from memory_admin.textnorm import Mapped, check_budget

_ALNUM = "A-Za-z0-9"


def _looks_random(body: str, *, min_len: int = 16) -> bool:
    """A token body drawn at random (digits and both cases), not words glued together."""
    if body.isalpha() or body.islower() or body.isupper():
        return False  # no digit, or a single case: decided without the slower tests below
    letters = re.sub(r"[^A-Za-z0-9]", "", body)
    if len(letters) < min_len:
        return False
    if not (re.search(r"\d", letters) and re.search(r"[a-z]", letters) and re.search(r"[A-Z]", letters)):
        return False
    return _wordiness(letters) < 0.45


def _wordiness(s: str) -> float:
    """Share of characters in runs of four or more lowercase letters (prose and CamelCase are full of
    them; a random token has few)."""
    return sum(len(m) for m in re.findall(r"[a-z]{4,}", s)) / max(1, len(s))


def _transitions(s: str) -> float:
    """Share of neighbouring characters of different classes (upper, lower, digit, other): about 0.64
    for a random base64 token, under 0.5 for CamelCase words."""

    def cls(c: str) -> int:
        return 0 if c.isupper() else 1 if c.islower() else 2 if c.isdigit() else 3

    return sum(cls(a) != cls(b) for a, b in zip(s, s[1:], strict=False)) / max(1, len(s) - 1)


def _entropy(s: str) -> float:
    counts = Counter(s)
    return -sum(n / len(s) * math.log2(n / len(s)) for n in counts.values())


@dataclass(frozen=True)
class _Prefixed:
    """A secret with a distinctive prefix. `canonical` is the prefix's exact spelling; a match in
    another case, or glued to a preceding letter or digit, needs a random-looking body."""

    kind: str
    pattern: re.Pattern[str]
    compact_pattern: re.Pattern[str]  # for the form without whitespace, where the next word is glued on
    canonical: tuple[str, ...]


def _p(kind: str, prefix: str, body: str, canonical: tuple[str, ...], tail: str = ""):
    return _Prefixed(
        kind,
        re.compile(f"(?P<prefix>{prefix})(?P<body>{body}){tail}", re.I),
        re.compile(f"(?P<prefix>{prefix})(?P<body>{body})", re.I),
        canonical,
    )


# Bodies are read to MAX_BODY characters: an unbounded body read from every occurrence of a prefix to
# the end of its run makes `sk-sk-sk-…` cost the square of its length. A token longer than that is
# judged by its first MAX_BODY characters and cut out whole (`_RunEnds`).
MAX_BODY = 256
_PREFIXED = [
    _p("jwt", "eyJ", r"[A-Za-z0-9_-]{5}", ("eyJ",)),  # found on runs (`_jwt_end`), not by this pattern
    _p(
        "stripe_key",
        r"(?:sk|rk)_(?:live|test)_",
        rf"[A-Za-z0-9]{{16,{MAX_BODY}}}",
        ("sk_live_", "rk_live_", "sk_test_", "rk_test_"),
    ),
    _p(
        "openai_key",
        r"sk-(?:proj-|ant-(?:api\d\d-)?|live-|test-|svcacct-|admin-)?",
        rf"[A-Za-z0-9_-]{{16,{MAX_BODY}}}",
        ("sk-",),
    ),
    _p(
        "github_token",
        r"gh[pousr]_|github_pat_",
        rf"[A-Za-z0-9_]{{20,{MAX_BODY}}}",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _p("aws_access_key", r"AKIA|ASIA", r"[0-9A-Z]{16}", ("AKIA", "ASIA"), tail="(?![0-9A-Za-z])"),
    _p(
        "slack_token",
        r"xox[abposr]-",
        rf"[A-Za-z0-9-]{{10,{MAX_BODY}}}",
        ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-"),
    ),
    _p("google_api_key", "AIza", r"[0-9A-Za-z_-]{35}", ("AIza",)),
]
# A run of dashes is entered at its first dash only (`(?<!-)`, possessive): read from every dash of a
# long run, it would be read to its end each time.
_PRIVATE_KEY = re.compile(
    r"(?<!-)-{2,}+\s?BEGIN\b[^\n-]{0,40}?PRIVATE\s?KEY[^\n-]{0,12}-{2,}"
    r"(?:.*?(?<!-)-{2,}+\s?END\b[^\n-]{0,40}?PRIVATE\s?KEY[^\n-]{0,12}-{2,}|.*)",
    re.S | re.I,
)
# Cheap pre-checks: the form without whitespace is scanned only when some prefix occurs in it.
# (Matched on the lower-cased text: a case-insensitive alternation is several times slower.)
_ANY_PREFIX = re.compile(r"sk-|[sr]k_|gh[pousr]_|github_pat_|akia|asia|xox|eyj|aiza")
_ANY_PREFIX_I = re.compile(_ANY_PREFIX.pattern, re.I)
# The one pattern each prefix can open, by the prefix's first three characters (lower case).
_SPEC_FOR_PREFIX = {
    start: next(spec for spec in _PREFIXED if spec.kind == kind)
    for kind, starts in (
        ("openai_key", ("sk-",)),
        ("stripe_key", ("sk_", "rk_")),
        ("github_token", ("ghp", "gho", "ghu", "ghs", "ghr", "git")),
        ("aws_access_key", ("aki", "asi")),
        ("slack_token", ("xox",)),
        ("jwt", ("eyj",)),
        ("google_api_key", ("aiz",)),
    )
    for start in starts
}
_PRIVATE_KEY_COMPACT = re.compile(r"(?<!-)-{2,}+BEGIN[A-Z0-9]{0,40}?PRIVATEKEY[A-Z]{0,12}-{2,}.*", re.S | re.I)

# A token may follow `=` (`aws_secret_access_key=…` in a credentials or env file): `=` ends a run of
# base64 (padding) but never opens one.
_B64_40 = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_B64_LONG = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{42,120}(?![A-Za-z0-9/+=])")
_AWS_CONTEXT = re.compile(r"(?i)aws|secret|access.?key")
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{24,}={0,2}")
_B64_PARTS = (re.compile(r"[A-Za-z0-9+/]{24,}={0,2}"), re.compile(r"[A-Za-z0-9]{24,}={0,2}"))


def _verdict(spec: _Prefixed, m: re.Match[str], text: str, *, compact: bool) -> str | None:
    """ "strict": the prefix as issued, standing on its own; "lenient": glued to a word, in another
    case, or found only once whitespace is removed, with a random-looking body; None: not a secret."""
    prefix, body = m.group("prefix"), m.group("body")
    if spec.kind == "jwt":
        return "strict"
    glued = m.start() > 0 and text[m.start() - 1].isalnum()
    if spec.kind == "aws_access_key":
        if prefix in spec.canonical and body.isupper() and not glued and not compact:
            return "strict"
        digits = sum(c.isdigit() for c in body)
        return "lenient" if digits >= 2 and (body.isupper() or body.islower() or body.isdigit()) else None
    if prefix in spec.canonical and not glued and not compact:
        return "strict"
    if spec.kind == "openai_key" and prefix.lower() != "sk-" and not compact:
        return "strict"  # sk-proj-, sk-ant-...: the long prefix is distinctive enough
    if spec.kind == "openai_key" and prefix.lower() == "sk-" and m.start() > 0 and text[m.start() - 1].isalpha():
        # "task-…", "risk-…", "desk-…": a word ending in "sk" before a random id is common; only a
        # body as long as a real key's (48) counts then.
        return "lenient" if len(body) >= 40 and _looks_random(body) else None
    return "lenient" if _looks_random(body) else None


_WORD_PIECE = re.compile(r"[A-Z]?[a-z]+[.,;:!?)\]'\"]*")


def _trim_words(start: int, end: int, piece_starts: list[int], text: str) -> int:
    """On the form without whitespace, where a match runs on over the words after a token: the end of
    the match cut at the first following piece (what stood between two spaces) that is a word."""
    i = bisect.bisect_right(piece_starts, start)
    while i < len(piece_starts) and piece_starts[i] < end:
        b = piece_starts[i]
        stop = piece_starts[i + 1] if i + 1 < len(piece_starts) else len(text)
        if _WORD_PIECE.fullmatch(text, b, min(stop, end)):
            return b
        i += 1
    return end


class _Hit(NamedTuple):
    verdict: str
    kind: str
    start: int
    end: int


class _RunEnds:
    """Where the run of a body's characters that holds a position ends. Occurrences of a prefix come in
    increasing order, so the last run found per class answers every occurrence inside it: each character
    is read once, however many prefixes a run holds."""

    def __init__(self, text: str):
        self.text = text
        self.last: dict[str, tuple[int, int]] = {}

    def __call__(self, chars: str, pos: int) -> int:
        lo, hi = self.last.get(chars, (0, -1))
        if lo <= pos < hi:
            return hi
        m = _RUN_OF[chars].match(self.text, pos)
        end = m.end() if m else pos
        self.last[chars] = (pos, end)
        return end


_B64URL = "A-Za-z0-9_-"
_RUN_OF = {chars: re.compile(f"[{chars}]*") for chars in (_B64URL, "A-Za-z0-9", "A-Za-z0-9_", "A-Za-z0-9-", "0-9A-Z")}
_BODY_CHARS = {
    "stripe_key": "A-Za-z0-9",
    "openai_key": _B64URL,
    "github_token": "A-Za-z0-9_",
    "slack_token": "A-Za-z0-9-",
}


def _jwt_end(text: str, start: int, run_end: _RunEnds) -> int | None:
    """The end of the JWT opening at `start` (`eyJ…` `.eyJ…` `.…`, parts of 5 or more characters after
    their lead), else None: read on runs, so a text of `eyJeyJ…` costs one pass."""
    first = run_end(_B64URL, start + 3)
    if first - start - 3 < 5 or not text.startswith(".eyJ", first):
        return None
    second = run_end(_B64URL, first + 4)
    if second - first - 4 < 5 or not text.startswith(".", second):
        return None
    third = run_end(_B64URL, second + 1)
    return third if third - second - 1 >= 5 else None


def _prefixed_matches(text: str, compact: bool, starts: list[int] | None = None):
    """A _Hit for every prefixed-secret candidate: the pattern of the prefix found is tried only where
    some prefix occurs (one pass over the text for all kinds). A body is read to at most MAX_BODY
    characters; a hit whose body reaches that bound ends where its run does. Occurrences inside a strict
    hit are skipped (any hit there would overlap it), and so are JWT openings inside a run already found
    not to hold one (every opening in a run ends its first part where the run ends)."""
    low = text.lower()
    run_end = _RunEnds(text)
    skip_until = 0
    jwt_dead_until = [0]
    occurrences = _ANY_PREFIX.finditer(low) if len(low) == len(text) else _ANY_PREFIX_I.finditer(text)
    for n, p in enumerate(occurrences):
        start = p.start()
        if start < skip_until:
            continue
        if n % 256 == 0:
            check_budget()
        spec = _SPEC_FOR_PREFIX[p.group()[:3].lower()]
        if spec.kind == "jwt":
            hit = _jwt_hit(text, start, compact, starts or [], run_end, jwt_dead_until)
        else:
            hit = _prefixed_hit(spec, text, start, compact, starts or [], run_end)
        if hit is not None:
            yield hit
            if hit.verdict == "strict":
                skip_until = hit.end


def _jwt_hit(
    text: str, start: int, compact: bool, starts: list[int], run_end: _RunEnds, dead_until: list[int]
) -> _Hit | None:
    if start < dead_until[0] or not text.startswith("eyJ", start):
        return None
    end = _jwt_end(text, start, run_end)
    if end is None:
        dead_until[0] = run_end(_B64URL, start + 3)
        return None
    if compact:
        shape = _JWT_SHAPE.match(text, start, _trim_words(start, end, starts, text))
        if shape is None:
            return None
        end = shape.end()
    return _Hit("strict", "jwt", start, end)


def _prefixed_hit(
    spec: _Prefixed, text: str, start: int, compact: bool, starts: list[int], run_end: _RunEnds
) -> _Hit | None:
    pattern = spec.compact_pattern if compact else spec.pattern
    m = pattern.match(text, start)
    if m is not None and compact:
        m = pattern.match(text, start, _trim_words(start, m.end(), starts, text))
    verdict = _verdict(spec, m, text, compact=compact) if m is not None else None
    if not verdict:
        return None
    end = m.end()
    if not compact and spec.kind in _BODY_CHARS and len(m.group("body")) >= MAX_BODY:
        end = run_end(_BODY_CHARS[spec.kind], end)
    return _Hit(verdict, spec.kind, start, end)


_JWT_SHAPE = re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")


def _scan_prefixed(col: _Collector, form: Mapped, compact: tuple[Mapped, list[int]] | None) -> None:
    """Strict matches first (on the text, then on the form without whitespace), lenient ones after,
    so that `task-ghp_…` is a GitHub token and not an OpenAI key glued to "ta"."""
    on_form = list(_prefixed_matches(form.text, False))
    on_compact = list(_prefixed_matches(compact[0].text, True, compact[1])) if compact else []
    for mode in ("strict", "lenient"):
        _add_prefixed(col, form, on_form, mode)
        if mode == "strict":
            _add_private_keys(col, form, _PRIVATE_KEY)
        if compact is None:
            continue
        _add_prefixed(col, compact[0], on_compact, mode, widen=True)
        if mode == "strict":
            _add_private_keys(col, compact[0], _PRIVATE_KEY_COMPACT, widen=True)


def _add_prefixed(col: _Collector, mapped: Mapped, hits: list[_Hit], mode: str, *, widen: bool = False) -> None:
    for hit in hits:
        if hit.verdict == mode:
            col.add(hit.kind, mapped, hit.start, hit.end, widen=widen)


def _add_private_keys(col: _Collector, mapped: Mapped, pattern: re.Pattern[str], *, widen: bool = False) -> None:
    if "BEGIN" in mapped.text.upper():
        for m in pattern.finditer(mapped.text):
            col.add("private_key", mapped, m.start(), m.end(), widen=widen)


def _aws_candidates(text: str):
    """40-character base64 tokens: standing alone, or the first or last 40 characters of a longer run
    split by "/" (a path such as `ops/<key>` or `<key>/prod`)."""
    for m in _B64_40.finditer(text):
        yield m.start(), m.group()
    for m in _B64_LONG.finditer(text):
        run, start = m.group(), m.start()
        for i, ch in enumerate(run):
            if ch == "/" and len(run) - i - 1 == 40:
                yield start + i + 1, run[i + 1 :]
            if ch == "/" and i == 40:
                yield start, run[:40]


def _scan_aws_secret(col: _Collector, form: Mapped) -> None:
    text = form.text
    for begin, token in _aws_candidates(text):
        if not (re.search(r"\d", token) and re.search(r"[A-Za-z]", token)) or re.fullmatch(r"[0-9a-fA-F]+", token):
            continue
        context = _AWS_CONTEXT.search(text, max(0, begin - 80), begin)
        standalone = (
            _looks_random(token, min_len=30)
            and _entropy(token) >= 4.2
            and _wordiness(token) < 0.3
            and _transitions(token) >= 0.4
            and sum(c.isdigit() for c in token) >= 2
        )
        if context or standalone:
            col.add("aws_secret_key", form, begin, begin + 40)
