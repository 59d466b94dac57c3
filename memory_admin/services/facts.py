"""The write path of SPEC §4 and the other fact mutations (correct, forget, pin).

`fact_write` is the single entry for every new fact, whatever its origin (agent API, extraction,
dashboard, demo seed). Each step records its outcome; the API returns it.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from pgvector.django import CosineDistance

from memory_admin.embeddings import embed, embed_one
from memory_admin.errors import Blocked, Conflict, DomainError, Invalid, TooLarge
from memory_admin.metrics import observe_writes
from memory_admin.models import Contradiction, Edge, Fact, MemoryUser, Notebook, NotebookChunk, TenantSettings
from memory_admin.scoring import effective_confidence_sql
from memory_admin.selectors.access import CURATE, WRITE_MEMORY, Principal, writable_fact
from memory_admin.services.audit import audit, buffered_audits, fact_snapshot
from memory_admin.services.guard import injection_reason, refuse_instructions
from memory_admin.services.judge import judge
from memory_admin.services.pii import find as find_pii
from memory_admin.services.screening import screen_identifier, screen_text, screens
from memory_admin.services.settings import tenant_settings

# Default confidence by source when a writer gives none (SPEC §2).
SOURCE_PRIOR: dict[str, float] = {
    "user_stated": 1.0,
    "user_correction": 1.0,
    "tool_verified": 0.9,
    "notebook": 1.0,
    "agent_inferred": 0.6,
    "recalled": 0.5,
    "external": 0.3,
}

OUTCOMES = (
    "created",
    "updated",
    "deduplicated",
    "merged",
    "superseded_existing",
    "queued_for_review",
    "quarantined",
    "rejected_low_confidence",
    "blocked",
    "overruled",
    "capped",
    "error",  # a fact of a batch that failed midway and left nothing behind
)

NEIGHBOURS = 5
# Eviction candidates read with the count: a write adds one fact, so one is usually evicted.
CAP_PROBE = 4


@dataclass
class WriteResult:
    outcome: str
    fact: Fact | None = None
    reason: str = ""
    other: Fact | None = None  # the existing fact involved (deduplicated into, superseded, contradicted)
    contradiction: Contradiction | None = None
    evicted: list[Fact] = field(default_factory=list)
    block_id: str | None = None  # a blocked fact of a batch: the PiiBlock recording the refusal


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower().rstrip(".!?;: ")


def content_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()


def check_fact_size(content: str, metadata: dict | None = None) -> None:
    size = len(content.encode())
    if size > settings.MAX_FACT_BYTES:
        raise TooLarge(
            f"A fact may hold at most {settings.MAX_FACT_BYTES} bytes; this one has {size}.",
            code="content_too_large", limit=settings.MAX_FACT_BYTES,
        )
    if not content.strip():
        raise Invalid("A fact needs some content.", code="invalid", field="content")
    if metadata is not None:
        import json

        if len(json.dumps(metadata).encode()) > settings.MAX_METADATA_BYTES:
            raise TooLarge(
                f"metadata may hold at most {settings.MAX_METADATA_BYTES} bytes of JSON.",
                code="metadata_too_large", limit=settings.MAX_METADATA_BYTES,
            )


def _lock_user(memory_user_id: int) -> None:
    """Writes for one memory user are serialised: races on a key or a hash cannot double-insert."""
    MemoryUser.objects.select_for_update().filter(pk=memory_user_id).values_list("pk", flat=True).first()


@dataclass
class _UserState:
    """What the locked part of the write path knows of the user, read once after the lock and kept
    exact by the writes that follow under it: the number of active facts (the cap's count) and whether
    the user has a notebook to contradict. Lets a write skip the notebook query when there is none and
    the cap query while the user is under the cap (both would find nothing)."""

    active: int
    has_notebook: bool


def _user_state(memory_user_id: int) -> _UserState:
    """One statement, after `_lock_user`: the active facts are counted as `_enforce_cap` counts them."""
    fact, chunk, notebook = Fact._meta.db_table, NotebookChunk._meta.db_table, Notebook._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT count(*) FROM {fact} WHERE memory_user_id = %s AND status = %s), "
            f"EXISTS (SELECT 1 FROM {chunk} c JOIN {notebook} n ON n.id = c.notebook_id "
            f"WHERE n.memory_user_id = %s)",
            [memory_user_id, Fact.Status.ACTIVE, memory_user_id],
        )
        active, has_notebook = cursor.fetchone()
    return _UserState(active=active, has_notebook=has_notebook)


# The columns the write path reads of a standing fact: all but the vectors (a neighbour's own vector is
# never needed, and parsing 384 floats per row was a measurable part of a write) and the tsvector.
_FACT_COLUMNS = ", ".join(
    f"f.{f.column}" for f in Fact._meta.concrete_fields
    if f.attname not in ("embedding", "embedding_next", "search_vector")
)


def _slot_same_and_nearest(memory_user_id: int, fact: Fact) -> list[Fact]:
    """4a/4b and the neighbours of 4c/5b in one statement, among the user's active facts of the same
    task: the fact with the same key (the slot) and those with the same normalised content (branch 0),
    and the nearest ones (branch 1; one more than needed: the slot is not a neighbour of its own new
    value), each with its cosine distance to the new fact. Hand-written SQL (the ORM's union of two
    annotated querysets cost more to compile than to run); the new vector is sent once."""
    exact = "f.content_hash = %s OR f.key = %s" if fact.key else "f.content_hash = %s"
    exact_params = [fact.content_hash, fact.key] if fact.key else [fact.content_hash]
    vector = Fact._meta.get_field("embedding").get_db_prep_value(fact.embedding, connection)
    table, active = Fact._meta.db_table, "f.memory_user_id = %s AND f.status = %s AND f.task_ref = %s"
    sql = (
        f"WITH q AS (SELECT %s::vector AS v) "
        f"(SELECT {_FACT_COLUMNS}, f.embedding <=> q.v AS distance, 0 AS branch FROM {table} f, q "
        f"WHERE {active} AND ({exact})) "
        f"UNION ALL "
        f"(SELECT {_FACT_COLUMNS}, f.embedding <=> q.v AS distance, 1 AS branch FROM {table} f, q "
        f"WHERE {active} ORDER BY distance ASC LIMIT {NEIGHBOURS + 1})"
    )
    slot = [memory_user_id, Fact.Status.ACTIVE, fact.task_ref]
    return list(Fact.objects.raw(sql, [vector, *slot, *exact_params, *slot]))


def _supersede(old: Fact, *, by: Fact, reason: str) -> None:
    """Mark `old` superseded by `by` (which may not be inserted yet: the FK is checked at commit)."""
    Fact.objects.filter(pk=old.pk).update(
        status=Fact.Status.SUPERSEDED, superseded_by_id=by.pk, status_reason=reason[:300],
        contested=False, updated_at=timezone.now(),
    )
    old.status, old.superseded_by_id = Fact.Status.SUPERSEDED, by.pk


@dataclass
class _Pending:
    """A fact past the checks that need no lock (screening, guard, confidence gate), waiting for its
    embedding and the locked part of the write path."""

    fact: Fact
    conf: float
    done: Callable[..., WriteResult]
    quarantined: str = ""  # the guard's reason, when the fact is to be stored for review only


def _prepare(principal: Principal, memory_user: MemoryUser, tenant: TenantSettings, *, content: str,
             key: str | None = None, category: str = "other", kind: str = "fact", confidence: float | None = None,
             source: str = "agent_inferred", observed_at: datetime | None = None, ttl_days: float | None = None,
             pinned: bool = False, importance: float = 0.5, metadata: dict[str, Any] | None = None,
             task_ref: str = "", route: str = "fact", extractor: str = "", message_id: int | None = None,
             batch_id: int | None = None, embedding: list[float] | None = None) -> WriteResult | _Pending:
    """Steps 1-3 of the write path; raises Blocked (after recording the block) for secrets."""
    check_fact_size(content, metadata)
    now = timezone.now()

    # 1. Secrets and PII. Clean text (the common case) needs neither the policy nor a record.
    if find_pii(content):
        content = screen_text(principal, content, route=route, memory_user_id=memory_user.pk).content
    if task_ref:
        screen_identifier(principal, task_ref, what="task id", route="task_id", memory_user_id=memory_user.pk)
    if key:  # a slot name is an identifier: refused, never redacted
        screen_identifier(principal, key, what="fact key", route=route, memory_user_id=memory_user.pk)
    if metadata:
        _, metadata = _screen_key_and_metadata(principal, None, metadata, route=route,
                                               memory_user_id=memory_user.pk, tenant=tenant)
    conf = SOURCE_PRIOR.get(source, 0.6) if confidence is None else float(confidence)
    fact = Fact(
        id=uuid.uuid4(),
        tenant_id=principal.tenant_id,
        memory_user=memory_user,
        scope=Fact.Scope.TASK if task_ref else Fact.Scope.USER,
        task_ref=task_ref,
        key=key or None,
        content=content,
        content_hash=content_hash(content),
        category=category,
        kind=kind,
        confidence=conf,
        importance=importance,
        source=source,
        pinned=pinned,
        valid_from=observed_at or now,
        soft_expires_at=(now + timedelta(days=ttl_days)) if ttl_days else None,
        metadata=metadata or {},
        agent_id=principal.agent_id,
        created_by=principal.actor,
        extractor=extractor,
        message_id=message_id,
        batch_id=batch_id,
        embedding=embedding,
    )

    def done(result: WriteResult, before: Fact | None = None) -> WriteResult:
        audit(
            principal, f"{route}.write", outcome=result.outcome,
            target_type="fact", target_id=str(result.fact.pk) if result.fact else "",
            memory_user_id=memory_user.pk,
            before=fact_snapshot(before or result.other),
            after=fact_snapshot(result.fact) if result.fact else {"content": content, "confidence": conf},
            reason=result.reason,
        )
        return result

    # 2. Poisoning guard: stored for review, never served.
    reason = (injection_reason(content, tenant_id=principal.tenant_id)
              or ("source is external" if source == Fact.Source.EXTERNAL else None))
    if reason:
        return _Pending(fact, conf, done, quarantined=reason)

    # 3. Confidence gate.
    if conf < tenant.confidence_threshold:
        return done(WriteResult(
            "rejected_low_confidence", None,
            reason=f"confidence {conf:.2f} is below the tenant threshold {tenant.confidence_threshold:.2f}",
        ))
    return _Pending(fact, conf, done)


@observe_writes
def fact_write(
    *,
    principal: Principal,
    memory_user: MemoryUser,
    content: str,
    key: str | None = None,
    category: str = "other",
    kind: str = "fact",
    confidence: float | None = None,
    source: str = "agent_inferred",
    observed_at: datetime | None = None,
    ttl_days: float | None = None,
    pinned: bool = False,
    importance: float = 0.5,
    metadata: dict[str, Any] | None = None,
    task_ref: str = "",
    route: str = "fact",
    extractor: str = "",
    message_id: int | None = None,
    batch_id: int | None = None,
    embedding: list[float] | None = None,
) -> WriteResult:
    """Run one fact through the write path. Raises Blocked (after recording the block) for secrets;
    every other outcome is returned, and audited."""
    principal.require(WRITE_MEMORY)
    tenant = tenant_settings(principal.tenant_id)
    pending = _prepare(
        principal, memory_user, tenant, content=content, key=key, category=category, kind=kind,
        confidence=confidence, source=source, observed_at=observed_at, ttl_days=ttl_days, pinned=pinned,
        importance=importance, metadata=metadata, task_ref=task_ref, route=route, extractor=extractor,
        message_id=message_id, batch_id=batch_id, embedding=embedding,
    )
    if isinstance(pending, WriteResult):
        return pending
    if pending.fact.embedding is None:
        pending.fact.embedding = embed_one(pending.fact.content)
    with transaction.atomic(), buffered_audits():  # the write's and its evictions' rows in one INSERT
        state = None
        if not pending.quarantined:
            _lock_user(memory_user.pk)
            state = _user_state(memory_user.pk)
        return _store(principal, memory_user, tenant, pending, state)


@observe_writes
def fact_write_many(*, principal: Principal, memory_user: MemoryUser, facts: list[dict[str, Any]],
                    route: str = "fact") -> list[WriteResult]:
    """Run several facts (each a dict of `fact_write`'s keyword arguments) through the write path, in
    order, with one embedding call for all of them and one transaction under one lock of the user.

    Every fact gets its own outcome, as if written alone one after the other (a later fact dedups
    against an earlier one of the same batch). A blocked fact is reported as `blocked` with its block
    id and does not stop the others: screening runs before the transaction, so the block record is
    committed whatever happens next. Each fact's writes run in a savepoint: a fact that fails midway
    leaves nothing behind and is reported as `error`, the others are kept."""
    principal.require(WRITE_MEMORY)
    tenant = tenant_settings(principal.tenant_id)
    for item in facts:
        check_fact_size(item["content"], item.get("metadata"))
    prepared: list[WriteResult | _Pending] = []
    for item in facts:
        try:
            prepared.append(_prepare(principal, memory_user, tenant, route=route, **item))
        except Blocked as exc:
            prepared.append(WriteResult("blocked", None, reason=exc.detail, block_id=exc.extra.get("block_id")))
    to_embed = [p for p in prepared if isinstance(p, _Pending) and p.fact.embedding is None]
    vectors = embed([p.fact.content for p in to_embed]) if to_embed else []  # none when all were refused
    for pending, vector in zip(to_embed, vectors, strict=True):
        pending.fact.embedding = vector
    results: list[WriteResult] = []
    # The audit rows of the batch are inserted together at the end of its transaction, in order.
    with transaction.atomic(), buffered_audits() as audit_events:
        state = None
        if any(isinstance(p, _Pending) for p in prepared):
            _lock_user(memory_user.pk)
            state = _user_state(memory_user.pk)
        for pending in prepared:
            if isinstance(pending, WriteResult):
                results.append(pending)
                continue
            kept_events, kept_state = len(audit_events), (state.active if state else 0)
            try:
                with transaction.atomic():
                    results.append(_store(principal, memory_user, tenant, pending, state))
            except (DatabaseError, DomainError) as exc:
                del audit_events[kept_events:]  # rolled back with the fact's savepoint
                if state is not None:
                    state.active = kept_state
                results.append(WriteResult("error", None, reason=f"not stored: {type(exc).__name__}"))
    return results


def _store(principal: Principal, memory_user: MemoryUser, tenant: TenantSettings, pending: _Pending,
           state: _UserState | None = None) -> WriteResult:
    """Steps 4-7 of the write path, under the user's lock (the caller holds it, in a transaction, and
    passes the `_user_state` it read after taking it; None for a quarantined fact, which needs neither)."""
    fact, conf, done = pending.fact, pending.conf, pending.done
    if pending.quarantined:
        fact.status, fact.status_reason = Fact.Status.QUARANTINED, pending.quarantined[:300]
        fact.save(force_insert=True)
        return done(WriteResult("quarantined", fact, reason=pending.quarantined))

    found = _slot_same_and_nearest(memory_user.pk, fact)
    exact_rows = sorted((f for f in found if f.branch == 0), key=lambda f: f.pk)
    slot = next((f for f in exact_rows if fact.key and f.key == fact.key), None)
    same = next((f for f in exact_rows if f.content_hash == fact.content_hash), None)

    # 4a. Same key: update the slot.
    if slot is not None and slot.content_hash == fact.content_hash:
        return done(*_touch(slot, conf, "same key and same content"))
    # 4b. Same normalised content.
    if same is not None and slot is None:
        return done(*_touch(same, conf, "same content as an active fact"))
    verdicts: dict = {}
    neighbours = sorted((f for f in found if f.branch == 1 and (slot is None or f.pk != slot.pk)),
                        key=lambda f: f.distance)[:NEIGHBOURS]
    # 4c. Near-identical text: merge (newer text, higher confidence). A negation flip ("is" / "is
    # not") embeds almost identically, so the judge gets a say before anything is merged away.
    if slot is None and neighbours and 1 - neighbours[0].distance >= tenant.dedup_similarity:
        nearest_fact = neighbours[0]
        verdicts[nearest_fact.pk] = judge(nearest_fact.content, fact.content, tenant_id=principal.tenant_id)
        if not verdicts[nearest_fact.pk].contradictory:
            return done(*_merge(nearest_fact, fact, 1 - nearest_fact.distance))

    # 5. Contradiction with the notebook: the notebook wins.
    overruling = (_notebook_conflict(principal, memory_user, fact, tenant.contradiction_similarity)
                  if state is None or state.has_notebook else None)
    if overruling is not None:
        chunk, verdict = overruling
        fact.status = Fact.Status.SUPERSEDED
        fact.superseded_by_notebook_id = chunk.revision_id
        fact.status_reason = f"contradicts the notebook: {verdict.reason}"[:300]
        fact.save(force_insert=True)
        Contradiction.objects.create(
            tenant_id=principal.tenant_id, memory_user=memory_user, fact_a=fact,
            notebook_revision_id=chunk.revision_id, notebook_excerpt=chunk.text[:500],
            detector=Contradiction.Detector.NOTEBOOK, judge=verdict.judge, reason=verdict.reason,
            status=Contradiction.Status.AUTO_RESOLVED, resolution=Contradiction.Resolution.AUTO,
            resolved_by="system", resolved_at=timezone.now(),
        )
        return done(WriteResult("overruled", fact, reason="the notebook says otherwise; the notebook wins"))

    if slot is not None:
        return done(*_update_slot(principal, slot, fact, tenant.auto_resolve_gap))

    # 5b. Semantic neighbours a judge calls contradictory.
    for other in neighbours:
        similarity = 1 - other.distance
        if similarity < tenant.contradiction_similarity:
            break
        verdict = verdicts.get(other.pk) or judge(other.content, fact.content, tenant_id=principal.tenant_id)
        if verdict.contradictory:
            result = done(*_contradiction(principal, memory_user, other, fact, similarity, verdict,
                                          tenant.auto_resolve_gap))
            if state is not None and result.outcome == "queued_for_review":
                state.active += 1  # stored active (contested); the others replace one active fact by another
            return result

    # 6. Store, then cap.
    fact.save(force_insert=True)
    if state is None:
        evicted = _enforce_cap(principal, memory_user.pk, tenant.fact_cap)
    else:
        state.active += 1
        evicted = _enforce_cap(principal, memory_user.pk, tenant.fact_cap) if state.active > tenant.fact_cap else []
        state.active -= len(evicted)
    if any(e.pk == fact.pk for e in evicted):
        fact.status = Fact.Status.EVICTED
        return done(WriteResult("capped", fact, evicted=evicted, reason=(
            "at the cap, every other unpinned fact is as new and surer (or every other fact is pinned)")))
    return done(WriteResult("created", fact, evicted=evicted))


def _screen_key_and_metadata(principal: Principal, key, metadata, *, route: str, memory_user_id: int,
                             tenant: TenantSettings):
    """The slot name and the agent's metadata are stored verbatim too: scanned like the content (a
    secret refuses the write), and redacted string by string where the policy says so."""
    from memory_admin.services.pii import scan

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from strings(k)
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    # The strings themselves, one a line (not their JSON form, whose escapes would hide a line break).
    text = "\n".join(strings([key or "", metadata or {}]))
    if not find_pii(text):
        return key, metadata
    result = screen_text(principal, text, route=route, memory_user_id=memory_user_id)
    if not result.redacted:
        return key, metadata
    policy = tenant.pii_policy

    def redact(value):
        if isinstance(value, str):
            return scan(value, policy).content
        if isinstance(value, dict):
            return {redact(k): redact(v) for k, v in value.items()}
        if isinstance(value, list):
            return [redact(v) for v in value]
        return value

    return redact(key), redact(metadata)


def _copy(existing: Fact) -> Fact:
    """The standing fact as it was, for the audit's `before` (the columns that were read)."""
    skip = existing.get_deferred_fields() | {"search_vector"}
    return Fact(**{f.attname: getattr(existing, f.attname) for f in Fact._meta.concrete_fields
                   if f.attname not in skip})


