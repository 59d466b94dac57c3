"""Secret and PII scanning (SPEC §4 step 1).

Secrets are always blocked. Contact PII (email, phone, national id) follows the tenant policy:
block, redact (replace by a placeholder and store the rest), or flag (store, and record a flag).
Nothing here ever returns or stores a raw matched value: callers get kinds, a redacted preview and a
keyed fingerprint (HMAC-SHA256 with a server secret) that lets auditors count repeats.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field

from django.conf import settings

SECRET_KINDS = ("openai_key", "github_token", "aws_access_key", "slack_token", "jwt", "private_key", "card_number")
CONTACT_KINDS = ("email", "phone", "national_id")

_SECRET_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    # A block without its END line is matched to the end of the text: all of it is key material.
    ("private_key", re.compile(
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*)", re.S
    )),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{16,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
]
_CARD_CANDIDATE = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_SSN = re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b")
_NINO = re.compile(r"\b(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\d{2,4}[ .-])\d{3,4}[ .-]?\d{3,5}(?![\w])"
)
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


@dataclass(frozen=True)
class Finding:
    kind: str
    start: int
    end: int

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


def find(text: str) -> list[Finding]:
    """Every secret and contact-PII span in `text`, without overlaps (secrets take precedence)."""
    found: list[Finding] = []

    def overlaps(start: int, end: int) -> bool:
        return any(f.start < end and start < f.end for f in found)

    for kind, pattern in _SECRET_PATTERNS:
        for m in pattern.finditer(text):
            if not overlaps(m.start(), m.end()):
                found.append(Finding(kind, m.start(), m.end()))
    for m in _CARD_CANDIDATE.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and luhn_valid(digits) and not overlaps(m.start(), m.end()):
            found.append(Finding("card_number", m.start(), m.end()))
    for m in _EMAIL.finditer(text):
        if not overlaps(m.start(), m.end()):
            found.append(Finding("email", m.start(), m.end()))
    for pattern in (_SSN, _NINO):
        for m in pattern.finditer(text):
            if not overlaps(m.start(), m.end()):
                found.append(Finding("national_id", m.start(), m.end()))
    for m in _PHONE.finditer(text):
        value = m.group().strip()
        digits = re.sub(r"\D", "", value)
        if 9 <= len(digits) <= 15 and not _DATE_LIKE.match(value) and not overlaps(m.start(), m.end()):
            found.append(Finding("phone", m.start(), m.end()))
    return sorted(found, key=lambda f: f.start)


def _replace(text: str, findings: list[Finding]) -> str:
    out, cursor = [], 0
    for f in findings:
        out.append(text[cursor : f.start])
        out.append(f"[REDACTED:{f.kind}]")
        cursor = f.end
    out.append(text[cursor:])
    return "".join(out)


def fingerprint(text: str, findings: list[Finding]) -> str:
    """HMAC over the matched values, so the same secret seen twice has the same fingerprint."""
    values = sorted(f.kind + ":" + re.sub(r"\s+", "", text[f.start : f.end]) for f in findings)
    material = "\n".join(values)
    key = settings.PII_FINGERPRINT_KEY.encode()
    return hmac.new(key, material.encode(), hashlib.sha256).hexdigest()


def preview(text: str, findings: list[Finding], limit: int = 240) -> str:
    redacted = _replace(text, findings)
    return redacted if len(redacted) <= limit else redacted[: limit - 1] + "…"


def scan(text: str, policy: dict[str, str]) -> ScanResult:
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
        result.content = _replace(text, to_redact)
        result.redacted = True
    result.flagged = any(policy.get(f.kind) == "flag" for f in findings)
    return result
