"""What may reach an agent: one rule for every short text served to a model (SPEC §11).

A context block, an MCP answer and an entity or graph answer carry more than fact and notebook text:
relation types, entity names and aliases, fact keys, skill paths, episode and entity summaries, and
text a model provider wrote. Each of them, from whichever door it came (the API, MCP, an import, an
extraction model's answer, a dashboard form, the offline drawing), passes `agent_text_problem`
before it is stored:

- no secret and no contact PII (the secret/PII scan), read in every spelling the text may be stored
  or served in: as written, with its separators as dashes (`sk_proj_…` is `sk-proj-…` once slugged),
  in capitals (`akia…` is an AWS key id a slug lower-cased), and a long run of mixed letters and
  digits reads as a token whatever its prefix;
- not instructions to a model (the injection guard), read as written and with `_ . - / :` as
  spaces (`ignore_all_previous_instructions_now` is a sentence);
- something left once folded, and no `[REDACTED:` placeholder.

Doors that answer a person refuse (`agent_text_check` raises Invalid with the code); doors fed by a
model drop the text and count it (`agent_text_ok`). Nothing of the refused text is echoed or logged.

Codes: `blocked` (a secret or contact PII as written: the one the recording scan, services.screening,
also finds), `secret_like` (a secret only in another spelling, or a token-shaped run), `instruction_like`,
`invalid`. A `blocked` answer carries a block id: `agent_text_check` leaves that case to the recording
scan (`screen_identifier`, `screen_text`), which every caller runs at its store point.
"""

from __future__ import annotations

import re

from memory_admin.errors import Invalid
from memory_admin.models.entities import fold_name
from memory_admin.services.guard import verdict
from memory_admin.services.pii import find as find_pii

# Codes, stable: what the API, the import report and the extraction counts say.
INVALID, BLOCKED, SECRET_LIKE, INSTRUCTION_LIKE = "invalid", "blocked", "secret_like", "instruction_like"

_SEPARATORS = re.compile(r"[_./:\-]+")
_TO_DASH = re.compile(r"[_./:]")
# A run of letters and digits, mixed, as long as a short token: not a word, a name or a slug.
_TOKEN_RUN = re.compile(r"[A-Za-z0-9]{20,}")
_SENTENCES = {
    BLOCKED: "holds what reads as a secret or contact details",
    SECRET_LIKE: "holds what reads as a secret or a token",
    INSTRUCTION_LIKE: "reads as instructions to a model",
    INVALID: "is empty or a redaction placeholder",
}


def _token_like(text: str) -> bool:
    for run in _TOKEN_RUN.findall(text):
        digits = sum(c.isdigit() for c in run)
        if digits >= 3 and len(run) - digits >= 3:
            return True
    return False


def _secret_spellings(text: str) -> list[str]:
    dashed = _TO_DASH.sub("-", text)
    return list(dict.fromkeys((text, dashed, dashed.upper())))


def _guard_spellings(text: str) -> list[str]:
    return list(dict.fromkeys((text, " ".join(_SEPARATORS.sub(" ", text).split()))))


def agent_text_problem(
    text: str, *, allow_empty: bool = False, prose: bool = False, tenant_id: int | None = None
) -> str | None:
    """Why `text` may not be stored where an agent reads it, as a code (`blocked`: a secret or contact
    PII as written; `secret_like`: one in another spelling, or a token; `instruction_like`; `invalid`:
    nothing left, or a redaction placeholder); None when it may.

    `prose`: a summary, already through `screen_text` (the tenant's policy may have redacted contact
    PII out of it): its placeholders are allowed, and a long run of letters and digits (a commit hash
    in a sentence) is left to the secret scan. A name, type, key or path is none of those.
    `tenant_id`: the tenant's model guard is asked about borderline text (services.guard.verdict)."""
    if not text.strip():
        return None if allow_empty else INVALID
    if not prose and (not fold_name(text) or "[REDACTED:" in text):
        return INVALID
    if find_pii(text):
        return BLOCKED
    # Prose is neither slugged nor lower-cased: its other spellings are not how it is served.
    if not prose and (any(find_pii(spelling) for spelling in _secret_spellings(text)[1:]) or _token_like(text)):
        return SECRET_LIKE
    if any(verdict(spelling, tenant_id=tenant_id).flagged for spelling in _guard_spellings(text)):
        return INSTRUCTION_LIKE
    return None


def agent_text_ok(text: str) -> bool:
    """For doors fed by a model (extraction, summaries): keep the text only when it passes."""
    return agent_text_problem(text) is None


def agent_text_check(
    text: str, *, field: str, what: str, allow_empty: bool = False, prose: bool = False, written: str | None = None
) -> str:
    """For doors that answer a person (API, import, dashboard): the text, or Invalid (422) with the
    code and the field; the message names the field, never the text. A secret as written (`blocked`)
    passes here: the caller's recording scan refuses it with a block id (module docstring). `written`:
    the text as the person gave it, when `text` is its normal form (a lower-cased skill path)."""
    if written is not None and written != text and agent_text_problem(written, prose=prose) == BLOCKED:
        return text
    problem = agent_text_problem(text, allow_empty=allow_empty, prose=prose)
    if problem and problem != BLOCKED:
        raise Invalid(f"{field}: the {what} {_SENTENCES[problem]}; it was not stored.", code=problem, field=field)
    return text
