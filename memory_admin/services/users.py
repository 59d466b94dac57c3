"""Portable export and erase (GDPR) of one memory user."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, CharField, Q, TextField, Value, When
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from memory_admin.models import (
    ApiKey,
    AuditEvent,
    Checkpoint,
    CheckpointWrite,
    Contradiction,
    Edge,
    Entity,
    Episode,
    ExtractionBatch,
    Fact,
    FactEntity,
    FactRead,
    ImportedItem,
    Membership,
    MemoryUser,
    Message,
    Notebook,
    NotebookChunk,
    NotebookRevision,
    PiiBlock,
    Relation,
    Skill,
    SkillRevision,
    StoreItem,
    Thread,
)
from memory_admin.selectors.access import ADMIN, Principal
from memory_admin.services.audit import audit
from memory_admin.services.entity_curation import entities_erase

ERASED = "[erased]"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _export_fact(f: Fact) -> dict[str, Any]:
    return {
        "id": str(f.pk),
        "key": f.key,
        "content": f.content,
        "category": f.category,
        "kind": f.kind,
        "confidence": f.confidence,
        "source": f.source,
        "status": f.status,
        "version": f.version,
        "supersedes": str(f.supersedes_id) if f.supersedes_id else None,
        "pinned": f.pinned,
        "valid_from": f.valid_from.isoformat(),
        "created_at": f.created_at.isoformat(),
        "metadata": f.metadata,
        # Added for import (services/imports.py); an export without them still imports.
        "task_id": f.task_ref or None,
        "status_reason": f.status_reason,
        "importance": f.importance,
        "superseded_by": str(f.superseded_by_id) if f.superseded_by_id else None,
        "superseded_by_notebook_version": f.superseded_by_notebook.version if f.superseded_by_notebook_id else None,
        "valid_to": _iso(f.valid_to),
        "soft_expires_at": _iso(f.soft_expires_at),
        "hard_expires_at": _iso(f.hard_expires_at),
    }


def _export_notebook(notebook: Notebook | None) -> dict[str, Any]:
    revisions = notebook.revisions.order_by("version") if notebook else []
    return {
        "version": notebook.version if notebook else 0,
        "content": notebook.content if notebook else "",
        "revisions": [
            {
                "version": r.version,
                "content": r.content,
                "author": r.author,
                "note": r.note,
                "created_at": r.created_at.isoformat(),
            }
            for r in revisions
        ],
    }


def _export_episode(e: Episode) -> dict[str, Any]:
    return {
        "id": str(e.pk),
        "started_at": e.started_at.isoformat(),
        "ended_at": e.ended_at.isoformat(),
        "summary": e.summary,
        "outcome": e.outcome,
        "thread_id": e.thread.external_id if e.thread_id else None,
        "fact_ids": sorted(str(pk) for pk in e.facts.values_list("pk", flat=True)),
    }


def _export_skill(s: Skill) -> dict[str, Any]:
    return {
        "path": s.path,
        "version": s.version,
        "content": s.content,
        "revisions": [
            {"version": r.version, "content": r.content, "author": r.author, "created_at": r.created_at.isoformat()}
            for r in s.revisions.order_by("version")
        ],
    }


def _export_graph(memory_user: MemoryUser) -> dict[str, list[dict[str, Any]]]:
    """The user's part of the knowledge graph: the mentions its facts make, the relations its facts
    state (open and closed), and the entities they involve (its own, and the tenant's shared ones its
    facts name, marked `scope: org`)."""
    mentions = list(
        FactEntity.objects.filter(fact__memory_user=memory_user).order_by("fact__created_at", "fact_id", "entity_id")
    )
    relations = list(
        # A relation a document states is not the user's statement: its source's next crawl draws it again.
        Relation.objects.filter(memory_user=memory_user, source_fact__isnull=False)
        .prefetch_related("stated_by")
        .order_by("valid_from", "pk")
    )
    involved = {m.entity_id for m in mentions} | {r.subject_id for r in relations} | {r.object_id for r in relations}
    entities = Entity.objects.filter(Q(pk__in=involved) | Q(memory_user=memory_user)).order_by("first_seen", "pk")
    return {
        "entities": [
            {
                "id": str(e.pk),
                "name": e.name,
                "type": e.type,
                "scope": e.scope,
                "aliases": e.aliases,
                "summary": e.summary,
                "first_seen": e.first_seen.isoformat(),
                "last_seen": e.last_seen.isoformat(),
            }
            for e in entities
        ],
        "mentions": [{"fact_id": str(m.fact_id), "entity_id": str(m.entity_id), "role": m.role} for m in mentions],
        "relations": [
            {
                "id": r.pk,
                "subject_id": str(r.subject_id),
                "type": r.type,
                "object_id": str(r.object_id),
                "source_fact_id": str(r.source_fact_id),
                "valid_from": r.valid_from.isoformat(),
                "valid_to": _iso(r.valid_to),
                "invalidated_by_id": str(r.invalidated_by_id) if r.invalidated_by_id else None,
                "closed_reason": r.closed_reason,
                "stated_by": sorted(str(f.pk) for f in r.stated_by.all()),
            }
            for r in relations
        ],
    }


def user_export(*, principal: Principal, memory_user: MemoryUser) -> dict[str, Any]:
    """Everything about one memory user, history included (`services.imports` replays it)."""
    principal.require(ADMIN)
    notebook = Notebook.objects.filter(memory_user=memory_user).first()
    facts = Fact.objects.for_user(memory_user).select_related("superseded_by_notebook")
    episodes = Episode.objects.filter(memory_user=memory_user).select_related("thread")
    data = {
        "format": "memory-admin/export-v1",
        "exported_at": timezone.now().isoformat(),
        "user_id": memory_user.external_id,
        "notebook": _export_notebook(notebook),
        "facts": [_export_fact(f) for f in facts.order_by("created_at", "id")],
        "episodes": [_export_episode(e) for e in episodes.order_by("started_at", "id")],
        "messages": [
            {
                "thread_id": m.thread.external_id,
                "role": m.role,
                "content": m.content,
                "created_at": m.created_at.isoformat(),
            }
            for m in Message.objects.filter(memory_user=memory_user).select_related("thread").order_by("id")
        ],
        "skills": [_export_skill(s) for s in Skill.objects.filter(memory_user=memory_user).order_by("path")],
        **_export_graph(memory_user),
    }
    audit(principal, "user.export", outcome="exported", target=memory_user, memory_user_id=memory_user.pk)
    return data


def _erase_member_accounts(memory_user: MemoryUser) -> tuple[int, list[str]]:
    """Dashboard accounts that sign in as this user (members) lose that membership; an account left
    with no tenant is deactivated, its name and email cleared. Returns (accounts, their actor names)."""
    memberships = list(Membership.objects.filter(memory_user=memory_user).select_related("user"))
    actors = [f"staff:{m.user.get_username()}" for m in memberships]
    Membership.objects.filter(pk__in=[m.pk for m in memberships]).delete()
    for membership in memberships:
        account = membership.user
        if not Membership.objects.filter(user=account).exists():
            account.username = f"erased-{uuid.uuid4()}"
            account.email = account.first_name = account.last_name = ""
            account.is_active = False
            account.set_unusable_password()
            account.save()
    return len(memberships), actors


def _erase_actor_names(tenant_id: int, actors: list[str]) -> None:
    """Where the tenant recorded who did something, an erased member's name becomes `erased`."""
    for model, path, field in (
        (Notebook, "tenant_id", "updated_by"),
        (NotebookRevision, "notebook__tenant_id", "author"),
        (Skill, "tenant_id", "updated_by"),
        (SkillRevision, "skill__tenant_id", "author"),
        (Fact, "tenant_id", "created_by"),
        (Contradiction, "tenant_id", "resolved_by"),
        (Edge, "tenant_id", "created_by"),
        (PiiBlock, "tenant_id", "actor"),
        (AuditEvent, "tenant_id", "actor"),
    ):
        model.objects.filter(**{path: tenant_id, f"{field}__in": actors}).update(**{field: "erased"})


