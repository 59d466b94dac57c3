"""Secret and PII scanning (SPEC §4 step 1).

Secrets are always blocked. Contact PII (email, phone, national id) follows the tenant policy:
block, redact (replace by a placeholder and store the rest), or flag (store, and record a flag).
Nothing here ever returns or stores a raw matched value: callers get kinds, a redacted preview and a
keyed fingerprint (HMAC-SHA256 with its own server secret, PII_FINGERPRINT_KEY) that lets auditors
count repeats.

The scan reads what a person or a model would read, not the bytes sent (`textnorm.screen_form`):
zero-width and other invisible characters removed, fullwidth/styled letters and Cyrillic/Greek
look-alikes folded, odd and doubled spaces made one, percent-escapes (`%2D`) and HTML character
references (`&#45;`) decoded. Every match maps back to a span of the original text, so redaction
cuts the original (invisible characters inside a token included). On top of that form:

- a token split by whitespace or line breaks (`eyJ…\\n.eyJ…`, `sk-proj-abcd efgh…`) is found on the
  form without any whitespace, for the prefixed secret kinds only, and only when the joined body looks
  random (digits and mixed case), so ordinary prose glued together does not match;
- a key glued to a word (`OPENAI_KEY_sk-proj-…`, `AKIA…_prod`) matches; a prefix glued to letters or
  in an unusual case (`tasksk-…`, `SK-…`) counts only with a random-looking body;
- a base64 run that decodes to readable text is scanned again, decoded, for secrets;
- AWS secret access keys: a 40-character base64 token next to an aws/secret word, or a standalone one
  that is random-looking (digits, both cases, high character entropy, few dictionary-like lowercase
  runs); git SHAs (hex), UUIDs, dates, order numbers and version strings never qualify;
- phone numbers without separators and SSNs without dashes count only next to a word that says so
  ("call", "phone", "SSN"...), so an order number is not a phone; E.164 (`+14155550123`) always counts.

What is deliberately out of scope: secrets spelled out in words, split across separate writes,
reversed or otherwise encrypted; scanning every encoding an attacker could invent is impossible, the
normalised form covers what a reader decodes without effort.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import hmac
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from django.conf import settings

from memory_admin.textnorm import Mapped, base64_text, check_budget, screen_form, screening_budget

# The maintained rule set beside the hand-written list: detect-secrets' plugins whose patterns are bounded
# (so their cost stays linear in the text; tests/security/test_screening_cost.py holds them to it) and
# that block no turn of natural conversation (bench/secret_detection.py). Left out: the plugins whose
# patterns read unbounded runs from a common start (Basic Auth, NPM, PyPI, Keyword, Artifactory,
# OpenAI, JWT: replaced below by bounded rules of the same formats, or already in the hand list), the
# entropy plugins (quoted song titles are high-entropy strings; entropy counts here only next to an
# aws/secret word, `_scan_aws_secret`), the IBM, Cloudant and SoftLayer keyword plugins (no catch on
# the corpus) and Public IP (an address is not a secret).
RULE_SET_PLUGINS = {
    "AWSKeyDetector": "aws_access_key",
    "AzureStorageKeyDetector": "azure_storage_key",
    "DiscordBotTokenDetector": "discord_token",
    "GitHubTokenDetector": "github_token",
    "GitLabTokenDetector": "gitlab_token",
    "MailchimpDetector": "mailchimp_key",
    "PrivateKeyDetector": "private_key",
    "SendGridDetector": "sendgrid_key",
    "SlackDetector": "slack_token",
    "SquareOAuthDetector": "square_oauth_secret",
    "StripeDetector": "stripe_key",
    "TelegramBotTokenDetector": "telegram_token",
    "TwilioKeyDetector": "twilio_key",
}
RULE_SET_KINDS = (
    "azure_storage_key",
    "discord_token",
    "gitlab_token",
    "mailchimp_key",
    "sendgrid_key",
    "square_oauth_secret",
    "telegram_token",
    "twilio_key",
)

SECRET_KINDS = (
    "openai_key",
    "github_token",
    "aws_access_key",
    "aws_secret_key",
    "slack_token",
    "stripe_key",
    "google_api_key",
    "jwt",
    "private_key",
    "card_number",
    "credential",
    "url_password",
    "npm_token",
    "pypi_token",
    *RULE_SET_KINDS,
)
CONTACT_KINDS = ("email", "phone", "national_id")

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

_CARD_CANDIDATE = re.compile(r"(?<!\d)\d(?:[\s/._-]{0,2}\d){12,18}(?!\d)")
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+"
    r"(?:\s?@\s?|\s?[\[({]\s?at\s?[\])}]\s?)"
    r"[A-Za-z0-9-]+(?:(?:\.|\s?[\[({]\s?dot\s?[\])}]\s?)[A-Za-z0-9-]+)*"
    r"(?:\.|\s?[\[({]\s?dot\s?[\])}]\s?)[A-Za-z]{2,}(?![A-Za-z0-9])",
    re.I,
)
_SSN = re.compile(r"(?<!\d)(?<!\d[-.])(?!000|666|9\d\d)\d{3}(?P<sep>[- .]?)(?!00)\d{2}(?P=sep)(?!0000)\d{4}(?![-.]?\d)")
_SSN_CONTEXT = re.compile(r"(?i)\b(?:ssn|ss#|social\s?security|soc\.?\s?sec|tax\s?id|itin|tin)\b")
_NINO = re.compile(r"\b(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b")
_PHONE = re.compile(
    r"(?:(?<![A-Za-z0-9+])(?:\+\d{1,3}[ ./-]?)?(?:\(\d{2,4}\)[ ./-]?|\d{2,4}[ ./-])|(?<![0-9+])\(\d{2,4}\)[ ./-]?)"
    r"\d{3,4}[ ./-]?\d{3,5}(?![A-Za-z0-9])"
)
_E164 = re.compile(r"(?<![0-9+])\+\s?\d{8,15}(?!\d)")
_BARE_PHONE = re.compile(r"(?<![\w+])\d{10,11}(?!\d)")
_PHONE_CONTEXT = re.compile(
    r"(?i)\b(?:phone|mobile|cell|call|tel|telephone|sms|text\s(?:me|him|her|them)|whats\s?app|fax|signal|dial)"
)
_NUMERIC_REGION = re.compile(r"[\d(+][\d\s()./+_-]{7,}")
_AT_SIGN = re.compile(r"@|[\[({]\s?at\s?[\])}]", re.I)
_DATE_LIKE = re.compile(r"^\d{4}[-./]\d{1,2}[-./]\d{1,2}$|^\d{1,2}[-./]\d{1,2}[-./]\d{2,4}$")


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2 == 1:
            n *= 2
            if n > 9:
                n -= 9
        total += n
    return total % 10 == 0


def _card_grouping_ok(value: str) -> bool:
    """Digits typed as a card number: unbroken, or in groups of four (Amex 4-6-5, Diners 4-6-4)."""
    groups = [g for g in re.split(r"[\s/._-]+", value) if g]
    if len(groups) == 1:
        return True
    sizes = [len(g) for g in groups]
    if sizes in ([4, 6, 5], [4, 6, 4]):
        return True
    return all(s == 4 for s in sizes[:-1]) and 1 <= sizes[-1] <= 4


@dataclass(frozen=True)
class Finding:
    kind: str
    start: int
    end: int
    value: str = field(default="", repr=False, compare=False)  # the normalised match, for the fingerprint only

    @property
    def is_secret(self) -> bool:
        return self.kind in SECRET_KINDS


@dataclass
class ScanResult:
    """What a scan decided. `content` is safe to store when `blocked` is false."""

    content: str
    findings: list[Finding] = field(default_factory=list)
    blocked: bool = False
    redacted: bool = False
    flagged: bool = False
    preview: str = ""
    fingerprint: str = ""

    @property
    def kinds(self) -> list[str]:
        return sorted({f.kind for f in self.findings})


class _LazyMapped(Mapped):
    """The form without whitespace; its map back to the original is built only when a match needs it."""

    def __init__(self, text: str, form: Mapped, pieces: list[tuple[int, int]]):
        self.text, self._form, self._pieces, self._built = text, form, pieces, False

    def span(self, start: int, stop: int) -> tuple[int, int]:
        if not self._built:
            src: list[int] = []
            end: list[int] = []
            for a, b in self._pieces:
                src.extend(self._form.src[a:b])
                end.extend(self._form.end[a:b])
            self.src, self.end, self._built = src, end, True
        return self.src[start], self.end[stop - 1]


class _Collector:
    """The findings so far, kept sorted by start and without overlaps, so that a clash is found by
    bisection (a text of many thousand findings must not compare each with all the others)."""

    def __init__(self, form: Mapped):
        self.form = form
        self.found: list[Finding] = []
        self._starts: list[int] = []

    def _clashes(self, start: int, end: int) -> tuple[int, int]:
        """The index range of the findings that overlap [start, end)."""
        i = bisect.bisect_left(self._starts, start)
        if i > 0 and self.found[i - 1].end > start:
            i -= 1
        j = i
        while j < len(self.found) and self.found[j].start < end:
            j += 1
        return i, j

    def overlaps(self, start: int, end: int) -> bool:
        i, j = self._clashes(start, end)
        return j > i

    def add(self, kind: str, form: Mapped, start: int, end: int, *, widen: bool = False) -> None:
        """Record a finding unless it overlaps one already made; with `widen`, a finding that covers
        earlier ones of its kind entirely (a split token found whole on the form without whitespace)
        replaces them."""
        a, b = form.span(start, end)
        i, j = self._clashes(a, b)
        clashes = self.found[i:j]
        if clashes and widen and all(a <= f.start and f.end <= b and f.kind == kind for f in clashes):
            del self.found[i:j], self._starts[i:j]
            clashes = []
        if not clashes:
            value = re.sub(r"\s+", "", form.text[start:end])
            self.found.insert(i, Finding(kind, a, b, value))
            self._starts.insert(i, a)


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


class _Rule(NamedTuple):
    kind: str
    pattern: re.Pattern[str]
    literal: str | None  # a literal every match holds (lower-cased when `ignore_case`), or None
    ignore_case: bool  # read once here: `pattern.flags & re.IGNORECASE` is an enum operation of ~3 µs


@functools.lru_cache(maxsize=1)
def _rule_set() -> tuple[_Rule, ...]:
    """A _Rule for every pattern of the kept detect-secrets plugins (their `denylist`, the documented
    attribute of a regex-based plugin). No plugin's `verify` is ever called: it would send the value to
    the provider."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    by_name = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
    return tuple(
        _Rule(kind, pattern, _required_literal(pattern), bool(pattern.flags & re.IGNORECASE))
        for name, kind in RULE_SET_PLUGINS.items()
        for pattern in by_name[name].denylist
    )


