"""Reads of notebooks and skills, shared by the REST API and the MCP server."""

from __future__ import annotations

from django.db.models import QuerySet

from memory_admin.errors import NotFound
from memory_admin.models import MemoryUser, Notebook, Skill
from memory_admin.selectors.access import Principal, visible

MAX_LISTED_SKILLS = 500


def notebook_of(principal: Principal, memory_user: MemoryUser) -> Notebook | None:
    return visible(principal, Notebook.objects.filter(memory_user=memory_user)).first()


def skills_listed(principal: Principal, *, prefix: str = "", memory_user: MemoryUser | None = None) -> QuerySet[Skill]:
    """Tenant skills, plus the user's own when a user is given; by path, at most MAX_LISTED_SKILLS."""
    qs = visible(principal, Skill.objects.select_related("memory_user"))
    if memory_user is not None:
        qs = qs.filter(memory_user__in=[memory_user.pk, None]) | qs.filter(memory_user__isnull=True)
    else:
        qs = qs.filter(memory_user__isnull=True)
    if prefix:
        qs = qs.filter(path__startswith=prefix.strip("/").lower())
    return qs.order_by("path")[:MAX_LISTED_SKILLS]


def skill_at(principal: Principal, path: str, *, memory_user: MemoryUser | None = None) -> Skill:
    """The skill at a (checked) path: the tenant's, or the user's own when a user is given."""
    skill = visible(principal, Skill.objects.select_related("memory_user")).filter(
        path=path, memory_user=memory_user
    ).first()
    if skill is None:
        raise NotFound(f"No skill at {path}.")
    return skill
