"""The replay's state and report, and the facts and notebook revisions replayed in the order they were created,
then the history the write path does not re-decide (times, supersession, statuses)."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from memory_admin.embedding import embed
from memory_admin.errors import Blocked, Conflict, Invalid
from memory_admin.models import Fact, ImportedItem, MemoryUser, NotebookRevision
from memory_admin.selectors.access import Principal
from memory_admin.services.audit import audit_fact, fact_snapshot
from memory_admin.services.facts import (
    close_contradictions_of,
    fact_correct,
    fact_forget,
    fact_write,
    fact_write_many,
    supersede,
)
from memory_admin.services.imports.checks import _notebook_revisions
from memory_admin.services.notebook import notebook_for, notebook_save
from memory_admin.services.pii import find as find_pii

# Outcomes after which the import's fact is a row of its own (not an existing fact it was folded into).
NEW_ROW = frozenset(
    {
        "created",
        "updated",
        "superseded_existing",
        "queued_for_review",
        "quarantined",
        "overruled",
        "capped",
        "corrected",
    }
)
# Facts written by one `fact_write_many` call at most (one lock and one embedding call each).
RUN = 200
# Statuses the import restores from the export: each serves less than `active`.
RESTORABLE = frozenset({Fact.Status.SUPERSEDED, Fact.Status.STALE, Fact.Status.QUARANTINED, Fact.Status.EVICTED})


@dataclass
class ImportReport:
    user_id: str
    imported: Counter = field(default_factory=Counter)
    already_imported: Counter = field(default_factory=Counter)
    refused: list[dict[str, Any]] = field(default_factory=list)
    fact_outcomes: Counter = field(default_factory=Counter)
    diverged: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "imported": dict(self.imported),
            "already_imported": dict(self.already_imported),
            "refused": self.refused,
            "fact_outcomes": dict(self.fact_outcomes),
            "diverged": self.diverged,
        }


class _Replay:
    """One import: what was done before (ImportedItem rows), the id map, the report."""

    def __init__(self, principal: Principal, memory_user: MemoryUser, data: dict[str, Any]) -> None:
        self.principal, self.user, self.data = principal, memory_user, data
        self.report = ImportReport(user_id=memory_user.external_id)
        self.done = dict(ImportedItem.objects.filter(memory_user=memory_user).values_list("source", "target"))
        self.fact_ids = {
            source[5:]: target for source, target in self.done.items() if source.startswith("fact:") and target
        }
        self.notebook_versions = {
            int(source[9:]): int(target)
            for source, target in self.done.items()
            if source.startswith("notebook:") and target
        }
        self.written: list[tuple[dict[str, Any], str]] = []  # facts written as rows of their own, this run
        self.vectors: dict[str, list[float]] = {}
        self.exported = {str(f["id"]): f for f in data["facts"]}
        self.recorded: list[ImportedItem] = []  # inserted together at the end of the import

    def seen(self, kind: str, source: str) -> bool:
        if source in self.done:
            self.report.already_imported[kind] += 1
            return True
        return False

    def record(self, kind: str, source: str, target: str) -> None:
        self.recorded.append(ImportedItem(memory_user=self.user, source=source, target=target))
        self.done[source] = target
        if target:
            self.report.imported[kind] += 1

    def refuse(self, kind: str, index: int, source: str, exc: Blocked | Invalid) -> None:
        self.report.refused.append(
            {
                "kind": kind,
                "index": index,
                "code": exc.code,
                **({"field": exc.extra["field"]} if exc.extra.get("field") else {}),
                **({"block_id": exc.extra["block_id"]} if "block_id" in exc.extra else {}),
            }
        )
        self.record(kind, source, "")


# --- facts and notebook revisions, in the order they were created -------------------------------


def _embed_facts(replay: _Replay) -> None:
    """One embedding call for the facts to write (not those with PII: the write path may redact them,
    and their vector must be of the stored text)."""
    todo = [f for f in replay.data["facts"] if f"fact:{f['id']}" not in replay.done and not find_pii(f["content"])]
    if todo:
        replay.vectors = dict(zip((str(f["id"]) for f in todo), embed([f["content"] for f in todo]), strict=True))


def _write_kwargs(replay: _Replay, item: dict[str, Any]) -> dict[str, Any]:
    """`fact_write`'s arguments for an exported fact."""
    return {
        "content": item["content"],
        "key": item["key"],
        "category": item["category"],
        "kind": item["kind"],
        "confidence": item["confidence"],
        "source": item["source"],
        "observed_at": item["valid_from"],
        "pinned": item["pinned"],
        "importance": item["importance"],
        "metadata": item["metadata"] or None,
        "task_ref": item["task_id"] or "",
        "embedding": replay.vectors.get(str(item["id"])),
    }