def _required_literal(pattern: re.Pattern[str]) -> str | None:
    """The longest run of literal characters (two or more) that every match of `pattern` holds, lower-cased
    when the pattern ignores case: a text without it is not searched. Read from the parse tree of
    `re._parser` (stable since 3.11; the one public alternative would be a hand-kept list per plugin);
    on any surprise the answer is None and the pattern is always searched."""
    from re import _constants as c  # noqa: PLC0415

    try:
        items = list(re._parser.parse(pattern.pattern, pattern.flags))  # noqa: SLF001
    except Exception:  # noqa: BLE001 - a prefilter only
        return None
    runs, run = [], ""
    for op, av in items:
        if op is c.LITERAL:
            run += chr(av)
        else:
            runs.append(run)
            run = ""
    runs.append(run)
    best = max(runs, key=len)
    if len(best) < 2:
        return None
    return best.lower() if pattern.flags & re.IGNORECASE else best


def _scan_rule_set(col: _Collector, form: Mapped) -> None:
    """The maintained rule set on the normalised form. detect-secrets reads a file line by line; none of
    the kept patterns can match across a line end, so reading the whole text at once finds the same."""
    text = form.text
    low = None
    for kind, pattern, literal, ignore_case in _rule_set():
        if literal is not None:
            if ignore_case:
                low = text.lower() if low is None else low
                if literal not in low:
                    continue
            elif literal not in text:
                continue
        check_budget()  # before each pattern that reads the text (a literal test is one C pass)
        for m in pattern.finditer(text):
            if m.end() > m.start():
                col.add(kind, form, m.start(), m.end())


