"""Contact PII and card numbers: email, phone, national ids, cards (Luhn and grouping checked)."""

from __future__ import annotations

import re

from memory_admin.services.pii.findings import _Collector
from memory_admin.textnorm import Mapped, check_budget

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