def _correction_of(replay: _Replay, item: dict[str, Any]) -> str | None:
    """The fact (here) that an exported correction corrects, when this import wrote it."""
    if item["source"] != Fact.Source.USER_CORRECTION or not item["supersedes"]:
        return None
    return replay.fact_ids.get(str(item["supersedes"]))


def _write_fact(replay: _Replay, item: dict[str, Any]) -> tuple[Fact | None, str]:
    predecessor = _correction_of(replay, item)
    if predecessor:
        reason = replay.exported.get(str(item["supersedes"]), {}).get("status_reason", "")
        try:
            fact = fact_correct(
                principal=replay.principal,
                fact_id=predecessor,
                content=item["content"],
                confidence=item["confidence"],
                category=item["category"],
                reason=reason,
            )
            return fact, "corrected"
        except Conflict:
            pass  # the predecessor was superseded here by something else: written as a fact of its own
    result = fact_write(
        principal=replay.principal, memory_user=replay.user, route="import", **_write_kwargs(replay, item)
    )
    return result.fact, result.outcome


def _stored(replay: _Replay, item: dict[str, Any], fact: Fact | None, outcome: str) -> None:
    """Bookkeeping after the write path answered for an exported fact."""
    replay.report.fact_outcomes[outcome] += 1
    replay.record("facts", f"fact:{item['id']}", str(fact.pk) if fact else "")
    if fact is None:
        return
    replay.fact_ids[str(item["id"])] = str(fact.pk)
    if outcome in NEW_ROW:
        replay.written.append((item, str(fact.pk)))
        if item["status"] == Fact.Status.EVICTED and fact.status != Fact.Status.EVICTED:
            # At once: while active it would take part in the dedup of the facts that follow.
            try:
                fact_forget(
                    principal=replay.principal,
                    fact_id=fact.pk,
                    reason=item["status_reason"] or "evicted before the export",
                )
            except Blocked:  # the recorded reason itself held a secret: forgotten without it
                fact_forget(principal=replay.principal, fact_id=fact.pk, reason="evicted before the export")


def _replay_fact(replay: _Replay, index: int, item: dict[str, Any]) -> None:
    try:
        fact, outcome = _write_fact(replay, item)
    except (Blocked, Invalid) as exc:
        replay.refuse("facts", index, f"fact:{item['id']}", exc)
        replay.report.fact_outcomes[exc.code] += 1
        return
    _stored(replay, item, fact, outcome)


def _replay_run(replay: _Replay, run: list[tuple[int, dict[str, Any]]]) -> None:
    """Consecutive plain facts through `fact_write_many`: one lock, one embedding call, the same
    outcomes as one `fact_write` after the other."""
    results = fact_write_many(
        principal=replay.principal,
        memory_user=replay.user,
        route="import",
        facts=[_write_kwargs(replay, item) for _, item in run],
    )
    for (index, item), result in zip(run, results, strict=True):
        if result.outcome == "blocked":
            replay.refuse("facts", index, f"fact:{item['id']}", Blocked("", block_id=result.block_id))
            replay.report.fact_outcomes["blocked"] += 1
        elif result.outcome == "error":  # not recorded: a later import tries it again
            replay.report.refused.append({"kind": "facts", "index": index, "code": "error"})
        else:
            _stored(replay, item, result.fact, result.outcome)


def _replay_revision(replay: _Replay, index: int, revision: dict[str, Any]) -> None:
    source = f"notebook:{revision['version']}"
    if replay.seen("notebook_revisions", source):
        return
    notebook = notebook_for(replay.principal.tenant_id, replay.user)
    try:
        saved = notebook_save(
            principal=replay.principal,
            memory_user=replay.user,
            content=revision["content"],
            base_version=notebook.version if notebook else 0,
            note=revision["note"],
        )
    except (Blocked, Invalid) as exc:
        replay.refuse("notebook_revisions", index, source, exc)
        return
    replay.notebook_versions[revision["version"]] = saved.version
    replay.record("notebook_revisions", source, str(saved.version))


