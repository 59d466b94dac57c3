"""The extraction pipeline (SPEC §5): debounced, durable, exactly-once per message.

State lives in the database, never only in the broker:

* `Thread.extract_due_at` is the debounce deadline. Posting a message pushes it to now + the tenant's
  window; `close` sets it to now. Nothing else schedules extraction.
* The sweeper (beat, every ~2 s) turns due threads into an `ExtractionBatch` holding all of the thread's
  unextracted messages (one LLM call per batch), then dispatches `run_batch(batch_id)`.
* A batch is claimed with SELECT ... FOR UPDATE SKIP LOCKED and a lease (`lease_until`, token =
  `attempts`). Only the holder of the current token may write results, and it writes every fact, the
  messages' status and the batch's `done` in ONE transaction. A worker killed at any point leaves
  either nothing or everything; a duplicate delivery finds the batch claimed or done and returns;
  a worker whose lease expired finds a newer token and throws its result away.
* A lost task (SIGKILL: the embedded broker does not redeliver) or an expired lease is recovered
  by the sweeper, which re-dispatches. Each dispatch is recorded (`dispatched_at`): a batch whose
  message still waits in the queue is never sent again, however long the queue (duplicates filled a
  slow queue faster than it drained: a livelock). Retries are bounded by `EXTRACTION_MAX_ATTEMPTS` (worker deaths
  count) with exponential backoff held in the database (`lease_until` of a pending batch), so no
  worker sleeps and a restart loses no retry.

Batch states: pending (`lease_until` = not dispatched before then; `dispatched_at` = sent then) → running
(`lease_until` = lease expiry) → done | failed. Failed batches keep their messages `pending`, visible
in the dashboard with the reason, until `batch_retry`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError, connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone
from pydantic import ValidationError

from extraction import broker, conf, llm, rules
from extraction.schemas import (
    EXTRACTION_SYSTEM,
    SUMMARY_SYSTEM,
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelation,
    SummaryOutput,
    parse_extraction,
    parse_graph,
    schema_problem,
)
from memory_admin import celery as celery_module
from memory_admin import metrics, requestlog
from memory_admin.celery import INTERACTIVE
from memory_admin.embedding import embed
from memory_admin.errors import Blocked, DomainError
from memory_admin.models import Episode, ExtractionBatch, Fact, LlmCall, Message, TenantSettings, Thread
from memory_admin.models.entities import fold_name
from memory_admin.selectors.access import Principal
from memory_admin.services.agent_text import agent_text_problem
from memory_admin.services.audit import audit
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import WriteResult, content_hash, fact_write
from memory_admin.services.pii import scrub
from memory_admin.services.settings import tenant_settings

log = logging.getLogger(__name__)

PENDING, RUNNING, DONE, FAILED = (
    ExtractionBatch.Status.PENDING,
    ExtractionBatch.Status.RUNNING,
    ExtractionBatch.Status.DONE,
    ExtractionBatch.Status.FAILED,
)
# A context block the agent was given (memory_admin.retrieval.context) and echoed back verbatim.
_RECALLED_BLOCK = re.compile(r"<<<MEMORY_DATA\s*\w*>>>.*?(?:<<<END_MEMORY_DATA\s*\w*>>>|\Z)", re.S)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
# Roles whose words are not the user's: what they repeat from memory is not news.
_ECHO_ROLES = {Message.Role.ASSISTANT, Message.Role.TOOL}


def extractor_name() -> str:
    """`llm:<model>` when an API key is configured, else the offline rules extractor."""
    from django.conf import settings

    return f"llm:{settings.OPENAI_MODEL}" if llm.configured() else rules.NAME


# --------------------------------------------------------------------------------------------------
# Planning: due threads → batches


def plan_thread(thread_id: int, *, now: datetime | None = None, force: bool = False) -> int | None:
    """Turn a due thread's unextracted messages into one batch (or skip them when the tenant's kill
    switch is off). Returns the new batch id. Safe to call concurrently: the thread row is claimed
    with SKIP LOCKED, and a thread that is not due (or already planned) is left alone."""
    now = now or timezone.now()
    with transaction.atomic():
        qs = Thread.objects.select_for_update(skip_locked=True).filter(pk=thread_id)
        if not force:
            qs = qs.filter(extract_due_at__lte=now)
        thread = qs.first()
        if thread is None:
            return None
        Thread.objects.filter(pk=thread.pk).update(extract_due_at=None)
        pending = Message.objects.filter(thread=thread, status=Message.Status.PENDING, batch__isnull=True)
        rows = list(pending.order_by("id").values_list("id", "request_id"))
        ids = [pk for pk, _ in rows]
        if not ids:
            return None
        if not tenant_settings(thread.tenant_id).extraction_enabled:
            # Kill switch: messages stay in the log, are never sent to a model, and are not queued
            # for later either (turning extraction back on must not replay a flood of old messages).
            Message.objects.filter(id__in=ids).update(status=Message.Status.SKIPPED, skip_reason="extraction_disabled")
            return None
        batch = ExtractionBatch.objects.create(
            tenant_id=thread.tenant_id,
            memory_user_id=thread.memory_user_id,
            thread=thread,
            status=PENDING,
            message_count=len(ids),
            extractor=extractor_name(),
            request_ids=sorted({rid for _, rid in rows if rid}),
            lease_until=now + timedelta(seconds=conf.get("EXTRACTION_REDISPATCH_SECONDS")),
        )
        Message.objects.filter(id__in=ids).update(batch=batch)
    return batch.pk


def plan_due_threads(*, now: datetime | None = None, limit: int = 200) -> list[int]:
    now = now or timezone.now()
    due = list(
        Thread.objects.filter(extract_due_at__lte=now).order_by("extract_due_at").values_list("pk", flat=True)[:limit]
    )
    return [bid for tid in due if (bid := plan_thread(tid, now=now)) is not None]


def _lost_before(now: datetime) -> datetime:
    """A pending batch's run_batch message sent before this moment is lost: it was sent more than
    EXTRACTION_REDISPATCH_SECONDS ago, and the interactive queue no longer holds anything sent before
    it (its oldest waiting message is younger), so a worker took it and the batch is still not claimed
    (the worker died, or the message was dropped). While the queue is backed up, a message waiting in
    it is never duplicated, however long it waits. Without queue figures (the broker unreachable, or
    one that cannot tell) the age alone decides. The queue's clock and ours are compared with a margin
    of two seconds (each reading is a little late)."""

    before = now - timedelta(seconds=conf.get("EXTRACTION_REDISPATCH_SECONDS"))
    waiting = broker.queue_stats().get(INTERACTIVE)
    if waiting and waiting["depth"] and waiting["oldest_age_seconds"] is not None:
        before = min(before, timezone.now() - timedelta(seconds=waiting["oldest_age_seconds"] + 2))
    return before


def recover_batches(*, now: datetime | None = None, limit: int = 200, planned: list[int] = ()) -> list[int]:
    """Batches to dispatch: pending ones never sent (or whose backoff is over), pending ones whose
    message was lost (`_lost_before`), and running ones whose worker's lease expired (or failed, once
    they have used all their attempts). Returns their ids; `dispatched_at` is cleared until sent."""
    now = now or timezone.now()
    max_attempts = int(conf.get("EXTRACTION_MAX_ATTEMPTS"))
    due = Q(lease_until__lte=now) | Q(lease_until__isnull=True)
    unsent_or_lost = Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=_lost_before(now))
    out: list[int] = []
    with transaction.atomic():
        rows = list(
            ExtractionBatch.objects.select_for_update(skip_locked=True)
            .filter((Q(status=PENDING) & due & unsent_or_lost) | (Q(status=RUNNING) & due))
            .exclude(pk__in=planned)  # this sweep's own, about to be sent
            .order_by("pk")[:limit]
        )
        for batch in rows:
            if batch.status == RUNNING:
                reason = f"attempt {batch.attempts}: the worker was lost (lease expired)"
                if batch.attempts >= max_attempts:
                    _fail_locked(batch, f"gave up after {batch.attempts} attempts; last: {reason}")
                    continue
                batch.error = reason
            elif batch.dispatched_at is not None:
                log.info("batch %s: its run_batch sent at %s was lost; sending again", batch.pk, batch.dispatched_at)
            batch.status = PENDING
            batch.dispatched_at = None
            batch.lease_until = now + timedelta(seconds=conf.get("EXTRACTION_REDISPATCH_SECONDS"))
            batch.save(update_fields=["status", "lease_until", "error", "dispatched_at"])
            out.append(batch.pk)
    return out


def sweep() -> dict[str, int]:
    """One beat tick: plan due threads, recover lost work, dispatch (each batch once)."""
    planned = plan_due_threads()
    recovered = recover_batches(planned=planned)
    celery_module.dispatch_batches(planned + recovered)
    return {"planned": len(planned), "recovered": len(recovered)}


# --------------------------------------------------------------------------------------------------
# Running one batch


@dataclass
class _Input:
    index: int
    message: Message
    text: str


@dataclass
class _Candidate:
    content: str
    category: str
    kind: str
    confidence: float
    key: str | None
    message: Message | None
    source: str
    # What the fact names and states, for the graph layer (SPEC §12).
    entities: tuple[EntityMention, ...] = ()
    relations: tuple[RelationDraft, ...] = ()


@dataclass
class BatchOutcome:
    batch_id: int
    status: str
    reason: str = ""
    outcomes: dict[str, int] = field(default_factory=dict)


def _claim(batch_id: int) -> tuple[ExtractionBatch, int] | None:
    now = timezone.now()
    with transaction.atomic():
        batch = (
            ExtractionBatch.objects.select_for_update(skip_locked=True)
            .filter(pk=batch_id)
            .filter(Q(status=PENDING) | Q(status=RUNNING, lease_until__lte=now))
            .first()
        )
        if batch is None:
            return None  # done, failed, or another worker holds a live lease: a duplicate delivery
        if batch.attempts >= int(conf.get("EXTRACTION_MAX_ATTEMPTS")):
            _fail_locked(batch, f"gave up after {batch.attempts} attempts; last: {batch.error or 'unknown'}")
            return None
        batch.status = RUNNING
        batch.attempts += 1
        batch.lease_until = now + timedelta(seconds=conf.lease_seconds())
        batch.started_at = batch.started_at or now
        batch.dispatched_at = None  # its message is consumed: pending again, it needs a new one
        batch.save(update_fields=["status", "attempts", "lease_until", "started_at", "dispatched_at"])
    return batch, batch.attempts


def _owned(batch_id: int, token: int):
    """The batch row, locked, if this worker still holds the lease `token`; else None."""
    return ExtractionBatch.objects.select_for_update().filter(pk=batch_id, status=RUNNING, attempts=token).first()


def _totals(batch_id: int) -> dict:
    sums = ExtractionBatch.objects.get(pk=batch_id).calls.aggregate(
        p=Sum("prompt_tokens"), c=Sum("completion_tokens"), cost=Sum("cost_usd")
    )
    return {"prompt_tokens": sums["p"] or 0, "completion_tokens": sums["c"] or 0, "cost_usd": sums["cost"] or 0}


def _finish(batch: ExtractionBatch, status: str, *, error: str = "", **fields: object) -> None:
    """End a batch (its lease released, its model use summed) as `status`; `fields` are the others
    set at the end (extractor, model, fact count)."""
    batch.status = status
    batch.error = error[:2000]
    batch.lease_until = None
    batch.finished_at = timezone.now()
    for name, value in {**fields, **_totals(batch.pk)}.items():
        setattr(batch, name, value)
    batch.save(
        update_fields=[
            "status",
            "error",
            "lease_until",
            "finished_at",
            "prompt_tokens",
            "completion_tokens",
            "cost_usd",
            *fields,
        ]
    )


def _fail_locked(batch: ExtractionBatch, reason: str) -> None:
    _finish(batch, FAILED, error=reason)
    audit(
        Principal.system(batch.tenant_id, actor="extraction"),
        "extraction.batch",
        outcome="failed",
        target=batch,
        reason=batch.error,
    )


def _retry_or_fail(batch_id: int, token: int, reason: str, *, retryable: bool, retry_after: float | None) -> str:
    with transaction.atomic():
        batch = _owned(batch_id, token)
        if batch is None:
            return "lost"
        max_attempts = int(conf.get("EXTRACTION_MAX_ATTEMPTS"))
        if not retryable or batch.attempts >= max_attempts:
            prefix = "" if not retryable else f"gave up after {batch.attempts} attempts; last: "
            _fail_locked(batch, prefix + reason)
            return FAILED
        delay = min(
            conf.get("EXTRACTION_BACKOFF_SECONDS") * 2 ** (batch.attempts - 1),
            conf.get("EXTRACTION_BACKOFF_MAX_SECONDS"),
        )
        if retry_after:
            delay = min(max(delay, retry_after), conf.get("EXTRACTION_BACKOFF_MAX_SECONDS"))
        batch.status = PENDING
        batch.error = f"attempt {batch.attempts}: {reason}"[:2000]
        # The sweeper dispatches the retry once this moment has passed: backoff survives restarts.
        batch.lease_until = timezone.now() + timedelta(seconds=delay)
        for name, value in _totals(batch.pk).items():
            setattr(batch, name, value)
        batch.save(update_fields=["status", "error", "lease_until", "prompt_tokens", "completion_tokens", "cost_usd"])
        return PENDING


def _recall_filter(batch: ExtractionBatch, messages: list[Message]) -> tuple[list[_Input], dict[int, str]]:
    """Gate recalled memory: context blocks pasted back, and assistant/tool sentences that repeat an
    active fact, are not extraction input. Returns the inputs and {message id: skip reason}."""
    import numpy as np

    skipped: dict[int, str] = {}
    texts: dict[int, str] = {}
    for message in messages:
        if message.role == Message.Role.SYSTEM:
            skipped[message.pk] = "system_prompt"  # describes the agent, not the user
            continue
        text = _RECALLED_BLOCK.sub(" ", message.content).strip()
        if not text:
            skipped[message.pk] = "recalled_memory"
            continue
        texts[message.pk] = text

    echo_candidates = [
        (m.pk, s)
        for m in messages
        if m.pk in texts and m.role in _ECHO_ROLES
        for s in _SENTENCES.split(texts[m.pk])
        if s.strip()
    ]
    if echo_candidates:
        active = list(
            Fact.objects.for_user(batch.memory_user_id)
            .active()
            .filter(embedding__isnull=False)
            .values_list("content_hash", "embedding")
        )
        if active:
            hashes = {h for h, _ in active}
            matrix = np.array([list(e) for _, e in active], dtype=np.float32)
            vectors = np.array(embed([s for _, s in echo_candidates]), dtype=np.float32)
            best = (vectors @ matrix.T).max(axis=1)
            threshold = conf.get("EXTRACTION_ECHO_SIMILARITY")
            kept: dict[int, list[str]] = {}
            for (message_id, sentence), similarity in zip(echo_candidates, best, strict=True):
                if content_hash(sentence) in hashes or similarity >= threshold:
                    continue
                kept.setdefault(message_id, []).append(sentence.strip())
            for message_id in {mid for mid, _ in echo_candidates}:
                if message_id in kept:
                    texts[message_id] = " ".join(kept[message_id])
                else:
                    texts.pop(message_id)
                    skipped[message_id] = "recalled_memory"

    inputs = [_Input(i, m, texts[m.pk]) for i, m in enumerate(m for m in messages if m.pk in texts)]
    return inputs, skipped


def _transcript(inputs: list[_Input]) -> str:
    return "\n".join(f"[{i.index}] {i.message.role} ({i.message.created_at:%Y-%m-%d %H:%M}): {i.text}" for i in inputs)


def _source_for(message: Message | None, kind: str) -> str:
    if message is not None and message.role == Message.Role.USER and kind != "inference":
        return Fact.Source.USER_STATED
    return Fact.Source.AGENT_INFERRED


def _llm_candidates(batch: ExtractionBatch, inputs: list[_Input]) -> list[_Candidate]:
    """One LLM call over the whole batch. Raises on failure (the caller classifies and retries)."""
    data, call = llm.complete_json(
        tenant_id=batch.tenant_id,
        layer="extraction",
        system=EXTRACTION_SYSTEM,
        user="Conversation:\n" + _transcript(inputs),
        batch_id=batch.pk,
    )
    try:
        facts, updates, dropped = parse_extraction(data)
    except ValidationError as exc:  # the envelope itself is wrong
        # Our words only (`schema: facts must be a list`): pydantic's message quotes the model's answer.
        malformed = llm.MalformedOutput(schema_problem(exc))
        # Valid JSON, useless answer: the call still cost money, and it counts as a failed one.
        LlmCall.objects.filter(pk=call.pk).update(ok=False, error=llm.call_error(malformed)[:300])
        raise malformed from None
    entities, relations, graph_dropped = parse_graph(data)
    if dropped + graph_dropped:
        log.info(
            "batch %s: %d extracted items did not match the schema and were dropped", batch.pk, dropped + graph_dropped
        )
    by_index = {i.index: i.message for i in inputs}
    out: list[_Candidate] = []
    for f in facts:
        message = by_index.get(f.message) if f.message is not None else None
        mentions, stated = _graph_of(f, entities, relations)
        out.append(
            _Candidate(
                f.content,
                f.category,
                f.kind,
                f.confidence,
                f.key,
                message,
                _source_for(message, f.kind),
                entities=mentions,
                relations=stated,
            )
        )
    for u in updates:
        message = by_index.get(u.message) if u.message is not None else None
        out.append(
            _Candidate(
                u.statement, "personal", "fact", u.confidence, f"user.{u.key}", message, _source_for(message, "fact")
            )
        )
    return out


def _graph_of(
    fact: ExtractedFact, entities: list[ExtractedEntity], relations: list[ExtractedRelation]
) -> tuple[tuple[EntityMention, ...], tuple[RelationDraft, ...]]:
    """The model's entities this fact names, each in its role (subject / object of a relation the fact
    states, else mentioned), and those relations."""
    known = {fold_name(e.name): e for e in entities}
    stated = [r for r in relations if r.fact == fact._position]
    roles: dict[str, str] = {fold_name(name): "mentioned" for name in fact.entities}
    for relation in stated:
        roles[fold_name(relation.object)] = "object"
    for relation in stated:
        roles[fold_name(relation.subject)] = "subject"
    names = {fold_name(n): n for n in [*fact.entities, *(r.subject for r in stated), *(r.object for r in stated)]}
    mentions = []
    for key, role in roles.items():
        if not key:
            continue
        entity = known.get(key)
        name = entity.name if entity else names[key]
        aliases = tuple(entity.aliases) if entity else ()
        mentions.append(EntityMention(name, entity.type if entity else "other", role, aliases))
    return tuple(mentions), tuple(RelationDraft(r.subject, r.type, r.object) for r in stated)


def _rules_candidates(inputs: list[_Input]) -> list[_Candidate]:
    by_index = {i.index: i.message for i in inputs}
    return [
        _Candidate(
            f.content,
            f.category,
            f.kind,
            f.confidence,
            f.key,
            by_index[f.message_index],
            _source_for(by_index[f.message_index], f.kind),
            entities=f.entities,
            relations=f.relations,
        )
        # Each message's time dates what it says ("yesterday" → the day before it was posted).
        for f in rules.extract(
            [(i.index, i.message.role, i.text) for i in inputs],
            times={i.index: i.message.created_at for i in inputs},
        )
    ]


@metrics.observe_batch
@requestlog.batch_request_ids
def run_batch(batch_id: int) -> BatchOutcome:
    """Claim a batch and extract it: one LLM call (or the offline rules), then every fact through
    `fact_write`, in one transaction with the messages' status and the batch's completion."""
    claimed = _claim(batch_id)
    if claimed is None:
        return BatchOutcome(batch_id, "not_claimed")
    batch, token = claimed
    messages = list(Message.objects.filter(batch=batch, status=Message.Status.PENDING).order_by("created_at", "id"))
    try:
        inputs, skipped = _recall_filter(batch, messages)
        use_llm = llm.configured()
        candidates: list[_Candidate] = []
        if inputs:
            candidates = _llm_candidates(batch, inputs) if use_llm else _rules_candidates(inputs)
    except Exception as exc:  # noqa: BLE001 - every failure is classified, recorded and bounded
        retryable, reason, retry_after = llm.classify(exc)
        if not isinstance(exc, llm.MalformedOutput) and type(exc).__module__.split(".")[0] != "openai":
            # Our own bug or a database hiccup, not the model: retry (bounded) but log loudly.
            log.exception("batch %s failed outside the LLM call", batch_id)
            retryable = True
        status = _retry_or_fail(batch_id, token, reason, retryable=retryable, retry_after=retry_after)
        return BatchOutcome(batch_id, status, reason)
    return _commit(batch_id, token, candidates, skipped, model=llm_model() if use_llm else "")


def llm_model() -> str:
    from django.conf import settings

    return settings.OPENAI_MODEL


def _link_entities(principal: Principal, fact: Fact, candidate: _Candidate, batch_id: int) -> None:
    """The graph layer of one fact, in its own savepoint: a failure there costs the fact's entities,
    never the fact or the batch."""
    try:
        with transaction.atomic():
            fact_entities_link(
                principal=principal, fact=fact, mentions=candidate.entities, relations=candidate.relations
            )
    except (DatabaseError, DomainError):
        log.warning("batch %s: the entities of fact %s were not linked", batch_id, fact.pk, exc_info=True)


def _commit(
    batch_id: int, token: int, candidates: list[_Candidate], skipped: dict[int, str], *, model: str
) -> BatchOutcome:
    # Drop what carries no information (a redacted placeholder) before paying for embeddings.
    candidates = [c for c in candidates if "[REDACTED:" not in c.content and c.content.strip()]
    # Embeddings outside the transaction: the row locks below are held for as short a time as possible.
    vectors = embed([c.content for c in candidates]) if candidates else []
    outcomes: dict[str, int] = {}
    with transaction.atomic():
        batch = _owned(batch_id, token)
        if batch is None:
            # Our lease expired and someone else took over (or an operator intervened): their
            # result counts, ours is discarded, nothing was written.
            return BatchOutcome(batch_id, "lost")
        extractor = f"llm:{model}" if model else rules.NAME
        principal = Principal.system(batch.tenant_id, actor=f"extraction:{extractor}")
        memory_user = batch.memory_user
        new_fact_ids: list = []
        for candidate, vector in zip(candidates, vectors, strict=True):
            try:
                result: WriteResult = fact_write(
                    principal=principal,
                    memory_user=memory_user,
                    content=candidate.content,
                    key=candidate.key,
                    category=candidate.category,
                    kind=candidate.kind,
                    confidence=candidate.confidence,
                    source=candidate.source,
                    route="extraction",
                    extractor=extractor,
                    message_id=candidate.message.pk if candidate.message else None,
                    batch_id=batch.pk,
                    embedding=vector,
                    observed_at=candidate.message.created_at if candidate.message else None,
                )
            except Blocked:
                # The scan refused it and recorded the block; the secret is not stored anywhere.
                outcomes["blocked"] = outcomes.get("blocked", 0) + 1
                continue
            except DomainError as exc:
                outcomes[exc.code] = outcomes.get(exc.code, 0) + 1
                continue
            outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
            if result.fact is not None and result.outcome.stored:
                new_fact_ids.append(result.fact.pk)
            if result.fact is not None and candidate.entities:
                _link_entities(principal, result.fact, candidate, batch_id)
        for message_id, reason in skipped.items():
            Message.objects.filter(pk=message_id, batch=batch).update(status=Message.Status.SKIPPED, skip_reason=reason)
        Message.objects.filter(batch=batch, status=Message.Status.PENDING).update(status=Message.Status.EXTRACTED)
        # Messages already part of an episode (a thread closed while this batch was retrying): the
        # facts drawn from them belong to that episode too.
        for episode in Episode.objects.filter(messages__batch=batch).distinct():
            episode.facts.add(*Fact.objects.filter(pk__in=new_fact_ids, message__episode=episode))
        _finish(batch, DONE, extractor=extractor, model=model, fact_count=len(new_fact_ids))
        audit(
            principal,
            "extraction.batch",
            outcome="done",
            target=batch,
            after={
                "messages": batch.message_count,
                "skipped": len(skipped),
                "outcomes": outcomes,
                "prompt_tokens": batch.prompt_tokens,
                "completion_tokens": batch.completion_tokens,
                "cost_usd": str(batch.cost_usd),
            },
        )
    log.info(
        "batch %s done: %d new facts",
        batch_id,
        len(new_fact_ids),
        extra={"batch_id": batch_id, "fact_ids": [str(pk) for pk in new_fact_ids], "outcomes": outcomes},
    )
    return BatchOutcome(batch_id, DONE, outcomes=outcomes)


# --------------------------------------------------------------------------------------------------
# Episodes


def _advisory_key(kind: str, pk: int) -> str:
    return f"memory_admin:{kind}:{pk}"


class _AdvisoryLock:
    """A session-level Postgres advisory lock: one builder per thread at a time, across workers, and
    released by Postgres itself if the worker dies."""

    def __init__(self, key: str):
        self.key = key
        self.held = False

    def __enter__(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [self.key])
            self.held = bool(cursor.fetchone()[0])
        return self.held

    def __exit__(self, *exc) -> None:
        if self.held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [self.key])


def _summarize(thread: Thread, messages: list[Message]) -> tuple[str, str, str]:
    """(summary, outcome, summarizer): the model when configured and allowed, else extractive."""
    pairs = [(m.role, m.content) for m in messages]
    settings_ = tenant_settings(thread.tenant_id)
    if llm.configured() and settings_.extraction_enabled:
        budget = int(conf.get("EXTRACTION_MAX_INPUT_CHARS"))
        transcript = "\n".join(f"{m.role}: {m.content}" for m in messages)[-budget:]
        try:
            data, _ = llm.complete_json(
                tenant_id=thread.tenant_id, layer="summary", system=SUMMARY_SYSTEM, user=transcript
            )
            parsed = SummaryOutput.model_validate(data)
            # The model read the raw transcript: a summary it was talked into is not served to agents
            # (the agent-text rule, on the summary as it will be stored: scrubbed by the tenant's policy).
            problem = agent_text_problem(
                scrub(parsed.summary, settings_.pii_policy), prose=True, tenant_id=thread.tenant_id
            )
            if problem is None:
                return parsed.summary, parsed.outcome, f"llm:{llm_model()}"
            log.warning("episode summary of thread %s was %s; summarised by rules", thread.pk, problem)
        except ValidationError as exc:
            # Never pydantic's message (it quotes the model's answer, i.e. the conversation): ours.
            log.warning("episode summary of thread %s fell back to rules: %s", thread.pk, schema_problem(exc))
        except Exception as exc:  # noqa: BLE001 - an episode without a model summary beats no episode
            _, reason, _ = llm.classify(exc)  # a class and a status, never the server's text
            log.warning("episode summary of thread %s fell back to rules: %s", thread.pk, reason)
    return rules.summarize(pairs), rules.outcome_of(pairs), rules.NAME


def episode_build(thread_id: int, *, outcome: str | None = None) -> Episode | None:
    """Make the thread's messages that belong to no episode yet into one Episode (time range,
    summary, outcome, messages, facts drawn from them). Facts extracted later (a retried batch) are
    linked when their batch completes. Idempotent and safe against concurrent builders."""
    with _AdvisoryLock(_advisory_key("episode", thread_id)) as held:
        if not held:
            return None
        thread = Thread.objects.filter(pk=thread_id).first()
        if thread is None:
            return None
        messages = list(Message.objects.filter(thread=thread, episode__isnull=True).order_by("created_at", "id"))
        if not messages:
            return None
        summary, guessed, summarizer = _summarize(thread, messages)
        # Messages are stored redacted, but a model's summary is text we did not screen: scrub it.
        summary = scrub(summary, tenant_settings(thread.tenant_id).pii_policy)
        ids = [m.pk for m in messages]
        with transaction.atomic():
            episode = Episode.objects.create(
                tenant_id=thread.tenant_id,
                memory_user_id=thread.memory_user_id,
                thread=thread,
                started_at=min(m.created_at for m in messages),
                ended_at=max(m.created_at for m in messages),
                summary=summary,
                outcome=outcome or guessed,
                summarizer=summarizer,
            )
            Message.objects.filter(pk__in=ids, episode__isnull=True).update(episode=episode)
            episode.facts.set(Fact.objects.filter(message_id__in=ids))
            audit(
                Principal.system(thread.tenant_id, actor="extraction"),
                "episode.create",
                outcome=episode.outcome,
                target=episode,
                memory_user_id=thread.memory_user_id,
                after={"thread": thread.external_id, "messages": len(ids), "summarizer": summarizer},
            )
        return episode


def idle_threads(*, now: datetime | None = None, limit: int = 200) -> list[int]:
    """Threads ready to become an episode: closed, or quiet for the tenant's idle window; with
    messages in no episode, and no extraction still due."""
    from django.db.models import Exists, OuterRef

    now = now or timezone.now()
    loose = Message.objects.filter(thread=OuterRef("pk"), episode__isnull=True)
    candidates = (
        Thread.objects.filter(Exists(loose), extract_due_at__isnull=True)
        .filter(Q(closed_at__isnull=False) | Q(last_message_at__lte=now - timedelta(minutes=1)))
        .values_list("pk", "tenant_id", "closed_at", "last_message_at")[: limit * 5]
    )
    idle_minutes = dict(TenantSettings.objects.values_list("tenant_id", "episode_idle_minutes"))
    out = []
    for pk, tenant_id, closed_at, last in candidates:
        if closed_at is not None or (last and last <= now - timedelta(minutes=idle_minutes.get(tenant_id, 30))):
            out.append(pk)
    return out[:limit]


def close_thread(thread_id: int, *, outcome: str | None = None) -> Episode | None:
    """`close`: extract now (inline, no debounce, no queue hop), then build the episode."""
    batch_id = plan_thread(thread_id, force=True)
    if batch_id is not None:
        result = run_batch(batch_id)
        if result.status == PENDING:
            # Retrying with backoff: the sweeper finishes it; its facts join the episode then.
            log.info("batch %s of closing thread %s will be retried", batch_id, thread_id)
    return episode_build(thread_id, outcome=outcome)
