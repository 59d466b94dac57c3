"""The readings of a text the features run on: folded and lower-cased, with leetspeak and spaced-out letters
undone, base64 payloads decoded; and the part of a long text a context block can ever serve."""

from __future__ import annotations

import functools
import re
import unicodedata

from memory_admin.textnorm import base64_text, check_budget, fold, strip_invisible
from memory_admin.tokens import encoding

SCAN_ALL_CHARS = 64 * 1024  # longer texts are read as far as a context block can serve them
_SERVED_SLACK_TOKENS = 1024  # a head cut inside a word tokenises differently only near the cut
_SERVED_SLACK_CHARS = 1024
# The head tokenised first to cut a long text: 3 characters a token. Prose (4-5 a token) is cut by the
# words bound instead; a run of one character (64 a token) is read whole rather than tokenised whole,
# which costs tiktoken more than the guard.
_HEAD_CHARS_PER_TOKEN = 3


_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "|": "l"})
# A leet word is a maximal run of letters, digits and `@ $ |` in which a letter touches one of the others.
# Found as a run first and checked after: a pattern that looks for the touching pair inside the run
# would try every start of a long run of digits and read to its end each time (quadratic).
_LEET_RUN = re.compile(r"[a-z0-9@$|]+")
_LEET_PAIR = re.compile(r"[a-z][0-9@$|]|[0-9@$|][a-z]")
_SPACED = re.compile(r"\b(?:[a-z][ .\-_*·]{1,3}){3,}[a-z]\b")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
_SQUASHED = re.compile(
    r"(?:ignore|disregard|forget|override|bypass)(?:all|any|the|your)?(?:previous|prior|above|earlier|preceding|"
    r"your|system)(?:instructions?|rules|guidance|guidelines|directions|prompts?|context)"
    r"|you(?:are|re)now|systemprompt|developermode|jailbreak|doanythingnow"
)


def _views(text: str) -> dict[str, list[str]]:
    """The readings of `text` the features run on (see the module docstring). The leetspeak and
    spaced-letter readings hold only the lines they change, so a long text is not read three times."""
    cased = fold(text)
    low = cased.lower()
    lows = [low]
    if _LEET_PAIR.search(low):
        changed = [
            d for line in low.splitlines() if _LEET_PAIR.search(line) and (d := _LEET_RUN.sub(_unleet, line)) != line
        ]
        if changed:
            lows.append("\n".join(changed))
    check_budget()
    if _SPACED.search(low):
        changed = [
            _SPACED.sub(lambda m: re.sub(r"[ .\-_*·]", "", m.group()), line)
            for line in low.splitlines()
            if _SPACED.search(line)
        ]
        lows.append("\n".join(changed))
    for blob in _BASE64.findall(text):
        decoded = _b64_text(blob)
        if decoded:
            lows.append(fold(decoded).lower())
    plain = unicodedata.normalize("NFKC", strip_invisible(text)).lower() if not text.isascii() else low
    return {"low": lows, "cased": [cased], "plain": [plain]}


def _unleet(m: re.Match[str]) -> str:
    run = m.group()
    return run.translate(_LEET) if _LEET_PAIR.search(run) else run


def _served_part(text: str) -> str:
    """What of `text` a context block can ever serve: the block holds at most MAX_BUDGET_TOKENS, and a
    long notebook or skill is cut from its end. Reading only that keeps a 1 MB notebook from costing
    seconds while nothing an agent can be shown goes unread.

    Two bounds, each never short of what is served: no token spans two words (runs of non-space), so the
    served tokens lie within the first MAX_BUDGET_TOKENS words; and the tokens counted on a head of the
    text, when they are already more than served. Tokenising only a head keeps the count cheap on text
    of very long tokens (a run of one character), which the words bound leaves whole."""
    if len(text) <= SCAN_ALL_CHARS:
        return text
    # Inside the function: retrieval.context screens what it serves through this package (a cycle at import).
    from memory_admin.retrieval.context import MAX_BUDGET_TOKENS  # noqa: PLC0415

    words = _served_words(MAX_BUDGET_TOKENS + _SERVED_SLACK_TOKENS).match(text)
    bound = text[: words.end() + _SERVED_SLACK_CHARS] if words else text
    size = MAX_BUDGET_TOKENS * _HEAD_CHARS_PER_TOKEN
    for _ in range(2):  # a head, then (if its tokens were long) a head long enough at that rate
        head = bound[:size]
        tokens = encoding().encode(head, disallowed_special=())
        check_budget()
        if len(tokens) > MAX_BUDGET_TOKENS + _SERVED_SLACK_TOKENS:
            served = encoding().decode(tokens[:MAX_BUDGET_TOKENS])
            return head[: len(served) + _SERVED_SLACK_CHARS]
        size = int(len(head) * (MAX_BUDGET_TOKENS + _SERVED_SLACK_TOKENS) / max(1, len(tokens)) * 1.25)
        if len(head) == len(bound) or size >= len(bound):
            break  # very long tokens (a run of one character): reading it all costs less than tokenising it
    return bound


@functools.lru_cache(maxsize=1)
def _served_words(count: int) -> re.Pattern[str]:
    return re.compile(rf"(?:\s*+\S++){{{count}}}")


def _b64_text(blob: str) -> str:
    """Decoded base64 that reads as words (mostly letters): a wrapped instruction, not a wrapped key."""
    decoded = base64_text(blob[: len(blob) - len(blob) % 4])
    return decoded if decoded and sum(ch.isalpha() for ch in decoded) / len(decoded) > 0.6 else ""