def _replace_exact(value: Any, old: str, new: str) -> Any:
    """`value` (decoded JSON) with every string equal to `old` replaced by `new`."""
    if isinstance(value, str):
        return new if value == old else value
    if isinstance(value, list):
        return [_replace_exact(item, old, new) for item in value]
    if isinstance(value, dict):
        return {key: _replace_exact(item, old, new) for key, item in value.items()}
    return value


@transaction.atomic
def user_erase(*, principal: Principal, memory_user: MemoryUser) -> dict[str, int]:
    """Scrub every piece of content about this user and every identifier that names it or its work:
    facts (content, key, task ref, metadata, reasons), notebook and revisions, messages and thread ids,
    episodes, skills (content and paths), review items, PII previews and fingerprints, batch errors,
    audit before/after/reason (its own events, and tenant events that list its id, such as a key
    restricted to it), and the external id itself, which becomes free. Keys restricted to the user stay
    restricted (to the erased placeholder id), never widened. Member accounts that sign in as the user
    lose that membership (and are deactivated when it was their only one); their name is replaced
    wherever the tenant recorded it as an actor. Leaves one audit event."""
    principal.require(ADMIN)
    external_id = memory_user.external_id
    erased_id = f"erased-{uuid.uuid4()}"
    counts = {
        "facts": Fact.objects.for_user(memory_user).update(
            content=ERASED,
            content_hash="",
            key=None,
            embedding=None,
            metadata={},
            # A task-scoped fact keeps a (placeholder) task ref: the scope's shape is a constraint.
            task_ref=Case(When(task_ref="", then=Value("")), default=Value("erased")),
            status=Fact.Status.EVICTED,
            status_reason="erased",
            pinned=False,
        ),
        # Out of search too: no embedding, and none made again (services/message_index.py).
        "messages": Message.objects.filter(memory_user=memory_user).update(
            content=ERASED, skip_reason="", embedding=None, search_due=False
        ),
        "threads": Thread.objects.filter(memory_user=memory_user).update(
            external_id=Concat(Value("erased-"), Cast("id", CharField()))
        ),
        "episodes": Episode.objects.filter(memory_user=memory_user).update(summary=ERASED),
        "skills": Skill.objects.filter(memory_user=memory_user).update(
            content=ERASED, path=Concat(Value("erased/"), Cast("id", CharField()), Value(".md"))
        ),
    }
    SkillRevision.objects.filter(skill__memory_user=memory_user).update(content=ERASED)
    counts["entities"] = entities_erase(memory_user_id=memory_user.pk)
    NotebookChunk.objects.filter(notebook__memory_user=memory_user).delete()
    ImportedItem.objects.filter(memory_user=memory_user).delete()
    FactRead.objects.filter(memory_user=memory_user).delete()  # the access log of their memories
    # The user's LangGraph store items and checkpoints are the agent's records of them: deleted outright.
    StoreItem.objects.filter(memory_user=memory_user).delete()
    CheckpointWrite.objects.filter(thread__memory_user=memory_user).delete()
    Checkpoint.objects.filter(memory_user=memory_user).delete()
    NotebookRevision.objects.filter(notebook__memory_user=memory_user).update(content=ERASED, note="")
    Notebook.objects.filter(memory_user=memory_user).update(content=ERASED)
    Contradiction.objects.filter(memory_user=memory_user).update(notebook_excerpt="", note="", reason="")
    PiiBlock.objects.filter(memory_user=memory_user).update(redacted_preview=ERASED, fingerprint="")
    ExtractionBatch.objects.filter(memory_user=memory_user).exclude(error="").update(error=ERASED)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {ApiKey._meta.db_table} SET allowed_user_ids = array_replace(allowed_user_ids, %s, %s) "
            "WHERE tenant_id = %s AND %s = ANY(allowed_user_ids)",
            [external_id, erased_id, memory_user.tenant_id, external_id],
        )
        counts["api_keys"] = cursor.rowcount
        cursor.execute("SET LOCAL memory_admin.erasing = 'on'")
    counts["audit_events"] = AuditEvent.objects.filter(memory_user=memory_user).update(
        before=None, after=None, reason=ERASED
    )
    counts["accounts"], actors = _erase_member_accounts(memory_user)
    if actors:
        _erase_actor_names(memory_user.tenant_id, actors)
    # Tenant-wide events that name the user (a key restricted to it, for one) keep their shape, with the
    # id replaced; matched on the JSON string "id" exactly, never a substring of another value.
    quoted = json.dumps(external_id, ensure_ascii=False)
    naming = (
        AuditEvent.objects.filter(tenant_id=memory_user.tenant_id, memory_user__isnull=True)
        .annotate(before_text=Cast("before", TextField()), after_text=Cast("after", TextField()))
        .filter(Q(before_text__contains=quoted) | Q(after_text__contains=quoted))
    )
    for event in naming.only("id", "before", "after"):
        AuditEvent.objects.filter(pk=event.pk).update(
            before=_replace_exact(event.before, external_id, erased_id),
            after=_replace_exact(event.after, external_id, erased_id),
        )
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL memory_admin.erasing = 'off'")
    memory_user.external_id = erased_id
    memory_user.display_name = ""
    memory_user.erased_at = timezone.now()
    memory_user.save(update_fields=["external_id", "display_name", "erased_at"])
    audit(
        principal,
        "user.erase",
        outcome="erased",
        target=memory_user,
        memory_user_id=memory_user.pk,
        after=counts,
        reason=f"erase requested for a user ({len(external_id)}-character id)",
    )
    return counts
