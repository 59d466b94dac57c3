"""Notebooks, skills, export, import and erase."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from ninja import Router, Schema

from memory_admin.api import api
from memory_admin.api.schemas import (
    ExportIn,
    ImportOut,
    NotebookIn,
    NotebookOut,
    SkillIn,
    SkillOut,
    SkillSummary,
    UserId,
    text,
)
from memory_admin.models import Notebook, Skill
from memory_admin.selectors.access import memory_user_for
from memory_admin.selectors.memory import memory_users_listed, notebook_of, skill_at, skills_listed
from memory_admin.services.guard import refuse_instructions
from memory_admin.services.imports import check_import, user_import
from memory_admin.services.notebook import check_notebook_size, notebook_save
from memory_admin.services.skills import check_skill_path, check_skill_size, skill_save
from memory_admin.services.users import user_erase, user_export

router = Router(tags=["memory"])
# Checked (and normalised) by check_skill_path; the type bounds what reaches it.
SkillPath = text(min_length=1, max_length=300)
SkillPrefix = text(max_length=300)
UserPrefix = text(max_length=200)


def _notebook_out(user, notebook: Notebook | None) -> dict:
    return {
        "user_id": user.external_id,
        "content": notebook.content if notebook else "",
        "version": notebook.version if notebook else 0,
        "updated_at": notebook.updated_at if notebook else None,
        "updated_by": notebook.updated_by if notebook else "",
    }


class UserOut(Schema):
    user_id: str
    task_ids: list[str]
    created_at: datetime


class UserPage(Schema):
    items: list[UserOut]
    next_cursor: str | None


@router.get("/users", response=UserPage)
def list_users(request, prefix: UserPrefix = "", cursor: UserPrefix = "", limit: int = 100):
    """The memory users this key reaches (erased ones excluded), by id, with the tasks they hold facts in."""
    items, next_cursor = memory_users_listed(request.principal, prefix=prefix, after=cursor,
                                             limit=max(1, min(limit, 500)))
    return {"items": items, "next_cursor": next_cursor}


@router.get("/users/{user_id}/notebook", response=NotebookOut)
def get_notebook(request, user_id: UserId):
    user = memory_user_for(request.principal, user_id)
    return _notebook_out(user, notebook_of(request.principal, user))


@router.put("/users/{user_id}/notebook", response=NotebookOut)
def put_notebook(request, user_id: UserId, payload: NotebookIn):
    check_notebook_size(payload.content)  # before the first write creates the user: refusals write nothing
    refuse_instructions(request.principal, payload.content, what="notebook")
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
def list_skills(request, prefix: SkillPrefix = "", user_id: UserId | None = None):
    user = memory_user_for(request.principal, user_id) if user_id else None
    return [_skill_out(s, full=False) for s in skills_listed(request.principal, prefix=prefix, memory_user=user)]


@router.get("/skills/{path:path}", response=SkillOut)
def get_skill(request, path: SkillPath, user_id: UserId | None = None):
    path = check_skill_path(path)
    user = memory_user_for(request.principal, user_id) if user_id else None
    return _skill_out(skill_at(request.principal, path, memory_user=user))


@router.put("/skills/{path:path}", response=SkillOut)
def put_skill(request, path: SkillPath, payload: SkillIn):
    check_skill_path(path)
    check_skill_size(payload.content)  # before the first write creates the user: refusals write nothing
    refuse_instructions(request.principal, payload.content, what="skill")
    user = memory_user_for(request.principal, payload.user_id, create=True) if payload.user_id else None
    skill = skill_save(principal=request.principal, path=path, content=payload.content,
                       base_version=payload.version, memory_user=user)
    return _skill_out(skill)


@router.get("/users/{user_id}/export")
def export_user(request, user_id: UserId):
    user = memory_user_for(request.principal, user_id)
    return user_export(principal=request.principal, memory_user=user)


@router.post("/users/{user_id}/import", response=ImportOut)
def import_user(request, user_id: UserId, payload: ExportIn):
    """Replay an export (`GET /users/{id}/export`, from this install or another) into this user through
    the write path: secrets blocked, dedup, the notebook wins, history kept. Idempotent: items already
    imported are skipped. Needs write access to the user, like any write."""
    data = payload.model_dump()
    limit = settings.IMPORT_MAX_ITEMS  # what one request replays well within the web server's timeout
    check_import(data, max_items=limit)  # before the first write creates the user: a refused export writes nothing
    user = memory_user_for(request.principal, user_id, create=True)
    return user_import(principal=request.principal, memory_user=user, data=data, max_items=limit).as_dict()


@router.delete("/users/{user_id}")
def erase_user(request, user_id: UserId):
    user = memory_user_for(request.principal, user_id)
    counts = user_erase(principal=request.principal, memory_user=user)
    return {"erased": True, "counts": counts}


api.add_router("", router)