# Credentials written as `name = value` in a credentials file, an env file, JSON, YAML, code or a URL
# query: a name that says secret (`aws_secret_access_key`, `DB_PASSWORD`, `"SecretAccessKey"`, `api-key`),
# an assignment (`=`, `:`, `:=`, `=>`), an optional quote, and a value that reads like a secret (not a
# word, a placeholder or a template). Every part is bounded and read whole, so each occurrence of a
# name costs a few hundred steps at most.
_CREDENTIAL_NAME = re.compile(
    r"secret|passw(?:or)?d|pwd|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|private[_-]?key|"
    r"client[_-]?secret|auth[_-]?token|access[_-]?token|api[_-]?token|bearer[_-]?token"
)  # searched on the lower-cased text: an alternation of literals the engine skips ahead to
_CREDENTIAL_ASSIGNMENT = re.compile(
    r"(?:[_-][A-Za-z0-9]{1,15}|[A-Z][a-z0-9]{0,14}){0,3}+"  # `_access_key`, `AccessKey`: not `secretary`
    r"[\"'\]]{0,2}+[ \t]{0,5}+(?::=|=>|==?|:)[ \t]{0,5}+"
    r"(?P<quote>[\"'`]?)(?P<value>[^\s\"'`,;&<>(){}\[\]]{8,200}+)",
)
_PLACEHOLDER = re.compile(
    r"^(?:x+|\*+|\.+|-+|_+|changeme|password\d*|secret\d*|none|null|true|false|example\w*)$", re.I
)
_URL_PASSWORD = re.compile(r"(?<=://)(?P<user>[^\s/@:{}]{1,64}+):(?P<value>[^\s/@{}]{3,128}+)@")
_NPM_TOKEN = re.compile(r"_authToken=[ \t]{0,5}+(?P<value>npm_[A-Za-z0-9]{36}|[A-Fa-f0-9-]{36})", re.I)
_PYPI_TOKEN = re.compile(r"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,400}+")


