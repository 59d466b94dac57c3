"""Messages become searchable episodic memory (retrieval/messages.py): the worker embeds what was posted,
in batches, after the request (`/messages` only writes rows; its cost does not change).

The text indexed is the message's content as stored, i.e. after the write door's screening (secrets and
blocked PII already replaced by `[REDACTED:<kind>]`); a message kept only as a placeholder, or erased,
gets no embedding and so never appears in search. Its full-text vector is a generated column of the row.
"""

from __future__ import annotations

import time

from django.db import transaction

from memory_admin.embedding import embed
from memory_admin.models import Message

# Messages embedded per transaction (one embedder call); a run goes on until nothing is due or its time is up.
INDEX_BATCH = 128
INDEX_SECONDS = 20.0
# Contents that say nothing of the conversation: a message stored as a placeholder (its scan could not
# separate a secret from the text) and an erased user's messages.
UNSEARCHABLE = ("[REDACTED:message]", "[erased]")


def messages_due() -> bool:
    """Whether any message waits to be indexed (the sweeper's question; a partial index answers it)."""
    return Message.objects.filter(search_due=True).exists()


def messages_index_batch(limit: int = INDEX_BATCH) -> int:
    """Embed up to `limit` due messages, oldest first; rows another worker holds are skipped, so runs
    in parallel share the backlog. Returns how many were looked at (0: nothing due)."""
    with transaction.atomic():
        rows = list(
            Message.objects.select_for_update(skip_locked=True)
            .filter(search_due=True)
            .order_by("id")
            .values_list("id", "content")[:limit]
        )
        if not rows:
            return 0
        texts = [(pk, content) for pk, content in rows if content.strip() and content not in UNSEARCHABLE]
        vectors = embed([content for _, content in texts]) if texts else []
        by_id = {pk: vector for (pk, _), vector in zip(texts, vectors, strict=True)}
        updated = []
        for pk, _ in rows:
            message = Message(pk=pk, embedding=by_id.get(pk), search_due=False)
            updated.append(message)
        Message.objects.bulk_update(updated, ["embedding", "search_due"], batch_size=limit)
    return len(rows)


def messages_index(*, seconds: float = INDEX_SECONDS, limit: int = INDEX_BATCH) -> int:
    """Index due messages in batches for at most `seconds` (the sweeper sends another run if some are
    left). Returns how many were indexed."""
    deadline = time.monotonic() + seconds
    total = 0
    while time.monotonic() < deadline:
        done = messages_index_batch(limit)
        if not done:
            break
        total += done
    return total
