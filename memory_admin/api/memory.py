"""Notebooks, skills, export and erase."""

from __future__ import annotations

from ninja import Router

from memory_admin.api import api
from memory_admin.api.schemas import NotebookIn, NotebookOut, SkillIn, SkillOut, SkillSummary
from memory_admin.errors import NotFound
from memory_admin.models import Notebook, Skill
from memory_admin.selectors.access import memory_user_for, visible
from memory_admin.services.notebook import check_notebook_size, notebook_save
from memory_admin.services.skills import check_skill_path, check_skill_size, skill_save
from memory_admin.services.users import user_erase, user_export

router = Router(tags=["memory"])


def _notebook_out(user, notebook: Notebook | None) -> dict:
    return {
        "user_id": user.external_id,
        "content": notebook.content if notebook else "",
        "version": notebook.version if notebook else 0,
        "updated_at": notebook.updated_at if notebook else None,
        "updated_by": notebook.updated_by if notebook else "",
    }


@router.get("/users/{user_id}/notebook", response=NotebookOut)
def get_notebook(request, user_id: str):
    user = memory_user_for(request.principal, user_id)
    return _notebook_out(user, visible(request.principal, Notebook.objects.filter(memory_user=user)).first())


@router.put("/users/{user_id}/notebook", response=NotebookOut)
def put_notebook(request, user_id: str, payload: NotebookIn):
    check_notebook_size(payload.content)  # before the first write creates the user: refusals write nothing
    user = memory_user_for(request.principal, user_id, create=True)
    notebook = notebook_save(principal=request.principal, memory_user=user, content=payload.content,
                             base_version=payload.version, note=payload.note)
    return _notebook_out(user, notebook)


def _skill_out(skill: Skill, *, full: bool = True) -> dict:
    out = {
        "path": skill.path,
        "scope": "user" if skill.memory_user_id else "tenant",
        "user_id": skill.memory_user.external_id if skill.memory_user_id else None,
        "version": skill.version,
        "updated_at": skill.updated_at,
    }
    if full:
        out.update(content=skill.content, updated_by=skill.updated_by)
    return out


@router.get("/skills", response=list[SkillSummary])
def list_skills(request, prefix: str = "", user_id: str | None = None):
    qs = visible(request.principal, Skill.objects.select_related("memory_user"))
    if user_id:
        user = memory_user_for(request.principal, user_id)
        qs = qs.filter(memory_user__in=[user.pk, None]) | qs.filter(memory_user__isnull=True)
    else:
        qs = qs.filter(memory_user__isnull=True)
    if prefix:
        qs = qs.filter(path__startswith=prefix.strip("/").lower())
    return [_skill_out(s, full=False) for s in qs.order_by("path")[:500]]


@router.get("/skills/{path:path}", response=SkillOut)
def get_skill(request, path: str, user_id: str | None = None):
    path = check_skill_path(path)
    user = memory_user_for(request.principal, user_id) if user_id else None
    skill = visible(request.principal, Skill.objects.select_related("memory_user")).filter(
        path=path, memory_user=user
    ).first()
    if skill is None:
        raise NotFound("No skill at that path.")
    return _skill_out(skill)


@router.put("/skills/{path:path}", response=SkillOut)
def put_skill(request, path: str, payload: SkillIn):
    check_skill_path(path)
    check_skill_size(payload.content)  # before the first write creates the user: refusals write nothing
    user = memory_user_for(request.principal, payload.user_id, create=True) if payload.user_id else None
    skill = skill_save(principal=request.principal, path=path, content=payload.content,
                       base_version=payload.version, memory_user=user)
    return _skill_out(skill)


@router.get("/users/{user_id}/export")
def export_user(request, user_id: str):
    user = memory_user_for(request.principal, user_id)
    return user_export(principal=request.principal, memory_user=user)


@router.delete("/users/{user_id}")
def erase_user(request, user_id: str):
    user = memory_user_for(request.principal, user_id)
    counts = user_erase(principal=request.principal, memory_user=user)
    return {"erased": True, "counts": counts}


api.add_router("", router)