def _touch(existing: Fact, conf: float, reason: str) -> tuple[WriteResult, Fact]:
    before = _copy(existing)
    # The row is not read back: the values written are the ones set here.
    existing.confidence, existing.updated_at = max(existing.confidence, conf), timezone.now()
    Fact.objects.filter(pk=existing.pk).update(confidence=existing.confidence, updated_at=existing.updated_at)
    return WriteResult("deduplicated", existing, reason=reason, other=existing), before


def _merge(existing: Fact, new: Fact, similarity: float) -> tuple[WriteResult, Fact]:
    before = _copy(existing)
    existing.content = new.content
    existing.content_hash = new.content_hash
    existing.embedding = new.embedding
    existing.confidence = max(existing.confidence, new.confidence)
    # The agent gets its metadata back verbatim: the standing fact keeps its own, and each write
    # folded into it is listed under "merged" (so an agent's ids for those writes are not lost).
    if new.metadata:
        merged = list(existing.metadata.get("merged", []))[-49:] + [new.metadata]
        existing.metadata = {**existing.metadata, "merged": merged}
    existing.save(update_fields=["content", "content_hash", "embedding", "confidence", "metadata", "updated_at"])
    return WriteResult("merged", existing, reason=f"near-identical (cosine {similarity:.3f}) to an active fact",
                       other=existing), before