def _plain(replay: _Replay, item: dict[str, Any]) -> bool:
    """A fact that can share a `fact_write_many` run: neither a correction of a fact of the export (its
    predecessor may be in the run, not written yet) nor one to forget at once."""
    correction = item["source"] == Fact.Source.USER_CORRECTION and str(item["supersedes"]) in replay.exported
    return not correction and item["status"] != Fact.Status.EVICTED


def _replay_timeline(replay: _Replay) -> None:
    events = [(f["created_at"], 1, i, f) for i, f in enumerate(replay.data["facts"])]
    events += [(r["created_at"], 0, i, r) for i, r in enumerate(_notebook_revisions(replay.data))]
    run: list[tuple[int, dict[str, Any]]] = []
    for _, kind, index, item in sorted(events, key=lambda e: e[:3]):
        if kind == 1 and replay.seen("facts", f"fact:{item['id']}"):
            continue
        if kind == 1 and _plain(replay, item) and len(run) < RUN:
            run.append((index, item))
            continue
        if run:
            _replay_run(replay, run)
            run = []
        if kind == 0:
            _replay_revision(replay, index, item)
        elif _plain(replay, item):
            run.append((index, item))
        else:
            _replay_fact(replay, index, item)
    if run:
        _replay_run(replay, run)


# --- history the write path does not re-decide ----------------------------------------------------


TIMES = ("valid_from", "valid_to", "soft_expires_at", "hard_expires_at")


def _restore_times(fact: Fact, item: dict[str, Any]) -> None:
    """When the fact became true and when it expires, as exported (a correction starts `now` here)."""
    if any(getattr(fact, name) != item[name] for name in TIMES):
        Fact.objects.filter(pk=fact.pk).update(**{name: item[name] for name in TIMES})


def _restore_superseded(replay: _Replay, fact: Fact, item: dict[str, Any]) -> bool:
    reason = item["status_reason"] or "superseded before the export"
    successor = replay.fact_ids.get(str(item["superseded_by"])) if item["superseded_by"] else None
    if successor and successor != str(fact.pk):
        supersede(fact, by=Fact(pk=successor), reason=reason)
    else:
        version = replay.notebook_versions.get(item["superseded_by_notebook_version"] or -1)
        revision = NotebookRevision.objects.filter(notebook__memory_user=replay.user, version=version).first()
        if revision is None:
            return False
        Fact.objects.filter(pk=fact.pk).update(
            status=Fact.Status.SUPERSEDED,
            superseded_by_notebook=revision,
            status_reason=reason[:300],
            contested=False,
            updated_at=timezone.now(),
        )
    close_contradictions_of(replay.principal, fact, note="settled by an import")
    return True


def _restore_status(replay: _Replay, item: dict[str, Any], fact: Fact) -> None:
    want = item["status"]
    if fact.status == want:
        return
    before = fact_snapshot(fact)
    restored = False
    if want in RESTORABLE and fact.status == Fact.Status.ACTIVE:
        if want == Fact.Status.SUPERSEDED:
            restored = _restore_superseded(replay, fact, item)
        else:
            Fact.objects.filter(pk=fact.pk).update(
                status=want, status_reason=item["status_reason"][:300], updated_at=timezone.now()
            )
            restored = True
    if not restored:
        replay.report.diverged.append(
            {"id": str(item["id"]), "fact_id": str(fact.pk), "exported_status": want, "status": fact.status}
        )
        return
    fact.refresh_from_db()
    audit_fact(
        replay.principal,
        "fact.import_status",
        fact,
        outcome=want,
        before=before,
        reason="status as in the imported export",
    )


def _restore_history(replay: _Replay) -> None:
    facts = Fact.objects.defer("embedding", "embedding_next").in_bulk([fact_id for _, fact_id in replay.written])
    for item, fact_id in replay.written:
        _restore_times(facts[uuid.UUID(fact_id)], item)
    for item, fact_id in replay.written:
        _restore_status(replay, item, facts[uuid.UUID(fact_id)])