_DOTTED_NAME = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+")


def _reads_as_secret(value: str) -> bool:
    """A value of an assignment that is a secret rather than prose, a number, a name or a placeholder:
    no template or variable (`${…}`, `$VAR`, `%s`, `os.environ`), not a known placeholder, and letters
    with digits or symbols (words joined by `-`, `_` or `.` and CamelCase names are not enough)."""
    if _PLACEHOLDER.match(value) or value[:1] in "$%" or "{{" in value or _DOTTED_NAME.fullmatch(value):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() and c not in "-_." for c in value)
    return has_alpha and (has_digit or has_symbol)


def _scan_credentials(col: _Collector, form: Mapped) -> None:
    text = form.text
    low = text.lower()
    if len(low) != len(text):  # a letter whose lower case is longer: match the name case-blind instead
        low = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
    for n, name in enumerate(_CREDENTIAL_NAME.finditer(low)):
        if n % 256 == 0:
            check_budget()
        m = _CREDENTIAL_ASSIGNMENT.match(text, name.end())
        if m and _reads_as_secret(m["value"]):
            col.add("credential", form, m.start("value"), m.end("value"))
    check_budget()
    for m in _URL_PASSWORD.finditer(text):
        if _reads_as_secret(m["value"]):
            col.add("url_password", form, m.start("value"), m.end("value"))
    for kind, pattern in (("npm_token", _NPM_TOKEN), ("pypi_token", _PYPI_TOKEN)):
        for m in pattern.finditer(text):
            col.add(kind, form, *(m.span("value") if pattern.groups else m.span()))


_DECODED_APART = "\n;\n"  # between two decodings: a line no secret pattern reads across


def _scan_encoded(col: _Collector, form: Mapped) -> None:
    """A base64 run that decodes to readable text: scanned again, decoded, for secrets. The readable
    decodings of all runs are scanned in one pass, joined apart, so a text of ten thousand short runs
    costs one scan of their decodings rather than ten thousand scans."""
    decodings: list[str] = []
    owners: list[tuple[int, int]] = []
    starts: list[int] = []
    at = 0
    for n, whole in enumerate(_B64_RUN.finditer(form.text)):
        if n % 64 == 0:
            check_budget()
        if col.overlaps(*form.span(whole.start(), whole.end())):
            continue
        run = whole.group()
        # The run may be glued to a word or a path ("task-", "ops/") and so start off the 4-character
        # grid of base64: its pieces between separators, and each of four offsets, are tried.
        parts = {run} | {p.group() for pattern in _B64_PARTS for p in pattern.finditer(run)}
        seen: set[str] = set()
        for part in sorted(parts, key=len, reverse=True):
            for i in range(4):
                decoded = _readable_decoding(part[i:])
                if decoded and decoded not in seen:
                    seen.add(decoded)
                    decodings.append(decoded)
                    owners.append(whole.span())
                    starts.append(at)
                    at += len(decoded) + len(_DECODED_APART)
    if not decodings:
        return
    for finding in find(_DECODED_APART.join(decodings), contact=False, encoded=False):
        owner = owners[bisect.bisect_right(starts, finding.start) - 1]
        col.add(finding.kind, form, *owner)


