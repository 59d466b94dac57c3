"""The one normalised form every screen reads (SPEC §11): the secret/PII scan and the poisoning guard.

An attacker hides a token or an instruction from a pattern with characters a person (or a model)
reads straight past: zero-width and other format characters, fullwidth or mathematical letters,
Cyrillic and Greek look-alikes, odd spaces. `fold` undoes all of that so that the screens match on
what a reader actually sees. It is for matching only: stored text keeps its original form.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import functools
import re
import time
import unicodedata
from collections.abc import Iterator

from memory_admin.errors import TooLarge

# ---------------------------------------------------------------------------------------------------
# The screening budget. Every screen's cost is linear in its text (tests/security/test_screening_cost.py
# holds each to a CPU budget on the shape corpus), so this never fires on text the limits allow; it is
# the net under that promise: should a screen still run long (a pattern nobody thought of, a machine
# under load), the write is refused with a stable code well before gunicorn's timeout kills the worker
# and leaves the client without an answer. Screens call `check_budget()` between their steps; the clock
# starts at the outermost `screening_budget()` and nested screens (a decoded payload scanned again, the
# preview re-scanned) share it.

DEFAULT_SCREENING_BUDGET_SECONDS = 5.0
_WALL_PER_CPU = 4  # the wall-clock allowance, per second of CPU budget
# (CPU deadline, wall-clock deadline, the wall-clock time before which the CPU budget cannot be spent)
_deadline: contextvars.ContextVar[tuple[float, float, float] | None] = contextvars.ContextVar(
    "screening_deadline", default=None
)


class ScreeningBudgetExceeded(TooLarge):
    """A text took longer to screen than the budget allows: refused, nothing of the write stored."""

    code = "screening_budget_exceeded"

    def __init__(self, seconds: float):
        super().__init__(
            f"The text could not be screened for secrets and instructions within the screening budget "
            f"({seconds:g} s of CPU), so nothing was stored. Send it in smaller parts (or with less repetition).",
            budget_seconds=seconds,
        )


def _budget_seconds() -> float:
    from django.conf import settings

    return float(getattr(settings, "SCREENING_BUDGET_SECONDS", DEFAULT_SCREENING_BUDGET_SECONDS))


@contextlib.contextmanager
def screening_budget() -> Iterator[None]:
    """Run the screens inside with one budget: `settings.SCREENING_BUDGET_SECONDS` (default 5) seconds of
    the thread's CPU, and four times that of wall clock. CPU, so that a busy machine does not turn an
    ordinary text away (the worst shape of a 1 MB notebook takes about 2 s of CPU); wall clock too,
    because gunicorn's timeout is: a write runs two budgeted screens of its text in turn (the guard; the
    secret/PII scan with the scan of its preview), 2 x 20 s, within the 60 s after which gunicorn kills
    the worker and the client gets no answer. Nested use keeps the outer clock."""
    if _deadline.get() is not None:
        yield
        return
    budget = _budget_seconds()
    now = time.monotonic()
    token = _deadline.set((time.thread_time() + budget, now + budget * _WALL_PER_CPU, now + budget))
    try:
        yield
    finally:
        _deadline.reset(token)


def check_budget() -> None:
    """Raise ScreeningBudgetExceeded if the running screen's budget is spent. A thread spends no more CPU
    than the wall-clock time that passes, so its CPU clock (a system call, ~2 µs; the screens check often)
    is read only once the budget's length of wall-clock time has passed."""
    deadline = _deadline.get()
    if deadline is None:
        return
    now = time.monotonic()
    if now > deadline[1] or (now >= deadline[2] and time.thread_time() > deadline[0]):
        raise ScreeningBudgetExceeded(_budget_seconds())


