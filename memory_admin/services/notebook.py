"""Notebook saves: versioned, conflict-safe, scanned, and sovereign over facts."""

from __future__ import annotations

import re

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pgvector.django import CosineDistance

from memory_admin.embedding import embed
from memory_admin.errors import Conflict
from memory_admin.inputs import check_size
from memory_admin.models import Fact, MemoryUser, Notebook, NotebookChunk, NotebookRevision
from memory_admin.selectors.access import Principal, memory_user_for, require_write_to
from memory_admin.services.audit import audit, audit_fact, fact_snapshot
from memory_admin.services.facts import notebook_overrule_record
from memory_admin.services.guard import refuse_instructions
from memory_admin.services.judge import judge
from memory_admin.services.screening import screen_text
from memory_admin.services.settings import tenant_settings

MAX_CHUNKS = 300


def notebook_statements(content: str) -> list[str]:
    """The lines of a notebook that state something (headings and blank lines dropped)."""
    out = []
    for line in content.splitlines():
        text = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line).strip()
        if text and not text.startswith("#") and len(text) >= 8:
            out.append(text[:500])
    return out[:MAX_CHUNKS]


def notebook_for(tenant_id: int, memory_user: MemoryUser | None) -> Notebook | None:
    return Notebook.objects.filter(tenant_id=tenant_id, memory_user=memory_user).first()


def notebook_save(
    *,
    principal: Principal,
    memory_user: MemoryUser | None = None,
    user_id: str | None = None,
    content: str,
    base_version: int,
    note: str = "",
) -> Notebook:
    """Save a new revision if `base_version` is the current version; otherwise raise Conflict with the
    current version and overwrite nothing. Facts that contradict the new text are overruled.

    An agent's notebook that reads as instructions to a model is refused (422 `instruction_like`), not
    quarantined: a notebook is one sovereign document served whole in every context block, and there is no
    "held for review" version of it; the agent learns at once and nothing half-applied is left behind.
    A person writing in the dashboard is trusted (the fence still keeps their text from passing for the
    block's structure).

    An agent names the user by its own id (`user_id`): the first save creates that memory user, after
    the size and instruction checks, so a refused save leaves nothing behind. Without either, the
    tenant's notebook."""
    check_size(content, limit=settings.MAX_NOTEBOOK_BYTES, what="A notebook")
    refuse_instructions(principal, content, what="notebook")
    if user_id is not None:
        memory_user = memory_user_for(principal, user_id, create=True)
    require_write_to(principal, memory_user)
    user_pk = memory_user.pk if memory_user else None
    content = screen_text(principal, content, route="notebook", memory_user_id=user_pk).content
    note = screen_text(principal, note, route="notebook", memory_user_id=user_pk, what="note").content
    statements = notebook_statements(content)
    vectors = embed(statements)
    with transaction.atomic():
        notebook, _ = Notebook.objects.get_or_create(tenant_id=principal.tenant_id, memory_user=memory_user)
        notebook = Notebook.objects.select_for_update().get(pk=notebook.pk)
        if notebook.version != base_version:
            raise Conflict(
                f"The notebook changed since version {base_version}; the current version is "
                f"{notebook.version}. Reload, merge your edit and save again.",
                current_version=notebook.version,
            )
        before = {"version": notebook.version, "content": notebook.content[:2000]}
        notebook.version += 1
        notebook.content = content
        notebook.updated_by = principal.actor
        notebook.save(update_fields=["version", "content", "updated_by", "updated_at"])
        revision = NotebookRevision.objects.create(
            notebook=notebook, version=notebook.version, content=content, author=principal.actor, note=note[:500]
        )
        NotebookChunk.objects.filter(notebook=notebook).delete()
        NotebookChunk.objects.bulk_create(
            NotebookChunk(notebook=notebook, revision=revision, text=text, embedding=vector)
            for text, vector in zip(statements, vectors, strict=True)
        )
        audit(
            principal,
            "notebook.save",
            outcome="saved",
            target=notebook,
            memory_user_id=user_pk,
            before=before,
            after={"version": notebook.version, "content": content[:2000]},
            reason=note,
        )
        if memory_user is not None:
            _overrule_contradicting_facts(principal, memory_user, revision, statements, vectors)
    return notebook


def _overrule_contradicting_facts(
    principal: Principal,
    memory_user: MemoryUser,
    revision: NotebookRevision,
    statements: list[str],
    vectors: list[list[float]],
) -> None:
    threshold = tenant_settings(principal.tenant_id).contradiction_similarity
    active = Fact.objects.for_user(memory_user).active().filter(pinned=False)
    for text, vector in zip(statements, vectors, strict=True):
        near = active.annotate(distance=CosineDistance("embedding", vector)).filter(distance__lte=1 - threshold)
        for fact in near.order_by("distance")[:5]:
            verdict = judge(text, fact.content, tenant_id=principal.tenant_id)
            if not verdict.contradictory:
                continue
            before = fact_snapshot(fact)
            Fact.objects.filter(pk=fact.pk).update(
                status=Fact.Status.SUPERSEDED,
                superseded_by_notebook=revision,
                status_reason=f"contradicts the notebook: {verdict.reason}"[:300],
                updated_at=timezone.now(),
            )
            fact.status = Fact.Status.SUPERSEDED
            notebook_overrule_record(principal, fact, revision_id=revision.pk, excerpt=text, verdict=verdict)
            audit_fact(
                principal, "fact.overrule", fact, outcome="superseded", before=before, reason="the notebook wins"
            )


@transaction.atomic
def notebook_restore(*, principal: Principal, memory_user: MemoryUser | None, version: int, base_version: int):
    """Save an old revision's text as a new revision (history is never rewritten)."""
    notebook = Notebook.objects.get(tenant_id=principal.tenant_id, memory_user=memory_user)
    revision = NotebookRevision.objects.get(notebook=notebook, version=version)
    return notebook_save(
        principal=principal,
        memory_user=memory_user,
        content=revision.content,
        base_version=base_version,
        note=f"restored version {version}",
    )