def _update_slot(principal: Principal, slot: Fact, new: Fact, gap: float) -> tuple[WriteResult, Fact]:
    """Same key, different value: a new version of the slot, unless the standing value is much surer."""
    if slot.pinned or slot.confidence - new.confidence >= gap:
        new.status = Fact.Status.SUPERSEDED
        new.superseded_by_id = slot.pk
        why = "the slot is pinned" if slot.pinned else (
            f"the standing value is surer ({slot.confidence:.2f} vs {new.confidence:.2f})")
        new.status_reason = why
        new.save(force_insert=True)
        Edge.objects.create(tenant_id=principal.tenant_id, type=Edge.Type.CONTRADICTS, src_fact=new,
                            dst_fact=slot, created_by=principal.actor)
        return WriteResult("overruled", new, reason=why, other=slot), slot
    new.version = slot.version + 1
    new.supersedes = slot
    _supersede(slot, by=new, reason=f"key {slot.key} updated")
    new.save(force_insert=True)
    Edge.objects.create(tenant_id=principal.tenant_id, type=Edge.Type.SUPERSEDES, src_fact=new, dst_fact=slot,
                        created_by=principal.actor)
    return WriteResult("updated", new, reason=f"new value for key {slot.key}", other=slot), slot


def _contradiction(principal, memory_user, other: Fact, new: Fact, similarity: float, verdict, gap: float):
    if new.confidence - other.confidence >= gap and not other.pinned:
        new.supersedes = other
        new.version = other.version + 1
        _supersede(other, by=new, reason=f"contradicted by a surer fact: {verdict.reason}")
        new.save(force_insert=True)
        for edge_type in (Edge.Type.SUPERSEDES, Edge.Type.CONTRADICTS):
            Edge.objects.create(tenant_id=principal.tenant_id, type=edge_type, src_fact=new, dst_fact=other,
                                created_by=principal.actor)
        contradiction = Contradiction.objects.create(
            tenant_id=principal.tenant_id, memory_user=memory_user, fact_a=other, fact_b=new,
            detector=Contradiction.Detector.SEMANTIC, judge=verdict.judge, reason=verdict.reason,
            similarity=similarity, status=Contradiction.Status.AUTO_RESOLVED,
            resolution=Contradiction.Resolution.KEEP_B, resolved_by="system", resolved_at=timezone.now(),
        )
        return WriteResult("superseded_existing", new, reason=verdict.reason, other=other,
                           contradiction=contradiction), other
    if other.confidence - new.confidence >= gap or other.pinned:
        new.status = Fact.Status.SUPERSEDED
        new.superseded_by_id = other.pk
        new.status_reason = f"contradicts a surer fact: {verdict.reason}"[:300]
        new.save(force_insert=True)
        Edge.objects.create(tenant_id=principal.tenant_id, type=Edge.Type.CONTRADICTS, src_fact=new,
                            dst_fact=other, created_by=principal.actor)
        return WriteResult("overruled", new, reason=new.status_reason, other=other), other
    new.contested = True
    new.save(force_insert=True)
    Fact.objects.filter(pk=other.pk).update(contested=True)
    Edge.objects.create(tenant_id=principal.tenant_id, type=Edge.Type.CONTRADICTS, src_fact=new, dst_fact=other,
                        created_by=principal.actor)
    contradiction = Contradiction.objects.create(
        tenant_id=principal.tenant_id, memory_user=memory_user, fact_a=other, fact_b=new,
        detector=Contradiction.Detector.SEMANTIC, judge=verdict.judge, reason=verdict.reason,
        similarity=similarity,
    )
    return WriteResult("queued_for_review", new, reason=verdict.reason, other=other,
                       contradiction=contradiction), other


