"""Import of an export (`GET /users/{id}/export`) into a memory user, through the write path.

The export is replayed, not copied: every fact goes through `fact_write` (or `fact_correct` for a
correction of a fact this import wrote), notebook revisions through `notebook_save`, skill revisions
through `skill_save`, messages through `message_post`. So secrets are still blocked, the poisoning
guard, the confidence gate, dedup and the cap apply, and every write is audited as this principal's.
Facts and notebook revisions are replayed in the order they were created, so a correction chain, a
key's versions and a fact the notebook overruled come out as they went in.

History the write path cannot re-decide is restored after the replay, only in the direction of
serving less: a fact the export has as superseded (by a fact or notebook revision this import wrote),
stale, evicted or quarantined gets that status here, with an audit event. A fact the write path now
refuses or holds back (a secret, the tenant's threshold, the guard) stays refused: the report lists
it under `refused` or `diverged`. When-it-became-true times (valid_from, valid_to) and expiries are
kept from the export; ids and created/updated times are this install's own. Not replayed as such: a
promotion (its copy in the parent scope comes back as a new fact, version 1, and the task fact as
superseded by it) and a reviewer's decision (the outcome is restored, the contradiction row is closed
as settled by the import, not by the reviewer).

Idempotent: each replayed item is recorded (`ImportedItem`, by exported id or a digest, never text)
and an item found there is skipped, so importing the same export twice writes nothing the second
time, and an export that grew since imports only what is new. Imported messages are history: they
are stored as not to be extracted (their facts come with the export). The whole import is one
transaction: a failure midway leaves nothing behind. Checks that need no database (sizes, counts,
ids) run first, so bad input is refused before anything is written.

The package: `checks` (what refuses an export whole), `replay` (the state, facts and revisions,
their history), `graph`, `conversations` (skills, messages, episodes), `run` (`user_import`).
"""

from memory_admin.services.imports.checks import (
    check_import,
)
from memory_admin.services.imports.replay import (
    NEW_ROW,
    RESTORABLE,
    RUN,
    TIMES,
    ImportReport,
)
from memory_admin.services.imports.run import (
    user_import,
)

__all__ = [
    "ImportReport",
    "NEW_ROW",
    "RESTORABLE",
    "RUN",
    "TIMES",
    "check_import",
    "user_import",
]
