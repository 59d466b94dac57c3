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

The package: `findings` (kinds, Finding, the collector), `tokens`, `credentials`, `contact` (the
detectors), `scan` (find, scan, redact, scrub...). Callers import from here.
"""

from memory_admin.services.pii.contact import (
    luhn_valid,
)
from memory_admin.services.pii.findings import (
    CONTACT_KINDS,
    RULE_SET_KINDS,
    RULE_SET_PLUGINS,
    SECRET_KINDS,
    Finding,
    ScanResult,
)
from memory_admin.services.pii.scan import (
    find,
    fingerprint,
    preview,
    redact,
    scan,
    scrub,
)
from memory_admin.services.pii.tokens import (
    MAX_BODY,
)

__all__ = [
    "CONTACT_KINDS",
    "Finding",
    "MAX_BODY",
    "RULE_SET_KINDS",
    "RULE_SET_PLUGINS",
    "SECRET_KINDS",
    "ScanResult",
    "find",
    "fingerprint",
    "luhn_valid",
    "preview",
    "redact",
    "scan",
    "scrub",
]
