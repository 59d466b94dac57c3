"""Reads of notebooks and skills, shared by the REST API and the MCP server."""

from __future__ import annotations

from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Q, QuerySet

from memory_admin.errors import NotFound
from memory_admin.models import Fact, MemoryUser, Notebook, Skill
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
    skill = (
        visible(principal, Skill.objects.select_related("memory_user"))
        .filter(path=path, memory_user=memory_user)
        .first()
    )
    if skill is None:
        raise NotFound("No skill at that path.")
    return skill


def memory_users_listed(
    principal: Principal, *, prefix: str = "", after: str = "", limit: int = 100
) -> tuple[list[dict], str | None]:
    """The memory users the principal reaches, by id, with the tasks they hold active facts in; keyset
    pagination on the id (`after` is the last id of the previous page)."""
    qs = visible(principal, MemoryUser.objects.filter(erased_at__isnull=True))
    if prefix:
        qs = qs.filter(external_id__startswith=prefix)
    if after:
        qs = qs.filter(external_id__gt=after)
    tasks = ArrayAgg(
        "facts__task_ref",
        distinct=True,
        default=[],
        filter=Q(facts__status=Fact.Status.ACTIVE) & ~Q(facts__task_ref=""),
    )
    rows = list(qs.annotate(task_ids=tasks).order_by("external_id")[: limit + 1])
    items = [
        {"user_id": u.external_id, "task_ids": sorted(u.task_ids), "created_at": u.created_at} for u in rows[:limit]
    ]
    return items, rows[limit - 1].external_id if len(rows) > limit else None
