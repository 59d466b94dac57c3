"""Skills: path-routed, versioned markdown (procedural memory)."""

from __future__ import annotations

import re

from django.conf import settings
from django.db import transaction

from memory_admin.errors import Conflict, Invalid
from memory_admin.inputs import check_size
from memory_admin.models import MemoryUser, Skill, SkillRevision
from memory_admin.selectors.access import Principal, memory_user_for, require_write_to
from memory_admin.services.agent_text import agent_text_check
from memory_admin.services.audit import audit
from memory_admin.services.guard import refuse_instructions
from memory_admin.services.screening import screen_identifier, screen_text

_PATH = re.compile(r"^[a-z0-9][a-z0-9._-]*(?:/[a-z0-9][a-z0-9._-]*)*$")


def check_skill_path(path: str) -> str:
    written, path = path, path.strip().strip("/").lower()
    if not _PATH.match(path) or ".." in path or len(path) > 300:
        raise Invalid(
            "A skill path is lowercase segments separated by '/', e.g. deploy/kubernetes.md.",
            code="invalid",
            field="path",
        )
    return agent_text_check(path, field="path", what="skill path", written=written)  # served in context


def skill_save(
    *,
    principal: Principal,
    path: str,
    content: str,
    base_version: int | None,
    memory_user: MemoryUser | None = None,
    user_id: str | None = None,
) -> Skill:
    """Create (base_version None or 0) or update (base_version = current) a skill; a stale version
    raises Conflict with the current version. A tenant skill (no memory user) is served to every
    user's context: only a principal reaching the whole tenant may write it.
    An agent's skill that reads as instructions to a model (beyond the procedure a skill is: "ignore
    your rules", tool-call JSON, template tokens...) is refused with 422 `instruction_like`, like a
    notebook (see `notebook_save`). An agent names the owner of a user skill by its own id (`user_id`):
    that memory user is created after the path, size and instruction checks, so a refusal leaves nothing."""
    raw_path = path
    path = check_skill_path(path)
    check_size(content, limit=settings.MAX_SKILL_BYTES, what="A skill")
    refuse_instructions(principal, content, what="skill")
    if user_id is not None:
        memory_user = memory_user_for(principal, user_id, create=True)
    require_write_to(principal, memory_user)
    user_pk = memory_user.pk if memory_user else None
    screen_identifier(principal, raw_path, what="skill path", route="skill_path", memory_user_id=user_pk)
    content = screen_text(principal, content, route="skill", memory_user_id=user_pk).content
    with transaction.atomic():
        skill = (
            Skill.objects.select_for_update()
            .filter(tenant_id=principal.tenant_id, memory_user=memory_user, path=path)
            .first()
        )
        current = skill.version if skill else 0
        if (base_version or 0) != current:
            raise Conflict(
                f"Skill {path} is at version {current}, not {base_version or 0}. Reload and save again.",
                current_version=current,
            )
        before = {"version": current, "content": skill.content[:2000]} if skill else None
        if skill is None:
            skill = Skill.objects.create(
                tenant_id=principal.tenant_id,
                memory_user=memory_user,
                path=path,
                content=content,
                version=1,
                updated_by=principal.actor,
            )
        else:
            skill.content, skill.version, skill.updated_by = content, skill.version + 1, principal.actor
            skill.save(update_fields=["content", "version", "updated_by", "updated_at"])
        SkillRevision.objects.create(skill=skill, version=skill.version, content=content, author=principal.actor)
        audit(
            principal,
            "skill.save",
            outcome="saved",
            target=skill,
            memory_user_id=user_pk,
            before=before,
            after={"version": skill.version, "content": content[:2000]},
        )
    return skill
