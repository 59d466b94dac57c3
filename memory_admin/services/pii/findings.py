"""The kinds a scan reports, a finding and a scan's result, and the collector that keeps findings apart."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from memory_admin.textnorm import Mapped

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
