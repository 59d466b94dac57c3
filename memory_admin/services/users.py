"""Portable export and erase (GDPR) of one memory user."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from memory_admin.models import (
    AuditEvent,
    Contradiction,
    Episode,
    Fact,
    MemoryUser,
    Message,
    Notebook,
    NotebookChunk,
    NotebookRevision,
    PiiBlock,
    Skill,
    SkillRevision,
)
from memory_admin.selectors.access import ADMIN, Principal
from memory_admin.services.audit import audit

ERASED = "[erased]"


def user_export(*, principal: Principal, memory_user: MemoryUser) -> dict[str, Any]:
    principal.require(ADMIN)
    notebook = Notebook.objects.filter(memory_user=memory_user).first()
    facts = Fact.objects.filter(memory_user=memory_user).order_by("created_at")
    data = {
        "format": "memory-admin/export-v1",
        "exported_at": timezone.now().isoformat(),
        "user_id": memory_user.external_id,
        "notebook": {
            "version": notebook.version if notebook else 0,
            "content": notebook.content if notebook else "",
            "revisions": [
                {"version": r.version, "content": r.content, "author": r.author, "created_at": r.created_at.isoformat()}
                for r in (notebook.revisions.order_by("version") if notebook else [])
            ],
        },
        "facts": [
            {
                "id": str(f.pk), "key": f.key, "content": f.content, "category": f.category, "kind": f.kind,
                "confidence": f.confidence, "source": f.source, "status": f.status, "version": f.version,
                "supersedes": str(f.supersedes_id) if f.supersedes_id else None, "pinned": f.pinned,
                "valid_from": f.valid_from.isoformat(), "created_at": f.created_at.isoformat(),
                "metadata": f.metadata,
            }
            for f in facts
        ],
        "episodes": [
            {"id": str(e.pk), "started_at": e.started_at.isoformat(), "ended_at": e.ended_at.isoformat(),
             "summary": e.summary, "outcome": e.outcome}
            for e in Episode.objects.filter(memory_user=memory_user).order_by("started_at")
        ],
        "messages": [
            {"thread_id": m.thread.external_id, "role": m.role, "content": m.content,
             "created_at": m.created_at.isoformat()}
            for m in Message.objects.filter(memory_user=memory_user).select_related("thread").order_by("id")
        ],
        "skills": [
            {"path": s.path, "version": s.version, "content": s.content}
            for s in Skill.objects.filter(memory_user=memory_user).order_by("path")
        ],
    }
    audit(principal, "user.export", outcome="exported", target=memory_user, memory_user_id=memory_user.pk)
    return data


@transaction.atomic
def user_erase(*, principal: Principal, memory_user: MemoryUser) -> dict[str, int]:
    """Scrub every piece of content about this user (facts, notebook and revisions, messages, episodes,
    skills, PII previews, audit before/after) and free the external id. Leaves one audit event."""
    principal.require(ADMIN)
    counts = {
        "facts": Fact.objects.filter(memory_user=memory_user).update(
            content=ERASED, content_hash="", key=None, embedding=None, metadata={}, status=Fact.Status.EVICTED,
            status_reason="erased", pinned=False,
        ),
        "messages": Message.objects.filter(memory_user=memory_user).update(content=ERASED),
        "episodes": Episode.objects.filter(memory_user=memory_user).update(summary=ERASED),
        "skills": Skill.objects.filter(memory_user=memory_user).update(content=ERASED),
    }
    SkillRevision.objects.filter(skill__memory_user=memory_user).update(content=ERASED)
    NotebookChunk.objects.filter(notebook__memory_user=memory_user).delete()
    NotebookRevision.objects.filter(notebook__memory_user=memory_user).update(content=ERASED, note="")
    Notebook.objects.filter(memory_user=memory_user).update(content=ERASED)
    Contradiction.objects.filter(memory_user=memory_user).update(notebook_excerpt="", note="", reason="")
    PiiBlock.objects.filter(memory_user=memory_user).update(redacted_preview=ERASED)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL memory_admin.erasing = 'on'")
    counts["audit_events"] = AuditEvent.objects.filter(memory_user=memory_user).update(
        before=None, after=None, reason=ERASED
    )
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL memory_admin.erasing = 'off'")
    external_id = memory_user.external_id
    memory_user.external_id = f"erased-{uuid.uuid4()}"
    memory_user.display_name = ""
    memory_user.erased_at = timezone.now()
    memory_user.save(update_fields=["external_id", "display_name", "erased_at"])
    audit(principal, "user.erase", outcome="erased", target=memory_user, memory_user_id=memory_user.pk,
          after=counts, reason=f"erase requested for a user ({len(external_id)}-character id)")
    return counts