# Look-alikes that NFKC leaves alone: Cyrillic and Greek letters drawn like Latin ones, plus a few
# Latin-extended and symbol forms. Enough to fold every letter of the secret prefixes and of the
# instruction words the guard looks for; not a full confusables table.
_CONFUSABLES = {
    # Cyrillic lower case
    "а": "a",
    "в": "b",
    "е": "e",
    "ё": "e",
    "з": "3",
    "и": "u",
    "к": "k",
    "м": "m",
    "н": "h",
    "о": "o",
    "р": "p",
    "с": "c",
    "т": "t",
    "у": "y",
    "х": "x",
    "ѕ": "s",
    "і": "i",
    "ї": "i",
    "ј": "j",
    "ԁ": "d",
    "һ": "h",
    "ӏ": "l",
    "ԛ": "q",
    "ԝ": "w",
    "ɡ": "g",
    "ь": "b",
    "п": "n",
    "г": "r",
    "ո": "n",
    "ս": "u",
    # Cyrillic upper case
    "А": "A",
    "В": "B",
    "Е": "E",
    "Ё": "E",
    "З": "3",
    "К": "K",
    "М": "M",
    "Н": "H",
    "О": "O",
    "Р": "P",
    "С": "C",
    "Т": "T",
    "У": "Y",
    "Х": "X",
    "Ѕ": "S",
    "І": "I",
    "Ї": "I",
    "Ј": "J",
    "Ԁ": "D",
    "Һ": "H",
    "Ӏ": "I",
    "Ԛ": "Q",
    "Ԝ": "W",
    "Ь": "b",
    # Greek
    "α": "a",
    "β": "b",
    "γ": "y",
    "ε": "e",
    "η": "n",
    "ι": "i",
    "κ": "k",
    "ν": "v",
    "ο": "o",
    "ρ": "p",
    "τ": "t",
    "υ": "u",
    "χ": "x",
    "ω": "w",
    "Α": "A",
    "Β": "B",
    "Ε": "E",
    "Ζ": "Z",
    "Η": "H",
    "Ι": "I",
    "Κ": "K",
    "Μ": "M",
    "Ν": "N",
    "Ο": "O",
    "Ρ": "P",
    "Τ": "T",
    "Υ": "Y",
    "Χ": "X",
    # Latin extended and symbols
    "ı": "i",
    "ȷ": "j",
    "ℓ": "l",
    "Ɩ": "l",
    "ǀ": "l",
    "ⅼ": "l",
    "０": "0",
    "‐": "-",
    "‑": "-",
    "‒": "-",
    "–": "-",
    "—": "-",
    "―": "-",
    "−": "-",
    "﹣": "-",
    "－": "-",
    "⁄": "/",
    "∕": "/",
    "＼": "\\",
    "‹": "<",
    "›": ">",
    "«": "<<",
    "»": ">>",
    "〈": "<",
    "〉": ">",
    "⟨": "<",
    "⟩": ">",
    "❮": "<",
    "❯": ">",
    "ǃ": "!",
    "｜": "|",
    "│": "|",
    "∣": "|",
}
_FOLD_TABLE = str.maketrans(_CONFUSABLES)

# Characters nobody sees: format characters (category Cf: zero-width space/joiners, word joiner, BOM,
# soft hyphen, bidi controls, tag characters), variation selectors, combining grapheme joiner, and the
# blank "letters" (Hangul fillers, braille blank, Mongolian vowel separator).
_INVISIBLE_EXTRA = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x2800, 0x3164, 0xFFA0}


def _is_invisible(ch: str) -> bool:
    cp = ord(ch)
    if cp in _INVISIBLE_EXTRA or 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
        return True
    return unicodedata.category(ch) == "Cf"


_HSPACE = re.compile(r"[^\S\n]+")
# Decimal digits of other scripts (Arabic-Indic, Devanagari, ...) read as the digits they are.
_OTHER_DIGIT = re.compile(r"[^\x00-\x7f](?<=\d)")


def strip_invisible(text: str) -> str:
    """`text` without the characters nobody sees (offsets change; for matching only)."""
    if text.isascii():
        return text
    return text.translate(_DROP_INVISIBLE)


class _DropTable(dict):
    """A `str.translate` table, built as characters are met, that drops the characters `drop(ch)` names
    and keeps the rest: one C-level pass over a long text instead of a Python test per character."""

    LIMIT = 1 << 16

    def __init__(self, drop) -> None:
        super().__init__()
        self.drop = drop

    def __missing__(self, cp: int) -> str | None:
        if len(self) > self.LIMIT:
            self.clear()
        value = None if self.drop(chr(cp)) else chr(cp)
        self[cp] = value
        return value


_DROP_INVISIBLE = _DropTable(_is_invisible)
_DROP_COMBINING = _DropTable(unicodedata.combining)


