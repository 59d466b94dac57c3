"""Digestion: a document's text becomes screened, embedded chunks, and a changed document supersedes only
the chunks that changed.

Each new chunk goes through what every fact goes through first (SPEC §4 steps 1-2):
1. the secret/PII scan under the tenant's policy (services/screening.py `screen_text`, as on the write
   doors): a chunk holding a secret, or contact PII the policy blocks, is not stored; a PII block records
   kinds, a redacted preview and a keyed fingerprint, as for a refused fact. PII the policy redacts is
   replaced by `[REDACTED:<kind>]`;
2. the poisoning guard (services/guard `verdict`): a chunk that reads as instructions to a model is
   stored `quarantined` with the guard's reason, held for review and never served.
Then the chunks are embedded in batches with the facts' embedder (memory_admin/embedding `embed`), the
heading path leading the text so a section's title counts toward what it is about.

A chunk is the same chunk across versions when its heading path and text are (its hash): such a chunk is
left as it is (its ordinal follows the new layout). The old chunks that are no longer in the document are
superseded by a new chunk of the same section (the first one otherwise); if nothing replaced them, retired.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from memory_admin import embedding
from memory_admin.errors import Blocked
from memory_admin.knowledge import conf
from memory_admin.knowledge.chunking import Chunk, chunk_text
from memory_admin.models import KnowledgeChunk, KnowledgeDocument, RelationEnd
from memory_admin.selectors.access import Principal
from memory_admin.services import guard
from memory_admin.services.entities import relations_end
from memory_admin.services.screening import screen_text
from memory_admin.services.settings import tenant_settings

ROUTE = "knowledge"


@dataclass
class Screened:
    chunk: Chunk
    content: str  # safe to store (redacted where the policy says so)
    status: str
    reason: str = ""
    redacted_kinds: list[str] = field(default_factory=list)


@dataclass
class DigestOutcome:
    created: int = 0
    unchanged: int = 0
    superseded: int = 0
    retired: int = 0
    blocked: int = 0
    redacted: int = 0
    quarantined: int = 0


def chunk_hash(heading_path: Sequence[str], text: str) -> str:
    return hashlib.sha256(("\x1f".join(heading_path) + "\x1e" + text).encode()).hexdigest()


def embedding_text(heading_path: Sequence[str], content: str) -> str:
    return (" > ".join(heading_path) + "\n\n" + content) if heading_path else content


def screen_chunk(
    principal: Principal, chunk: Chunk, *, policy: dict[str, str], memory_user_id: int | None
) -> Screened | None:
    """Step 1 and 2 for one chunk: None when it is refused (a PII block is recorded), else what to store."""
    try:
        result = screen_text(
            principal,
            chunk.text,
            route=ROUTE,
            memory_user_id=memory_user_id,
            what="document chunk",
            policy=policy,
            action="chunk",
            detail={"section": " > ".join(chunk.heading_path)},
        )
    except Blocked:
        return None  # recorded and audited: the chunk is not stored
    content = result.content
    verdict = guard.verdict(embedding_text(chunk.heading_path, content), tenant_id=principal.tenant_id)
    if verdict.flagged:
        return Screened(chunk, content, KnowledgeChunk.Status.QUARANTINED, verdict.reason(), result.kinds)
    redacted = result.kinds if result.redacted else []
    return Screened(chunk, content, KnowledgeChunk.Status.ACTIVE, "", redacted)


def embed_batched(texts: Sequence[str], batch: int | None = None) -> list[list[float]]:
    size = batch or conf.EMBED_BATCH()
    vectors: list[list[float]] = []
    for start in range(0, len(texts), size):
        vectors.extend(embedding.embed(list(texts[start : start + size])))
    return vectors


def digest_document(
    principal: Principal, document: KnowledgeDocument, text: str, *, title: str = "", fetched_at: datetime | None = None
) -> DigestOutcome:
    """Cut `text` (the document's new version) into chunks and store what changed. The screening and the
    embedding run before the transaction; the chunk rows and the document's new version are one commit."""
    fetched_at = fetched_at or timezone.now()
    outcome = DigestOutcome()
    chunks = chunk_text(text, max_tokens=conf.CHUNK_TOKENS(), title=title)
    live = {
        c.content_hash: c
        for c in KnowledgeChunk.objects.filter(
            document=document, status__in=[KnowledgeChunk.Status.ACTIVE, KnowledgeChunk.Status.QUARANTINED]
        ).only("id", "content_hash", "ordinal", "heading_path", "status")
    }
    policy = tenant_settings(principal.tenant_id).pii_policy
    kept: dict[str, int] = {}
    fresh: list[tuple[int, str, Screened]] = []
    for ordinal, chunk in enumerate(chunks):
        digest = chunk_hash(chunk.heading_path, chunk.text)
        if digest in live and digest not in kept:
            kept[digest] = ordinal
            continue
        screened = screen_chunk(principal, chunk, policy=policy, memory_user_id=document.memory_user_id)
        if screened is None:
            outcome.blocked += 1
            continue
        outcome.redacted += bool(screened.redacted_kinds)
        outcome.quarantined += screened.status == KnowledgeChunk.Status.QUARANTINED
        fresh.append((ordinal, digest, screened))
    vectors = embed_batched([embedding_text(s.chunk.heading_path, s.content) for _, _, s in fresh])
    version = document.version + 1
    with transaction.atomic():
        rows = [
            KnowledgeChunk(
                tenant_id=document.tenant_id,
                memory_user_id=document.memory_user_id,
                source_id=document.source_id,
                document=document,
                ordinal=ordinal,
                heading_path=list(s.chunk.heading_path),
                content=s.content,
                content_hash=digest,
                tokens=s.chunk.tokens,
                status=s.status,
                status_reason=s.reason,
                document_version=version,
                redacted_kinds=s.redacted_kinds,
                embedding=vector,
                fetched_at=fetched_at,
            )
            for (ordinal, digest, s), vector in zip(fresh, vectors, strict=True)
        ]
        KnowledgeChunk.objects.bulk_create(rows)
        for digest, ordinal in kept.items():
            if live[digest].ordinal != ordinal:
                KnowledgeChunk.objects.filter(pk=live[digest].pk).update(ordinal=ordinal, updated_at=timezone.now())
        gone = [c for digest, c in live.items() if digest not in kept]
        by_section = {}
        for row in rows:
            by_section.setdefault(tuple(row.heading_path), row)
        for old in gone:
            successor = by_section.get(tuple(old.heading_path)) or (rows[0] if rows else None)
            if successor is None:
                KnowledgeChunk.objects.filter(pk=old.pk).update(
                    status=KnowledgeChunk.Status.RETIRED,
                    status_reason=f"no longer in version {version} of the document",
                    updated_at=timezone.now(),
                )
                outcome.retired += 1
            else:
                KnowledgeChunk.objects.filter(pk=old.pk).update(
                    status=KnowledgeChunk.Status.SUPERSEDED,
                    superseded_by=successor,
                    status_reason=f"changed in version {version} of the document",
                    updated_at=timezone.now(),
                )
                outcome.superseded += 1
        # What the old chunks stated ends; the new chunks' drawing states what still holds again.
        retired = [old.pk for old in gone if not rows]
        relations_end(chunk_ids=retired, reason=RelationEnd.RETIRED)
        relations_end(chunk_ids=[old.pk for old in gone if rows], reason=RelationEnd.SUPERSEDED)
        document.version = version
        document.changed_at = fetched_at
        document.title = (title or document.title)[:500]
        document.chunks_blocked = outcome.blocked
        current = KnowledgeChunk.objects.filter(document=document, document_version__lte=version).filter(
            status__in=[KnowledgeChunk.Status.ACTIVE, KnowledgeChunk.Status.QUARANTINED]
        )
        document.chunks_redacted = current.exclude(redacted_kinds=[]).count()
        document.chunks_quarantined = current.filter(status=KnowledgeChunk.Status.QUARANTINED).count()
        document.save(
            update_fields=["version", "changed_at", "title", "chunks_blocked", "chunks_redacted", "chunks_quarantined"]
        )
    outcome.created = len(rows)
    outcome.unchanged = len(kept)
    return outcome


def retire_document(document: KnowledgeDocument, *, reason: str) -> int:
    """The document is gone from its source: it and its live chunks are retired (kept as history)."""
    with transaction.atomic():
        live = KnowledgeChunk.objects.filter(
            document=document, status__in=[KnowledgeChunk.Status.ACTIVE, KnowledgeChunk.Status.QUARANTINED]
        )
        ids = list(live.values_list("pk", flat=True))
        count = KnowledgeChunk.objects.filter(pk__in=ids).update(
            status=KnowledgeChunk.Status.RETIRED, status_reason=reason[:300], updated_at=timezone.now()
        )
        relations_end(chunk_ids=ids, reason=RelationEnd.RETIRED)
        document.status = KnowledgeDocument.Status.RETIRED
        document.error = ""
        document.save(update_fields=["status", "error"])
    return count
