"""The one normalised form every screen reads (SPEC §11): the secret/PII scan and the poisoning guard.

An attacker hides a token or an instruction from a pattern with characters a person (or a model)
reads straight past: zero-width and other format characters, fullwidth or mathematical letters,
Cyrillic and Greek look-alikes, odd spaces. `fold` undoes all of that so that the screens match on
what a reader actually sees. It is for matching only: stored text keeps its original form.
"""

from __future__ import annotations

import re
import unicodedata

# Look-alikes that NFKC leaves alone: Cyrillic and Greek letters drawn like Latin ones, plus a few
# Latin-extended and symbol forms. Enough to fold every letter of the secret prefixes and of the
# instruction words the guard looks for; not a full confusables table.
_CONFUSABLES = {
    # Cyrillic lower case
    "а": "a", "в": "b", "е": "e", "ё": "e", "з": "3", "и": "u", "к": "k", "м": "m", "н": "h", "о": "o",
    "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "ԁ": "d",
    "һ": "h", "ӏ": "l", "ԛ": "q", "ԝ": "w", "ɡ": "g", "ь": "b", "п": "n", "г": "r", "ո": "n", "ս": "u",
    # Cyrillic upper case
    "А": "A", "В": "B", "Е": "E", "Ё": "E", "З": "3", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ї": "I", "Ј": "J", "Ԁ": "D", "Һ": "H",
    "Ӏ": "I", "Ԛ": "Q", "Ԝ": "W", "Ь": "b",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "ω": "w", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I",
    "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    # Latin extended and symbols
    "ı": "i", "ȷ": "j", "ℓ": "l", "Ɩ": "l", "ǀ": "l", "ⅼ": "l", "０": "0",
    "‐": "-", "‑": "-", "‒": "-", "–": "-", "—": "-", "―": "-", "−": "-", "﹣": "-", "－": "-",
    "⁄": "/", "∕": "/", "＼": "\\",
    "‹": "<", "›": ">", "«": "<<", "»": ">>", "〈": "<", "〉": ">", "⟨": "<", "⟩": ">", "❮": "<", "❯": ">",
    "ǃ": "!", "｜": "|", "│": "|", "∣": "|",
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


def strip_invisible(text: str) -> str:
    """`text` without the characters nobody sees (offsets change; for matching only)."""
    if text.isascii():
        return text
    return "".join(ch for ch in text if not _is_invisible(ch))


def fold(text: str) -> str:
    """What a reader sees in `text`, for matching: NFKC (fullwidth and styled letters to plain ones),
    invisible characters removed, look-alike letters folded to Latin, every run of horizontal
    whitespace (non-breaking, ideographic, tabs, doubled spaces) one space, line ends kept."""
    if text.isascii():
        return _HSPACE.sub(" ", text)
    text = unicodedata.normalize("NFKC", strip_invisible(text))
    text = text.translate(_FOLD_TABLE)
    # NFKC can leave combining marks on folded letters (e.g. "ё" decomposed); drop the marks.
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
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