def _readable_decoding(run: str) -> str:
    """`run` base64-decoded, when that is readable text (else "")."""
    if len(run.rstrip("=")) < 24:
        return ""
    return base64_text(run)


def find(text: str, *, contact: bool = True, encoded: bool = True) -> list[Finding]:
    """Every secret and contact-PII span of `text` (offsets into `text` as given), without overlaps
    (secrets take precedence), found on the normalised form. Raises ScreeningBudgetExceeded
    (textnorm) should the scan run past the screening budget."""
    _rule_set()  # loaded once per process, outside the budget's clock
    with screening_budget():
        return _find(text, contact=contact, encoded=encoded)


def _find(text: str, *, contact: bool, encoded: bool) -> list[Finding]:
    form = screen_form(text)
    col = _Collector(form)
    norm = form.text
    # Tokens split by whitespace or line breaks: the form without any whitespace.
    compact = None
    squashed = "".join(norm.split())  # what `re.sub(r"\s+", "", norm)` gives, in C
    low = squashed.lower()
    if squashed != norm and (_ANY_PREFIX.search(low) or "begin" in low):
        starts: list[int] = []
        pieces = [m.span() for m in re.finditer(r"\S+", norm)]
        n = 0
        for a, b in pieces:
            starts.append(n)
            n += b - a
        compact = (_LazyMapped(squashed, form, pieces), starts)
    check_budget()
    _scan_prefixed(col, form, compact)
    check_budget()
    _scan_aws_secret(col, form)
    check_budget()
    _scan_credentials(col, form)
    _scan_rule_set(col, form)
    check_budget()
    regions = list(_numeric_regions(norm))
    for m in (m for pos, endpos in regions for m in _CARD_CANDIDATE.finditer(norm, pos, endpos)):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and _card_grouping_ok(m.group()) and luhn_valid(digits):
            col.add("card_number", form, m.start(), m.end())
    check_budget()
    if encoded and len(text) >= 24:
        _scan_encoded(col, form)
    check_budget()
    if contact:
        _find_contact(col, form, regions)
    return sorted(col.found, key=lambda f: f.start)


def _numeric_regions(norm: str):
    """(pos, endpos) around each run of digits and separators long enough to be a card, a phone or an
    id: the digit patterns run only there (a pattern that opens with a look-behind is slow to scan a
    long text with). endpos takes one more character so that look-aheads still see what follows."""
    for m in _NUMERIC_REGION.finditer(norm):
        yield m.start(), min(len(norm), m.end() + 1)


def _email_windows(norm: str):
    """(pos, endpos) around the at-signs, overlapping windows merged: a text of many `@` is read once."""
    lo = hi = -1
    for at in _AT_SIGN.finditer(norm):
        a, b = max(0, at.start() - 80), min(len(norm), at.end() + 260)
        if a > hi:
            if hi > lo:
                yield lo, hi
            lo = a
        hi = max(hi, b)
    if hi > lo:
        yield lo, hi


def _find_contact(col: _Collector, form: Mapped, regions: list[tuple[int, int]]) -> None:
    norm = form.text
    for pos, endpos in _email_windows(norm):
        check_budget()
        for m in _EMAIL.finditer(norm, pos, endpos):
            col.add("email", form, m.start(), m.end())
    check_budget()
    for n, (pos, endpos) in enumerate(regions):
        if n % 256 == 0:
            check_budget()
        _find_numeric_contact(col, form, pos, endpos)
    for m in _NINO.finditer(norm):
        col.add("national_id", form, m.start(), m.end())