def _notebook_conflict(principal, memory_user, fact: Fact, threshold: float):
    chunks = (
        NotebookChunk.objects.filter(notebook__memory_user=memory_user)
        .annotate(distance=CosineDistance("embedding", fact.embedding))
        .filter(distance__lte=1 - threshold)
        .order_by("distance")[:3]
    )
    for chunk in chunks:
        verdict = judge(chunk.text, fact.content, tenant_id=principal.tenant_id)
        if verdict.contradictory:
            return chunk, verdict
    return None


def _weakest(memory_user_id: int, cap: int, grace_start: datetime, limit: int) -> list[Fact]:
    """The count of the user's active facts (`total`) and, when it is over the cap, the `limit` weakest
    unpinned ones in eviction order, in one statement (under the cap Postgres stops at the count).
    Hand-written: the ORM form of this query cost ~10 ms to compile on every write at the cap."""
    table = Fact._meta.db_table  # effective_confidence_sql() names the table's columns by table name
    columns = ", ".join(f"{table}.{f.column}" for f in Fact._meta.concrete_fields
                        if f.attname not in ("embedding", "embedding_next", "search_vector"))
    young = f"{table}.created_at >= %s"
    sql = (
        f"SELECT {columns}, total FROM {table}, "
        f"(SELECT count(*) AS total FROM {table} WHERE memory_user_id = %s AND status = %s) AS counted "
        f"WHERE {table}.memory_user_id = %s AND {table}.status = %s AND NOT {table}.pinned AND total > %s "
        f"ORDER BY (CASE WHEN {young} THEN 1 ELSE 0 END), "
        f"(CASE WHEN {young} THEN {table}.confidence ELSE {effective_confidence_sql()} END), "
        f"{table}.created_at LIMIT %s"
    )
    active = [memory_user_id, Fact.Status.ACTIVE]
    return list(Fact.objects.raw(sql, [*active, *active, cap, grace_start, grace_start, limit]))