def fold(text: str) -> str:
    """What a reader sees in `text`, for matching: NFKC (fullwidth and styled letters to plain ones),
    invisible characters removed, look-alike letters folded to Latin, digits of any script to ASCII,
    every run of horizontal whitespace (non-breaking, ideographic, tabs, doubled spaces) one space,
    line ends kept."""
    if text.isascii():
        return _HSPACE.sub(" ", text)
    text = unicodedata.normalize("NFKC", strip_invisible(text))
    text = _OTHER_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group())), text.translate(_FOLD_TABLE))
    # NFKC can leave combining marks on folded letters (e.g. "ё" decomposed); drop the marks.
    text = unicodedata.normalize("NFKD", text).translate(_DROP_COMBINING)
    return _HSPACE.sub(" ", text)


def unreadable_reason(text: str) -> str | None:
    """Why `text` cannot be stored as text at all (a NUL byte, a lone surrogate, another C0/C1
    control character than tab and line ends), else None. Postgres refuses NUL in text, and a lone
    surrogate cannot be encoded as UTF-8: both would fail after validation."""
    for ch in text:
        cp = ord(ch)
        if cp == 0:
            return "contains a NUL character"
        if 0xD800 <= cp <= 0xDFFF:
            return "contains a lone surrogate (not valid Unicode text)"
        if (cp < 0x20 and ch not in "\t\n\r") or 0x7F <= cp <= 0x9F:
            return f"contains the control character U+{cp:04X}"
    return None


# ---------------------------------------------------------------------------------------------------
# The same form with a map back to the original text, for screens that must act on the original (the
# secret/PII scan redacts in place). `Mapped.src[i]`/`Mapped.end[i]` is the span of the original text
# that output character i came from, so a match in the folded form names exactly what to cut out of
# the original, invisible characters inside the match included.


class Mapped:
    __slots__ = ("text", "src", "end")

    def __init__(self, text: str, src: list[int], end: list[int]):
        self.text, self.src, self.end = text, src, end

    @classmethod
    def identity(cls, text: str) -> Mapped:
        # ranges index and slice like the lists they stand for, without a million ints in memory
        return cls(text, range(len(text)), range(1, len(text) + 1))  # type: ignore[arg-type]

    def span(self, start: int, stop: int) -> tuple[int, int]:
        """The original span of output characters [start, stop)."""
        return self.src[start], self.end[stop - 1]

    def rewrite(self, pieces) -> Mapped:
        """A new form from `pieces` covering the input in order: (None, a, b) keeps input [a, b) as it
        is; (string, a, b) puts `string` in place of input [a, b) ("" drops it)."""
        out: list[str] = []
        src: list[int] = []
        end: list[int] = []
        text = self.text
        for piece, a, b in pieces:
            if piece is None:
                out.append(text[a:b])
                src.extend(self.src[a:b])
                end.extend(self.end[a:b])
            elif piece:
                out.append(piece)
                s, e = self.src[a], self.end[b - 1]
                src.extend([s] * len(piece))
                end.extend([e] * len(piece))
        return Mapped("".join(out), src, end)


def _runs(text: str, pattern: re.Pattern[str], replace) -> list | None:
    """Pieces for `Mapped.rewrite`: each match of `pattern` replaced by `replace(match)` (None keeps
    it), the text between kept as it is. None when nothing matched."""
    pieces, cursor = [], 0
    for m in pattern.finditer(text):
        if m.start() > cursor:
            pieces.append((None, cursor, m.start()))
        pieces.append((replace(m), m.start(), m.end()))
        cursor = m.end()
    if cursor == 0 and not pieces:
        return None
    if cursor < len(text):
        pieces.append((None, cursor, len(text)))
    return pieces


@functools.lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    if _is_invisible(ch):
        return ""
    ch = unicodedata.normalize("NFKC", ch).translate(_FOLD_TABLE)
    if len(ch) == 1 and not ch.isascii() and ch.isdecimal():
        return str(unicodedata.decimal(ch))
    return "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))


# Horizontal whitespace other than one plain space.
_ODD_HSPACE = re.compile(r" [^\S\n]+|[^\S\n ][^\S\n]*")


