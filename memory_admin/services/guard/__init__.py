"""Poisoning guard (SPEC §4 step 2): memory that reads as instructions to a model never reaches an agent.

The guard scores features of the text rather than matching one phrase: an attacker rephrases ("pay no
attention to earlier guidance"), so each family of injection (overriding earlier instructions, claims of
a role or of authority, chat-template tokens, tool-call syntax, exfiltration, secrecy towards the user,
persona switches, output hijacks) is a few weighted features, and a text is instruction-like when
their sum reaches 1.0. Features that alone are weak evidence ("SYSTEM:" at the start of a line,
"new policy:", "you are now") add up with others; reported speech and mentions ("I told my team to
ignore...", "a podcast about...") count against. Everything is read on `textnorm.fold` (zero-width
characters, fullwidth and look-alike letters undone), and again with leetspeak and spaced-out letters
undone and base64 payloads decoded.

A text scoring between BORDERLINE and 1.0 is ambiguous: with `GUARD_JUDGE=llm` and a model configured,
the model gives a second opinion (SPEC: "an LLM check when a model is configured"); without one, or if
the model fails, the rule verdict stands (such a text passes).

Verdicts are remembered per text digest for a while (never the text), so a check repeated by the API
handler and the service costs one evaluation and at most one model call.
"""

from memory_admin.services.guard.features import FEATURES
from memory_admin.services.guard.patterns import Feature
from memory_admin.services.guard.readings import SCAN_ALL_CHARS
from memory_admin.services.guard.screening import (
    BORDERLINE,
    IMPERATIVE_BONUS,
    THRESHOLD,
    Verdict,
    assess,
    clear_cache,
    injection_reason,
    refuse_instructions,
    verdict,
)

__all__ = [
    "BORDERLINE",
    "FEATURES",
    "IMPERATIVE_BONUS",
    "SCAN_ALL_CHARS",
    "THRESHOLD",
    "Feature",
    "Verdict",
    "assess",
    "clear_cache",
    "injection_reason",
    "refuse_instructions",
    "verdict",
]