def _enforce_cap(principal: Principal, memory_user_id: int, cap: int) -> list[Fact]:
    """Evict until the user is at the cap. Pinned facts are exempt (and do not count towards what can
    be evicted). New information is not lost to the reads that old facts have had time to collect: a
    fact younger than FACT_CAP_GRACE_HOURS goes only after every older unpinned fact. Older facts go
    lowest effective confidence first, oldest first; young ones (a burst of writes past the cap) by
    stated confidence, oldest first, so the fact just written survives unless it is the least sure."""
    grace_start = timezone.now() - timedelta(hours=settings.FACT_CAP_GRACE_HOURS)
    victims = _weakest(memory_user_id, cap, grace_start, CAP_PROBE)
    if not victims:
        return []
    excess = victims[0].total - cap
    if excess > CAP_PROBE:  # the cap was lowered: many at once
        victims = _weakest(memory_user_id, cap, grace_start, excess)
    victims = victims[:excess]
    Fact.objects.filter(pk__in=[v.pk for v in victims]).update(
        status=Fact.Status.EVICTED, status_reason="per-user cap", updated_at=timezone.now())
    for victim in victims:
        before = fact_snapshot(victim)
        victim.status = Fact.Status.EVICTED
        audit(principal, "fact.evict", outcome="evicted", target=victim, before=before,
              after=fact_snapshot(victim), reason=f"over the cap of {cap} active facts; the weakest of the oldest")
    return victims