class _FoldTable(dict):
    """`str.translate` tables built as characters are met (a text holds few distinct ones): `one` folds
    each character that folds to exactly one character and leaves the others; `uneven` names, by code
    point, the characters that fold to none (invisible) or to several (`«`, ligatures)."""

    LIMIT = 1 << 16  # distinct characters remembered; a text of more starts the table afresh

    def __init__(self) -> None:
        super().__init__()
        # Never cleared: it only grows (to the ~14k such characters of Unicode), so every character of a
        # translated text that it names is still named when the text's runs are cut out, even when the
        # table was started afresh halfway through the text (or by another thread meanwhile).
        self.uneven: dict[int, str] = {}

    def __missing__(self, cp: int) -> str:
        if len(self) > self.LIMIT:
            self.clear()
        folded = _fold_char(chr(cp))
        if len(folded) == 1:
            self[cp] = folded
        else:
            self[cp] = chr(cp)
            self.uneven[cp] = folded
        return self[cp]


_FOLD_ONE = _FoldTable()


def _uneven_pattern(vanish: list[str], grow: list[str]) -> re.Pattern[str]:
    """Runs of characters that vanish (one piece each run), and each character that grows."""
    alternatives = []
    if vanish:
        alternatives.append("[" + "".join(re.escape(ch) for ch in sorted(vanish)) + "]+")
    if grow:
        alternatives.append("[" + "".join(re.escape(ch) for ch in sorted(grow)) + "]")
    return re.compile("|".join(alternatives))


def fold_mapped(text: str | Mapped) -> Mapped:
    """`fold(text)` with its map back to `text` (character by character, so NFKC compositions across
    characters are not applied; the combining marks they would absorb are dropped anyway). Characters
    that fold to one character are folded in place by `str.translate` (the map is unchanged); only the
    ones that vanish or grow are cut out one run or one character at a time."""
    form = text if isinstance(text, Mapped) else Mapped.identity(text)
    if not form.text.isascii():
        folded = form.text.translate(_FOLD_ONE)
        form = Mapped(folded, form.src, form.end)
        uneven = _FOLD_ONE.uneven
        if uneven:
            chars = {ord(ch) for ch in set(folded)}
            vanish = [chr(cp) for cp in chars if uneven.get(cp) == ""]
            grow = [chr(cp) for cp in chars if uneven.get(cp)]
            if vanish or grow:
                form = form.rewrite(
                    _runs(folded, _uneven_pattern(vanish, grow), lambda m: uneven.get(ord(m[0][0]), ""))
                )
                check_budget()
    pieces = _runs(form.text, _ODD_HSPACE, lambda m: " ")
    return form.rewrite(pieces) if pieces else form


_PERCENT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_HTML_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?")


def decode_escapes_mapped(form: Mapped) -> Mapped:
    """Percent-escapes (`%2D`) and HTML character references (`&#45;`, `&dash;`) decoded, as a reader
    (or a model) decodes them. Each decoded run maps to the escape it came from."""
    import html
    from urllib.parse import unquote

    text = form.text
    if "%" not in text and "&" not in text:
        return form
    marks = [(m.start(), m.end(), unquote(m.group(), errors="replace")) for m in _PERCENT_RUN.finditer(text)]
    marks += [(m.start(), m.end(), html.unescape(m.group())) for m in _HTML_ENTITY.finditer(text)]
    if not marks:
        return form
    marks.sort()
    pieces, cursor = [], 0
    for a, b, decoded in marks:
        if a < cursor:
            continue
        if a > cursor:
            pieces.append((None, cursor, a))
        pieces.append((decoded, a, b))
        cursor = b
    if cursor < len(text):
        pieces.append((None, cursor, len(text)))
    return form.rewrite(pieces)


def screen_form(text: str) -> Mapped:
    """The form the secret scan reads: folded, escapes decoded, folded again (a decoded escape may
    itself be a fullwidth or invisible character), with the map back to `text`."""
    form = fold_mapped(text)
    check_budget()
    decoded = decode_escapes_mapped(form)
    if decoded is form:
        return form
    check_budget()
    return fold_mapped(decoded)


def base64_text(run: str) -> str:
    """The readable text a base64 run (standard or URL-safe alphabet, padding optional) decodes to, or ""
    when it decodes to nothing readable (not UTF-8, or under 95 % printable). Both screens read through
    base64 with this one decoding: the secret scan for wrapped keys, the guard for wrapped instructions."""
    body = run.rstrip("=")
    try:
        decoded = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return ""
    if not decoded or sum(ch.isprintable() or ch.isspace() for ch in decoded) < 0.95 * len(decoded):
        return ""
    return decoded
