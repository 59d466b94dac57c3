"""Extraction knobs, from the environment (each has a default that works on a fresh machine).

Read at call time through `get()`, so tests and operators can override them with Django settings of
the same name as well.
"""

from __future__ import annotations

from django.conf import settings

from memory_admin import config

DEFAULTS: dict[str, float] = {
    # Bounded retries of one batch (LLM attempts, worker deaths included), with exponential backoff.
    "EXTRACTION_MAX_ATTEMPTS": 3,
    "EXTRACTION_BACKOFF_SECONDS": 2.0,
    "EXTRACTION_BACKOFF_MAX_SECONDS": 30.0,
    # How long a worker owns a batch per attempt beyond the LLM timeout; after that the sweeper
    # hands the batch to another worker (the first one's result is then discarded).
    "EXTRACTION_LEASE_MARGIN_SECONDS": 30.0,
    # A pending batch whose task was dispatched but not picked up is dispatched again after this.
    "EXTRACTION_REDISPATCH_SECONDS": 15.0,
    # Sentences of assistant messages this close to an active fact are recalled memory, not news.
    "EXTRACTION_ECHO_SIMILARITY": 0.9,
    # Messages sent to the model in one batch are cut to this many characters in total (the newest
    # are kept); protects cost when an agent dumps a huge transcript.
    "EXTRACTION_MAX_INPUT_CHARS": 60000.0,
}


def get(name: str) -> float:
    if hasattr(settings, name):
        return float(getattr(settings, name))
    return float(config.get(name))


def lease_seconds() -> float:
    return float(settings.OPENAI_TIMEOUT_SECONDS) + get("EXTRACTION_LEASE_MARGIN_SECONDS")