def fact_correct(
    *, principal: Principal, fact_id, content: str, confidence: float | None = None,
    category: str | None = None, reason: str = "",
) -> Fact:
    """A new version that supersedes the fact (source user_correction). Only the newest version of a
    chain can be corrected; correcting an older one answers 409 with the current id."""
    old = writable_fact(principal, fact_id)
    check_fact_size(content)
    # Screen outside the transaction: a refusal's block record must survive the refusal.
    content = screen_text(principal, content, route="correction", memory_user_id=old.memory_user_id).content
    reason = screen_text(principal, reason, route="correction", memory_user_id=old.memory_user_id,
                         what="reason").content
    # A correction replaces a served fact at once, so it is refused rather than quarantined.
    refuse_instructions(principal, content, what="correction")
    vector = embed_one(content)
    with transaction.atomic():
        if old.memory_user_id:
            _lock_user(old.memory_user_id)
        old.refresh_from_db()
        if old.status == Fact.Status.SUPERSEDED:
            raise Conflict("This fact was already corrected; correct its newest version instead.",
                           code="already_superseded", current_id=str(old.superseded_by_id or ""))
        new = Fact(
            id=uuid.uuid4(), tenant_id=old.tenant_id, memory_user_id=old.memory_user_id, scope=old.scope,
            task_ref=old.task_ref, key=old.key, content=content, content_hash=content_hash(content),
            category=category or old.category, kind=old.kind,
            confidence=1.0 if confidence is None else confidence, importance=old.importance,
            source=Fact.Source.USER_CORRECTION, version=old.version + 1, supersedes=old,
            embedding=vector, pinned=old.pinned, valid_from=timezone.now(), metadata=old.metadata,
            agent_id=principal.agent_id, created_by=principal.actor,
        )
        before = fact_snapshot(old)
        _supersede(old, by=new, reason=reason or "corrected")
        new.save(force_insert=True)
        Edge.objects.create(tenant_id=new.tenant_id or principal.tenant_id, type=Edge.Type.SUPERSEDES,
                            src_fact=new, dst_fact=old, created_by=principal.actor)
        _close_contradictions_of(principal, old, note="superseded by a correction")
        audit(principal, "fact.correct", outcome="superseded", target=new, before=before,
              after=fact_snapshot(new), reason=reason)
    return new


