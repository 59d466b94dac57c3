"""Fact services (SPEC §4): the write path (`write`) and the other mutations (`mutations`), with what
both build on: the checks on a fact's text (`checks`), versions and their chain (`versions`), the
confidence gap that settles a contradiction (`conflicts`) and the per-user cap (`cap`).

Import from here: every public name of the package is re-exported."""

from memory_admin.services.facts.cap import enforce_cap
from memory_admin.services.facts.checks import check_fact_size, content_hash, normalize, screen_key_and_metadata
from memory_admin.services.facts.conflicts import (
    close_contradictions_of,
    contradiction_record,
    contradiction_winner,
    notebook_overrule_record,
    refresh_contested,
)
from memory_admin.services.facts.mutations import (
    fact_correct,
    fact_forget,
    fact_pin,
    fact_promote,
    fact_restore,
    record_access,
)
from memory_admin.services.facts.subject import Claim, UserSubject
from memory_admin.services.facts.versions import (
    continue_chain,
    link,
    lock_memory_user,
    newest_version,
    refuse,
    replace,
    successor,
    supersede,
)
from memory_admin.services.facts.write import SOURCE_PRIOR, FactDraft, WriteResult, fact_write, fact_write_many

__all__ = [
    "SOURCE_PRIOR",
    "Claim",
    "UserSubject",
    "newest_version",
    "FactDraft",
    "WriteResult",
    "check_fact_size",
    "close_contradictions_of",
    "content_hash",
    "continue_chain",
    "contradiction_record",
    "notebook_overrule_record",
    "contradiction_winner",
    "enforce_cap",
    "fact_correct",
    "fact_forget",
    "fact_pin",
    "fact_promote",
    "fact_restore",
    "fact_write",
    "fact_write_many",
    "link",
    "lock_memory_user",
    "normalize",
    "record_access",
    "refresh_contested",
    "refuse",
    "replace",
    "screen_key_and_metadata",
    "successor",
    "supersede",
]
