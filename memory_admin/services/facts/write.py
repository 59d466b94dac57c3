"""The write path of SPEC §4: `fact_write` is the single entry for every new fact, whatever its origin
(agent API, extraction, dashboard, demo seed), and `fact_write_many` the same for a batch. Each step
records its outcome (a `WriteOutcome`); the API returns it.

Steps 1-3 (screening, the poisoning guard, the confidence gate) need no lock and run first
(`_prepare`); steps 4-7 (dedup, merge, the notebook, contradictions, the cap) run under the user's lock
(`_store`)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone
from pgvector import Vector
from pgvector.django import CosineDistance

from memory_admin.db.cursors import prepared_cursor, vector_cursor
from memory_admin.db.hydrate import hydrate
from memory_admin.embedding import EmbedAhead, embed_one
from memory_admin.errors import Blocked, DomainError
from memory_admin.metrics import observe_writes
from memory_admin.models import Contradiction, Edge, Fact, MemoryUser, Notebook, NotebookChunk, TenantSettings
from memory_admin.models import WriteOutcome as Outcome
from memory_admin.selectors.access import WRITE_MEMORY, Principal
from memory_admin.services.agent_text import agent_text_check
from memory_admin.services.audit import audit, buffered_audits, fact_snapshot
from memory_admin.services.entity_draw import draw_after_commit
from memory_admin.services.facts.cap import enforce_cap
from memory_admin.services.facts.checks import check_fact_size, content_hash, screen_key_and_metadata
from memory_admin.services.facts.conflicts import contradiction_record, contradiction_winner, notebook_overrule_record
from memory_admin.services.facts.subject import NAME_KEY, Claim, UserSubject
from memory_admin.services.facts.versions import continue_chain, insert_fact, link, lock_memory_user, refuse, replace
from memory_admin.services.guard import injection_reason
from memory_admin.services.judge import Verdict, judge
from memory_admin.services.pii import find as find_pii
from memory_admin.services.screening import screen_identifier, screen_text
from memory_admin.services.settings import tenant_settings

# Default confidence by source when a writer gives none (SPEC §2). `agent_stated` (what an agent
# deliberately saves, the default of every agent door) sits above the default gate (0.7), so such a
# write is stored, and below tool_verified and user_stated, so the user's own word still wins a
# contradiction against it by the default gap (0.2); `agent_inferred` (an extraction's guess) stays
# below the gate.
SOURCE_PRIOR: dict[str, float] = {
    "user_stated": 1.0,
    "user_correction": 1.0,
    "tool_verified": 0.9,
    "notebook": 1.0,
    "agent_stated": 0.8,
    "agent_inferred": 0.6,
    "recalled": 0.5,
    "external": 0.3,
}

NEIGHBOURS = 5


@dataclass(slots=True, kw_only=True)
class FactDraft:
    """One fact as a writer offers it: the keyword arguments of `fact_write`, and one item of
    `fact_write_many`."""

    content: str
    key: str | None = None
    category: str = "other"
    kind: str = "fact"
    confidence: float | None = None
    source: str = "agent_inferred"
    observed_at: datetime | None = None
    ttl_days: float | None = None
    pinned: bool = False
    importance: float = 0.5
    metadata: dict[str, Any] | None = None
    task_ref: str = ""
    extractor: str = ""
    message_id: int | None = None
    batch_id: int | None = None
    embedding: list[float] | None = None


@dataclass
class WriteResult:
    outcome: Outcome
    fact: Fact | None = None
    reason: str = ""
    other: Fact | None = None  # the existing fact involved (deduplicated into, superseded, contradicted)
    contradiction: Contradiction | None = None
    evicted: list[Fact] = field(default_factory=list)
    block_id: str | None = None  # a blocked fact of a batch: the PiiBlock recording the refusal


# What an outcome step returns: the result and the audit's `before` (None: the snapshot of `other`).
Step = tuple[WriteResult, dict[str, Any] | None]


@dataclass
class _UserState:
    """What the locked part of the write path knows of the user, read once after the lock and kept
    exact by the writes that follow under it: the number of active facts (the cap's count), whether
    the user has a notebook to contradict, and the name the user's facts give them. Lets a write skip
    the notebook query when there is none and the cap query while the user is under the cap (both would
    find nothing)."""

    active: int
    has_notebook: bool
    known_name: str | None = None  # the content of the user's active `user.name` fact (step 4d's names)


def _user_state(memory_user_id: int) -> _UserState:
    """One statement, after `lock_memory_user`: the active facts are counted as `enforce_cap` counts them.
    Prepared, as every fixed statement a write sends (parsed and planned once per connection)."""
    fact, chunk, notebook = Fact._meta.db_table, NotebookChunk._meta.db_table, Notebook._meta.db_table
    with prepared_cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT count(*) FROM {fact} WHERE memory_user_id = %s AND status = %s), "
            f"EXISTS (SELECT 1 FROM {chunk} c JOIN {notebook} n ON n.id = c.notebook_id "
            f"WHERE n.memory_user_id = %s), "
            f"(SELECT content FROM {fact} WHERE memory_user_id = %s AND status = %s AND key = %s LIMIT 1)",
            [memory_user_id, Fact.Status.ACTIVE, memory_user_id, memory_user_id, Fact.Status.ACTIVE, NAME_KEY],
        )
        active, has_notebook, known_name = cursor.fetchone()
    return _UserState(active=active, has_notebook=has_notebook, known_name=known_name)


def _locked_state(memory_user_id: int) -> _UserState:
    lock_memory_user(memory_user_id)
    return _user_state(memory_user_id)


# The columns the write path reads of a standing fact: all but the vectors (a neighbour's own vector is
# never needed, and parsing 384 floats per row was a measurable part of a write) and the tsvector.
_FACT_ATTNAMES = [f.attname for f in Fact._meta.concrete_fields if f.attname not in Fact.VECTORS]
_FACT_COLUMNS = ", ".join(f"f.{Fact._meta.get_field(name).column}" for name in _FACT_ATTNAMES)


def _slot_same_and_nearest(memory_user_id: int, fact: Fact, words: frozenset[str] = frozenset()) -> list[Fact]:
    """4a/4b, the neighbours of 4c/5b and the statements of 4d in one statement, among the user's active
    facts of the same task: the fact with the same key (the slot) and those with the same normalised
    content (branch 0), the nearest ones (branch 1; one more than needed: the slot is not a neighbour of
    its own new value), and, for a statement about the user, those sharing one of its content `words`
    (branch 2; full-text search, most in common first: the embedding alone keeps "Dana prefers neovim" and
    "The user prefers neovim over VS Code." apart, at cosine 0.51), each with its cosine distance to the
    new fact. Hand-written SQL (the ORM's union of annotated querysets cost more to compile than to
    run); the new vector is sent once, in binary."""
    exact = "f.content_hash = %s OR f.key = %s" if fact.key else "f.content_hash = %s"
    exact_params = [fact.content_hash, fact.key] if fact.key else [fact.content_hash]
    table, active = Fact._meta.db_table, "f.memory_user_id = %s AND f.status = %s AND f.task_ref = %s"
    sql = (
        f"WITH q AS (SELECT %s::vector AS v) "
        f"(SELECT {_FACT_COLUMNS}, f.embedding <=> q.v AS distance, 0 AS branch FROM {table} f, q "
        f"WHERE {active} AND ({exact})) "
        f"UNION ALL "
        f"(SELECT {_FACT_COLUMNS}, f.embedding <=> q.v AS distance, 1 AS branch FROM {table} f, q "
        f"WHERE {active} AND f.embedding IS NOT NULL ORDER BY distance ASC LIMIT {NEIGHBOURS + 1})"
    )
    slot = [memory_user_id, Fact.Status.ACTIVE.value, fact.task_ref]
    params = [Vector(fact.embedding), *slot, *exact_params, *slot]
    terms = {t for t in (re.sub(r"[^a-z0-9]", "", w) for w in words) if t}
    # The longest words (the rarest, as a rule) of a long statement: what the query costs grows with its
    # terms times the user's facts that share one (an 8 KB statement, 256 terms, 10,000 facts: 9 s).
    query = " | ".join(sorted(sorted(terms, key=lambda t: (-len(t), t))[:ABOUT_USER_WORDS]))
    if query:
        sql += (
            f" UNION ALL "
            f"(SELECT {_FACT_COLUMNS}, f.embedding <=> q.v AS distance, 2 AS branch FROM {table} f, q "
            f"WHERE {active} AND f.search_vector @@ to_tsquery('english', %s) "
            f"ORDER BY ts_rank(f.search_vector, to_tsquery('english', %s)) DESC, f.id LIMIT {ABOUT_USER})"
        )
        params += [*slot, query, query]
    # Prepared (one of four texts: with a key or without, about the user or not), rows in binary (a
    # third of the parsing).
    with vector_cursor(binary_results=True, prepared=True) as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found = hydrate(Fact, _FACT_ATTNAMES, [row[:-2] for row in rows])
    for standing, row in zip(found, rows, strict=True):
        standing.distance, standing.branch = row[-2], row[-1]
    return found


# How many of the user's facts sharing words with a statement about the user step 4d looks at, and
# by how many of its words at most: a claim of more words still finds its twin (4d needs all of them
# shared, or all but MERGE_EXTRA_WORDS).
ABOUT_USER = 5
ABOUT_USER_WORDS = 16


@dataclass
class _Pending:
    """A fact past the checks that need no lock (screening, guard, confidence gate), waiting for its
    embedding and the locked part of the write path."""

    fact: Fact
    done: Callable[..., WriteResult]
    quarantined: str = ""  # the guard's reason, when the fact is to be stored for review only
    ahead: int | None = None  # a batch's fact: the index of its text in the batch's `EmbedAhead`


def _screened(
    principal: Principal, memory_user: MemoryUser, tenant: TenantSettings, draft: FactDraft, route: str
) -> tuple[str, dict[str, Any] | None]:
    """Step 1, secrets and PII: the content and metadata safe to store; raises Blocked (after recording
    the block). Clean text (the common case) needs neither the policy nor a record."""
    content, metadata = draft.content, draft.metadata
    if find_pii(content):
        content = screen_text(principal, content, route=route, memory_user_id=memory_user.pk).content
    if draft.task_ref:
        screen_identifier(principal, draft.task_ref, what="task id", route="task_id", memory_user_id=memory_user.pk)
    if draft.key:  # a slot name is an identifier: refused, never redacted
        screen_identifier(principal, draft.key, what="fact key", route=route, memory_user_id=memory_user.pk)
        agent_text_check(draft.key, field="key", what="fact key")  # served beside the fact: the agent-text rule
    if metadata:
        _, metadata = screen_key_and_metadata(
            principal, None, metadata, route=route, memory_user_id=memory_user.pk, tenant=tenant
        )
    return content, metadata


def _new_fact(
    principal: Principal, memory_user: MemoryUser, draft: FactDraft, content: str, metadata: dict[str, Any] | None
) -> Fact:
    now = timezone.now()
    return Fact(
        id=uuid.uuid4(),
        tenant_id=principal.tenant_id,
        memory_user=memory_user,
        scope=Fact.Scope.TASK if draft.task_ref else Fact.Scope.USER,
        task_ref=draft.task_ref,
        key=draft.key or None,
        content=content,
        content_hash=content_hash(content),
        category=draft.category,
        kind=draft.kind,
        confidence=SOURCE_PRIOR.get(draft.source, 0.6) if draft.confidence is None else float(draft.confidence),
        importance=draft.importance,
        source=draft.source,
        pinned=draft.pinned,
        valid_from=draft.observed_at or now,
        soft_expires_at=(now + timedelta(days=draft.ttl_days)) if draft.ttl_days else None,
        metadata=metadata or {},
        agent_id=principal.agent_id,
        created_by=principal.actor,
        extractor=draft.extractor,
        message_id=draft.message_id,
        batch_id=draft.batch_id,
        embedding=draft.embedding,
    )


def _prepare(
    principal: Principal, memory_user: MemoryUser, tenant: TenantSettings, draft: FactDraft, route: str
) -> WriteResult | _Pending:
    """Steps 1-3 of the write path; raises Blocked (after recording the block) for secrets."""
    check_fact_size(draft.content, draft.metadata)
    content, metadata = _screened(principal, memory_user, tenant, draft, route)
    fact = _new_fact(principal, memory_user, draft, content, metadata)

    def done(result: WriteResult, before: dict[str, Any] | None = None) -> WriteResult:
        audit(
            principal,
            f"{route}.write",
            outcome=result.outcome,
            target_type="fact",
            target_id=str(result.fact.pk) if result.fact else "",
            memory_user_id=memory_user.pk,
            before=before if before is not None else fact_snapshot(result.other),
            after=fact_snapshot(result.fact) if result.fact else {"content": content, "confidence": fact.confidence},
            reason=result.reason,
        )
        draw_after_commit(result.fact)  # the fact's entities, drawn by a task once this commits
        return result

    # 2. Poisoning guard: stored for review, never served.
    reason = injection_reason(content, tenant_id=principal.tenant_id) or (
        "source is external" if draft.source == Fact.Source.EXTERNAL else None
    )
    if reason:
        return _Pending(fact, done, quarantined=reason)

    # 3. Confidence gate.
    if fact.confidence < tenant.confidence_threshold:
        return done(
            WriteResult(
                Outcome.REJECTED_LOW_CONFIDENCE,
                None,
                reason=(
                    f"confidence {fact.confidence:.2f} is below the tenant threshold {tenant.confidence_threshold:.2f}"
                ),
            )
        )
    return _Pending(fact, done)


@observe_writes
def fact_write(*, principal: Principal, memory_user: MemoryUser, route: str = "fact", **fields: Any) -> WriteResult:
    """Run one fact (`fields`: those of `FactDraft`) through the write path. Raises Blocked (after
    recording the block) for secrets; every other outcome is returned, and audited."""
    principal.require(WRITE_MEMORY)
    tenant = tenant_settings(principal.tenant_id)
    draft = FactDraft(**fields)
    ahead = _embed_while_screening(draft, tenant)
    try:
        pending = _prepare(principal, memory_user, tenant, draft, route)
        if isinstance(pending, _Pending) and pending.fact.embedding is None:
            same_text = ahead is not None and pending.fact.content == draft.content  # nothing was redacted
            pending.fact.embedding = ahead.vector(0) if same_text else embed_one(pending.fact.content)
    finally:
        if ahead is not None:
            ahead.cancel()  # a refused fact (or a redacted text) does not wait for the vector
    if isinstance(pending, WriteResult):
        return pending
    with transaction.atomic(), buffered_audits():  # the write's and its evictions' rows in one INSERT
        state = None if pending.quarantined else _locked_state(memory_user.pk)
        return _store(principal, memory_user, tenant, pending, state)


def _embed_while_screening(draft: FactDraft, tenant: TenantSettings) -> EmbedAhead | None:
    """The text of a fact that will want a vector (none given, not refused by the confidence gate),
    embedded on a helper thread while the write is screened: the screened text is almost always the
    text as given, and its vector is then ready when screening ends."""
    if draft.embedding is not None:
        return None
    confidence = SOURCE_PRIOR.get(draft.source, 0.6) if draft.confidence is None else float(draft.confidence)
    if confidence < tenant.confidence_threshold and draft.source != Fact.Source.EXTERNAL:
        return None
    ahead = EmbedAhead()
    ahead.add(draft.content)
    return ahead


def _prepare_all(
    principal: Principal, memory_user: MemoryUser, tenant: TenantSettings, drafts: list[FactDraft], route: str
) -> tuple[list[WriteResult | _Pending], EmbedAhead]:
    """Steps 1-3 for each fact of a batch; the text of each fact still to store is handed to the
    helper thread as soon as it passes, so its embedding runs while the next facts are screened and
    the earlier ones stored."""
    prepared: list[WriteResult | _Pending] = []
    ahead = EmbedAhead()
    for draft in drafts:
        try:
            item = _prepare(principal, memory_user, tenant, draft, route)
        except Blocked as exc:
            item = WriteResult(Outcome.BLOCKED, None, reason=exc.detail, block_id=exc.extra.get("block_id"))
        if isinstance(item, _Pending) and item.fact.embedding is None:
            item.ahead = ahead.add(item.fact.content)
        prepared.append(item)
    ahead.start()
    return prepared, ahead


@observe_writes
def fact_write_many(
    *, principal: Principal, memory_user: MemoryUser, facts: list[dict[str, Any] | FactDraft], route: str = "fact"
) -> list[WriteResult]:
    """Run several facts (each a `FactDraft`, or a dict of its fields) through the write path, in
    order, in one transaction under one lock of the user; the texts are embedded on a helper thread
    (`EmbedAhead`) while the facts before them are stored.

    Every fact gets its own outcome, as if written alone one after the other (a later fact dedups
    against an earlier one of the same batch). A blocked fact is reported as `blocked` with its block
    id and does not stop the others: screening runs before the transaction, so the block record is
    committed whatever happens next. A fact that fails midway leaves nothing behind and is reported as
    `error`, the others are kept (`_store_all`: the batch runs again with a savepoint per fact)."""
    principal.require(WRITE_MEMORY)
    tenant = tenant_settings(principal.tenant_id)
    drafts = [item if isinstance(item, FactDraft) else FactDraft(**item) for item in facts]
    for draft in drafts:
        check_fact_size(draft.content, draft.metadata)
    prepared, ahead = _prepare_all(principal, memory_user, tenant, drafts, route)
    try:
        return _store_all(principal, memory_user, tenant, prepared, ahead)
    finally:
        ahead.cancel()  # nothing left to cancel unless the batch failed


def _store_all(
    principal: Principal,
    memory_user: MemoryUser,
    tenant: TenantSettings,
    prepared: list[WriteResult | _Pending],
    ahead: EmbedAhead,
) -> list[WriteResult]:
    """Steps 4-7 for the prepared facts of a batch, in order, in one transaction under one lock.

    First without a savepoint per fact (two round trips each, for a failure that almost never comes);
    if a fact fails, the whole attempt is rolled back and the batch runs again with a savepoint per
    fact, so that the failing fact alone is reported as `error` and leaves nothing behind."""
    try:
        return _store_in_order(principal, memory_user, tenant, prepared, ahead, savepoints=False)
    except (DatabaseError, DomainError):
        return _store_in_order(principal, memory_user, tenant, prepared, ahead, savepoints=True)


def _store_in_order(
    principal: Principal,
    memory_user: MemoryUser,
    tenant: TenantSettings,
    prepared: list[WriteResult | _Pending],
    ahead: EmbedAhead,
    *,
    savepoints: bool,
) -> list[WriteResult]:
    results: list[WriteResult] = []
    # The audit rows of the batch are inserted together at the end of its transaction, in order.
    with transaction.atomic(), buffered_audits() as audit_events:
        state = _locked_state(memory_user.pk) if any(isinstance(p, _Pending) for p in prepared) else None
        for item in prepared:
            if isinstance(item, WriteResult):
                results.append(item)
                continue
            if item.fact.embedding is None:  # an embedding that fails fails the batch, as before
                item.fact.embedding = ahead.vector(item.ahead)
            # The attempt works on a copy: a step changes its fact (status, version, saved) as it goes.
            pending = _Pending(copy(item.fact), item.done, item.quarantined, item.ahead)
            if not savepoints:
                results.append(_store(principal, memory_user, tenant, pending, state))
                continue
            kept_events, kept_state = len(audit_events), (state.active if state else 0)
            try:
                with transaction.atomic():
                    results.append(_store(principal, memory_user, tenant, pending, state))
            except (DatabaseError, DomainError) as exc:
                del audit_events[kept_events:]  # rolled back with the fact's savepoint
                if state is not None:
                    state.active = kept_state
                results.append(WriteResult(Outcome.ERROR, None, reason=f"not stored: {type(exc).__name__}"))
    return results


# --- Steps 4-7, under the user's lock -------------------------------------------------------------


@dataclass
class _Found:
    """What step 4's one query found of the user's standing facts."""

    slot: Fact | None  # the active fact with the same key
    same: Fact | None  # an active fact with the same normalised content
    neighbours: list[Fact]  # the nearest others, nearest first (never the slot)
    about_user: list[Fact] = field(default_factory=list)  # sharing words with a statement about the user

    @classmethod
    def of(cls, memory_user_id: int, fact: Fact, words: frozenset[str] = frozenset()) -> _Found:
        found = _slot_same_and_nearest(memory_user_id, fact, words)
        exact_rows = sorted((f for f in found if f.branch == 0), key=lambda f: f.pk)
        slot = next((f for f in exact_rows if fact.key and f.key == fact.key), None)
        same = next((f for f in exact_rows if f.content_hash == fact.content_hash), None)
        neighbours = sorted(
            (f for f in found if f.branch == 1 and (slot is None or f.pk != slot.pk)), key=lambda f: f.distance
        )[:NEIGHBOURS]
        about_user = [f for f in found if f.branch == 2]
        return cls(slot, same, neighbours, about_user)


def _store(
    principal: Principal,
    memory_user: MemoryUser,
    tenant: TenantSettings,
    pending: _Pending,
    state: _UserState | None = None,
) -> WriteResult:
    """Steps 4-7 of the write path, under the user's lock (the caller holds it, in a transaction, and
    passes the `_user_state` it read after taking it; None for a quarantined fact, which needs neither)."""
    fact, done = pending.fact, pending.done
    if pending.quarantined:
        fact.status, fact.status_reason = Fact.Status.QUARANTINED, pending.quarantined[:300]
        insert_fact(fact)
        return done(WriteResult(Outcome.QUARANTINED, fact, reason=pending.quarantined))
    about = _About.of(memory_user, fact, state)
    found = _Found.of(memory_user.pk, fact, about.claim.words if about.claim else frozenset())
    about.found = found.about_user
    verdicts: dict[Any, Verdict] = {}
    step = (
        _same_or_near(principal, tenant, found, fact, verdicts, about)
        or _same_about_user(principal, found, fact, about)
        or _overruled_by_notebook(principal, memory_user, tenant, state, fact, about)
        or (_update_slot(principal, found.slot, fact, tenant.auto_resolve_gap) if found.slot else None)
        or _contradicting_neighbour(principal, tenant, found, fact, verdicts, state, about)
    )
    if step is not None:
        return done(*step)
    return done(*_create(principal, memory_user, tenant, state, fact))


@dataclass
class _About:
    """The new fact as a statement about the user: the user's names (`subject`), what it claims of them
    (`claim`), and the user's facts that share its words (`found`, step 4's branch 2)."""

    fact: Fact
    subject: UserSubject
    claim: Claim | None
    found: list[Fact] = field(default_factory=list)

    @classmethod
    def of(cls, memory_user: MemoryUser, fact: Fact, state: _UserState | None) -> _About:
        known = state.known_name if state is not None else UserSubject.known_name(memory_user.pk)
        subject = UserSubject.of(memory_user, known_name=known)
        return cls(fact, subject, subject.claim(fact.content))

    def judge(self, standing: str, *, tenant_id: int) -> Verdict:
        """The judge, on both statements with the user named one way."""
        return judge(self.subject.about(standing), self.subject.about(self.fact.content), tenant_id=tenant_id)

    def candidates(self) -> list[Fact]:
        return self.found


def _same_about_user(principal: Principal, found: _Found, fact: Fact, about: _About) -> Step | None:
    """4d. The same statement about the user, whoever wrote it ("Dana prefers neovim", "The user prefers
    neovim over VS Code.", "I prefer neovim"): the same claim touches the standing fact; between
    statements that name the user differently, one the standing fact already makes in more detail
    touches it too, and one that adds detail to a standing one (the judge seeing no disagreement)
    merges into it, with the newer text."""
    claim = about.claim
    if claim is None:
        return None
    spelling = UserSubject.spelling(fact.content)
    for other in about.candidates():
        if found.slot is not None and other.pk == found.slot.pk:
            continue  # the slot's own rule (step 4a / the key update) decides
        standing = about.subject.claim(other.content)
        if standing is None:
            continue
        if claim.same(standing):
            return _touch(other, fact.confidence, "the same statement about the user as an active fact")
        if UserSubject.spelling(other.content) == spelling:
            continue  # named alike: how much detail makes a new statement is the embedding's call (4c)
        if claim.within(standing):
            return _touch(other, fact.confidence, "an active fact says this about the user, in more detail")
        if standing.within(claim) and len(claim.words - standing.words) <= MERGE_EXTRA_WORDS:
            if not about.judge(other.content, tenant_id=principal.tenant_id).contradictory:
                return _merge(
                    other, fact, 1 - other.distance, reason="the same statement about the user, with more detail"
                )
    return None


# At most this many words of detail turn a statement into a fuller one of the same claim (step 4d).
MERGE_EXTRA_WORDS = 4


def _same_or_near(
    principal: Principal,
    tenant: TenantSettings,
    found: _Found,
    fact: Fact,
    verdicts: dict[Any, Verdict],
    about: _About,
) -> Step | None:
    """4a same key and content, 4b same content: touch the standing fact. 4c near-identical text: merge
    (newer text, higher confidence). A negation flip ("is" / "is not") embeds almost identically, so
    the judge gets a say before anything is merged away."""
    slot, same = found.slot, found.same
    if slot is not None and slot.content_hash == fact.content_hash:
        return _touch(slot, fact.confidence, "same key and same content")
    if same is not None and slot is None:
        return _touch(same, fact.confidence, "same content as an active fact")
    nearest = found.neighbours[0] if found.neighbours else None
    if slot is None and nearest is not None and 1 - nearest.distance >= tenant.dedup_similarity:
        verdicts[nearest.pk] = about.judge(nearest.content, tenant_id=principal.tenant_id)
        if not verdicts[nearest.pk].contradictory:
            return _merge(nearest, fact, 1 - nearest.distance)
    return None


def _touch(existing: Fact, conf: float, reason: str) -> Step:
    before = fact_snapshot(existing)
    # The row is not read back: the values written are the ones set here.
    existing.confidence, existing.updated_at = max(existing.confidence, conf), timezone.now()
    Fact.objects.filter(pk=existing.pk).update(confidence=existing.confidence, updated_at=existing.updated_at)
    return WriteResult(Outcome.DEDUPLICATED, existing, reason=reason, other=existing), before


def _merge(existing: Fact, new: Fact, similarity: float, reason: str = "") -> Step:
    before = fact_snapshot(existing)
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
    return WriteResult(
        Outcome.MERGED,
        existing,
        reason=reason or f"near-identical (cosine {similarity:.3f}) to an active fact",
        other=existing,
    ), before


def _overruled_by_notebook(
    principal: Principal,
    memory_user: MemoryUser,
    tenant: TenantSettings,
    state: _UserState | None,
    fact: Fact,
    about: _About,
) -> Step | None:
    """5. Contradiction with the notebook: the notebook wins."""
    if state is not None and not state.has_notebook:
        return None
    chunks = (
        NotebookChunk.objects.filter(notebook__memory_user=memory_user)
        .annotate(distance=CosineDistance("embedding", fact.embedding))
        .filter(distance__lte=1 - tenant.contradiction_similarity)
        .order_by("distance")[:3]
    )
    for chunk in chunks:
        verdict = about.judge(chunk.text, tenant_id=principal.tenant_id)
        if verdict.contradictory:
            break
    else:
        return None
    fact.status = Fact.Status.SUPERSEDED
    fact.superseded_by_notebook_id = chunk.revision_id
    fact.status_reason = f"contradicts the notebook: {verdict.reason}"[:300]
    insert_fact(fact)
    notebook_overrule_record(principal, fact, revision_id=chunk.revision_id, excerpt=chunk.text[:500], verdict=verdict)
    return WriteResult(Outcome.OVERRULED, fact, reason="the notebook says otherwise; the notebook wins"), None


def _update_slot(principal: Principal, slot: Fact, new: Fact, gap: float) -> Step:
    """Same key, different value: a new version of the slot, unless the standing value wins (pinned,
    or surer by the tenant's gap)."""
    if contradiction_winner(standing=slot, challenger=new, gap=gap) is slot:
        why = (
            "the slot is pinned"
            if slot.pinned
            else (f"the standing value is surer ({slot.confidence:.2f} vs {new.confidence:.2f})")
        )
        refuse(principal, new, by=slot, reason=why)
        return WriteResult(Outcome.OVERRULED, new, reason=why, other=slot), fact_snapshot(slot)
    continue_chain(new, slot)
    replace(principal, slot, by=new, reason=f"key {slot.key} updated")
    return WriteResult(Outcome.UPDATED, new, reason=f"new value for key {slot.key}", other=slot), fact_snapshot(slot)


def _contradicting_neighbour(
    principal: Principal,
    tenant: TenantSettings,
    found: _Found,
    fact: Fact,
    verdicts: dict[Any, Verdict],
    state: _UserState | None,
    about: _About,
) -> Step | None:
    """5b. The first semantic neighbour a judge calls contradictory; then the first statement with the
    user as its subject, named otherwise ("Dana prefers helix" against "The user prefers neovim"; step
    4d's candidates), it calls so. Such a pair was found by its words, not by its meaning, so a person
    decides it: it goes to review whatever the confidence gap or a pin."""
    step, judged = None, {found.slot.pk} if found.slot else set()
    for other in found.neighbours:
        similarity = 1 - other.distance
        if similarity < tenant.contradiction_similarity:
            break
        judged.add(other.pk)
        verdict = verdicts.get(other.pk) or about.judge(other.content, tenant_id=principal.tenant_id)
        if verdict.contradictory:
            step = _contradiction(principal, other, fact, similarity, verdict, tenant.auto_resolve_gap)
            break
    if step is None and about.claim is not None and not about.claim.possessive:
        spelling = UserSubject.spelling(fact.content)
        for other in about.candidates():
            if other.pk in judged or UserSubject.spelling(other.content) == spelling:
                continue  # judged already, or named alike (then the embedding found what it could)
            standing = about.subject.claim(other.content)
            if standing is None or standing.possessive:
                continue
            verdict = about.judge(other.content, tenant_id=principal.tenant_id)
            if verdict.contradictory:
                step = _contradiction(principal, other, fact, 1 - other.distance, verdict, None)
                break
    if step is not None and state is not None and step[0].outcome == Outcome.QUEUED_FOR_REVIEW:
        state.active += 1  # stored active (contested); the others replace one active fact by another
    return step


def _contradiction(
    principal: Principal, other: Fact, new: Fact, similarity: float, verdict: Verdict, gap: float | None
) -> Step:
    """`gap`: the tenant's auto_resolve_gap; None: a person decides (the pair goes to review)."""
    winner = None if gap is None else contradiction_winner(standing=other, challenger=new, gap=gap)
    if winner is other:
        refuse(principal, new, by=other, reason=f"contradicts a surer fact: {verdict.reason}")
        return WriteResult(Outcome.OVERRULED, new, reason=new.status_reason, other=other), fact_snapshot(other)
    if winner is new:
        continue_chain(new, other)
        replace(principal, other, by=new, reason=f"contradicted by a surer fact: {verdict.reason}")
        link(principal, Edge.Type.CONTRADICTS, new, other)
        outcome = Outcome.SUPERSEDED_EXISTING
    else:
        new.contested = True
        insert_fact(new)
        Fact.objects.filter(pk=other.pk).update(contested=True)
        link(principal, Edge.Type.CONTRADICTS, new, other)
        outcome = Outcome.QUEUED_FOR_REVIEW
    contradiction = contradiction_record(
        principal,
        fact_a=other,
        fact_b=new,
        detector=Contradiction.Detector.SEMANTIC,
        verdict=verdict,
        similarity=similarity,
        winner=winner,
        resolved_by="system",
    )
    return (
        WriteResult(outcome, new, reason=verdict.reason, other=other, contradiction=contradiction),
        fact_snapshot(other),
    )


def _create(
    principal: Principal, memory_user: MemoryUser, tenant: TenantSettings, state: _UserState | None, fact: Fact
) -> Step:
    """6. Store, then cap."""
    insert_fact(fact)
    if state is None:
        evicted = enforce_cap(principal, memory_user.pk, tenant.fact_cap)
    else:
        state.active += 1
        evicted = enforce_cap(principal, memory_user.pk, tenant.fact_cap) if state.active > tenant.fact_cap else []
        state.active -= len(evicted)
    if any(e.pk == fact.pk for e in evicted):
        fact.status = Fact.Status.EVICTED
        return WriteResult(
            Outcome.CAPPED,
            fact,
            evicted=evicted,
            reason=("at the cap, every other unpinned fact is as new and surer (or every other fact is pinned)"),
        ), None
    return WriteResult(Outcome.CREATED, fact, evicted=evicted), None