def _close_contradictions_of(principal: Principal, fact: Fact, *, note: str) -> None:
    from django.db.models import Q

    open_ = Contradiction.objects.filter(Q(fact_a=fact) | Q(fact_b=fact), status=Contradiction.Status.OPEN)
    others = set()
    for c in open_:
        others.update({c.fact_a_id, c.fact_b_id})
    open_.update(status=Contradiction.Status.AUTO_RESOLVED, resolution=Contradiction.Resolution.AUTO,
                 resolved_by=principal.actor, resolved_at=timezone.now(), note=note)
    refresh_contested(others | {fact.pk})


def refresh_contested(fact_ids) -> None:
    """`contested` is true exactly while a fact is part of an open contradiction."""
    from django.db.models import Exists, OuterRef, Q

    ids = [i for i in fact_ids if i]
    if not ids:
        return
    open_q = Contradiction.objects.filter(
        Q(fact_a=OuterRef("pk")) | Q(fact_b=OuterRef("pk")), status=Contradiction.Status.OPEN
    )
    Fact.objects.filter(pk__in=ids).update(contested=Exists(open_q))


@screens("reason", route="forget")
@transaction.atomic
def fact_forget(*, principal: Principal, fact_id, reason: str = "") -> Fact:
    fact = writable_fact(principal, fact_id)
    before = fact_snapshot(fact)
    Fact.objects.filter(pk=fact.pk).update(status=Fact.Status.EVICTED, status_reason=(reason or "forgotten")[:300],
                                           pinned=False, updated_at=timezone.now())
    fact.refresh_from_db()
    _close_contradictions_of(principal, fact, note="one side was forgotten")
    audit(principal, "fact.forget", outcome="evicted", target=fact, before=before, after=fact_snapshot(fact),
          reason=reason)
    return fact


