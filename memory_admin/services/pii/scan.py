"""The scan: every finding of a text (its base64 decodings too), and what callers do with them."""

from __future__ import annotations

import bisect
import hashlib
import hmac
import re

from django.conf import settings

from memory_admin.services.pii.contact import (
    _CARD_CANDIDATE,
    _card_grouping_ok,
    _find_contact,
    _numeric_regions,
    luhn_valid,
)
from memory_admin.services.pii.credentials import _rule_set, _scan_credentials, _scan_rule_set
from memory_admin.services.pii.findings import Finding, ScanResult, _Collector, _LazyMapped
from memory_admin.services.pii.tokens import _ANY_PREFIX, _B64_PARTS, _B64_RUN, _scan_aws_secret, _scan_prefixed
from memory_admin.textnorm import Mapped, base64_text, check_budget, screen_form, screening_budget

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