def _find_numeric_contact(col: _Collector, form: Mapped, pos: int, endpos: int) -> None:
    """National ids and phone numbers in one numeric region of the form."""
    norm = form.text
    for m in _SSN.finditer(norm, pos, endpos):
        if m.group("sep") or _SSN_CONTEXT.search(norm, max(0, m.start() - 40), m.start()):
            col.add("national_id", form, m.start(), m.end())
    for m in _PHONE.finditer(norm, pos, endpos):
        value = m.group().strip()
        digits = re.sub(r"\D", "", value)
        if 9 <= len(digits) <= 15 and not _DATE_LIKE.match(value):
            col.add("phone", form, m.start(), m.end())
    for m in _E164.finditer(norm, pos, endpos):
        col.add("phone", form, m.start(), m.end())
    for m in _BARE_PHONE.finditer(norm, pos, endpos):
        if _PHONE_CONTEXT.search(norm, max(0, m.start() - 40), m.start()):
            col.add("phone", form, m.start(), m.end())


def _replace(text: str, findings: list[Finding]) -> str:
    out, cursor = [], 0
    for f in sorted(findings, key=lambda f: f.start):
        out.append(text[cursor : f.start])
        out.append(f"[REDACTED:{f.kind}]")
        cursor = f.end
    out.append(text[cursor:])
    return "".join(out)


def redact(text: str, findings: list[Finding]) -> str:
    """`text` with each finding replaced by `[REDACTED:<kind>]`."""
    return _replace(text, findings)


def fingerprint(text: str, findings: list[Finding]) -> str:
    """HMAC over the normalised matched values, so the same secret seen twice (however disguised) has
    the same fingerprint. Keyed with PII_FINGERPRINT_KEY: without it a fingerprint cannot be tested
    against guesses."""
    values = sorted(f.kind + ":" + (f.value or re.sub(r"\s+", "", text[f.start : f.end])) for f in findings)
    material = "\n".join(values)
    key = settings.PII_FINGERPRINT_KEY.encode()
    return hmac.new(key, material.encode(), hashlib.sha256).hexdigest()


def preview(text: str, findings: list[Finding], limit: int = 240) -> str:
    redacted = _replace(text, findings)
    if find(redacted):  # defence in depth: a preview never carries what the scan can still see
        redacted = "[REDACTED]"
    return redacted if len(redacted) <= limit else redacted[: limit - 1] + "…"


def scan(text: str, policy: dict[str, str]) -> ScanResult:
    """What the tenant `policy` makes of the secrets and contact PII in `text`. One screening budget for
    the whole of it: the scan, and the scans of its preview and of its redacted form."""
    _rule_set()
    with screening_budget():
        return _scan(text, policy)


def _scan(text: str, policy: dict[str, str]) -> ScanResult:
    findings = find(text)
    if not findings:
        return ScanResult(content=text)
    result = ScanResult(content=text, findings=findings)
    result.preview = preview(text, findings)
    result.fingerprint = fingerprint(text, findings)
    actions = {"block" if f.is_secret else policy.get(f.kind, "block") for f in findings}
    if "block" in actions:
        result.blocked = True
        result.content = ""
        return result
    to_redact = [f for f in findings if policy.get(f.kind) == "redact"]
    if to_redact:
        content = _replace(text, to_redact)
        # Redaction cuts the original at the spans the normalised form mapped back to. Should the cut
        # text still show something the policy redacts (an overlap the map could not separate), the
        # write is refused rather than stored with the value in it.
        if any(policy.get(f.kind) == "redact" for f in find(content)):
            result.blocked = True
            result.content = ""
            return result
        result.content = content
        result.redacted = True
    result.flagged = any(policy.get(f.kind) == "flag" for f in findings)
    return result


def scrub(text: str, policy: dict[str, str] | None = None) -> str:
    """`text` with every secret, and the contact PII that `policy` blocks or redacts (all of it without
    a policy), replaced by `[REDACTED:<kind>]`: for text we derive (episode summaries, error strings)
    and store, where refusing is not an option."""
    if not text:
        return text
    findings = [f for f in find(text) if f.is_secret or policy is None or policy.get(f.kind, "block") != "flag"]
    return _replace(text, findings) if findings else text