@transaction.atomic
def fact_pin(*, principal: Principal, fact_id, pinned: bool) -> Fact:
    fact = writable_fact(principal, fact_id)
    if fact.memory_user_id is None:
        principal.require(CURATE)
    before = fact_snapshot(fact)
    Fact.objects.filter(pk=fact.pk).update(pinned=pinned, updated_at=timezone.now())
    fact.refresh_from_db()
    audit(principal, "fact.pin" if pinned else "fact.unpin", outcome="updated", target=fact, before=before,
          after=fact_snapshot(fact))
    return fact


def record_access(fact_ids) -> None:
    """Reads bump access counts: accumulated in process and written about once a second as one
    statement (services.access_counts), not a write per request."""
    from memory_admin.services.access_counts import record_access as accumulate

    accumulate(fact_ids)


def fact_promote(*, principal: Principal, fact_id, to: str) -> Fact:
    """Move a fact up the scope tree (task → user → org, SPEC §3): a copy in the parent scope
    supersedes it. Promoting to the org scope is curation (admins and operators)."""
    if to not in ("user", "org"):
        raise Invalid("A fact is promoted to the user or the org scope.", field="to")
    old = writable_fact(principal, fact_id)
    order = {"task": 0, "user": 1, "org": 2, "global": 3}
    if order[to] <= order[old.scope]:
        raise Invalid(f"A {old.scope} fact cannot be promoted to {to}: promotion only moves up.", field="to")
    if to == "org":
        principal.require(CURATE)
    with transaction.atomic():
        if old.memory_user_id:
            _lock_user(old.memory_user_id)
        old.refresh_from_db()
        if old.status != Fact.Status.ACTIVE:
            raise Conflict("Only an active fact can be promoted.", code="not_active", status_now=old.status)
        new = Fact(
            id=uuid.uuid4(), tenant_id=old.tenant_id, memory_user_id=old.memory_user_id if to == "user" else None,
            scope=to, task_ref="", key=old.key, content=old.content, content_hash=old.content_hash,
            category=old.category, kind=old.kind, confidence=old.confidence, importance=old.importance,
            source=old.source, version=old.version + 1, supersedes=old, embedding=old.embedding, pinned=old.pinned,
            valid_from=old.valid_from, metadata=old.metadata, agent_id=principal.agent_id,
            created_by=principal.actor, extractor=old.extractor,
        )
        before = fact_snapshot(old)
        # The target slot may already hold this key: the promoted copy replaces it as a new version.
        if new.key:
            target = Fact.objects.filter(tenant_id=new.tenant_id, memory_user_id=new.memory_user_id, task_ref="",
                                         key=new.key, status=Fact.Status.ACTIVE).first()
            if target is not None:
                _supersede(target, by=new, reason=f"replaced by a promoted {old.scope} fact")
        _supersede(old, by=new, reason=f"promoted to {to}")
        new.save(force_insert=True)
        Edge.objects.create(tenant_id=principal.tenant_id, type=Edge.Type.SUPERSEDES, src_fact=new, dst_fact=old,
                            created_by=principal.actor)
        audit(principal, "fact.promote", outcome=to, target=new, memory_user_id=old.memory_user_id, before=before,
              after=fact_snapshot(new))
    return new
