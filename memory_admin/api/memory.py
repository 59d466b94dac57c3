"""Notebooks, skills, export, import and erase."""

from __future__ import annotations

from django.conf import settings
from ninja import Router

from memory_admin.api.schemas import (
    ExportIn,
    ImportOut,
    NotebookIn,
    NotebookOut,
    SkillIn,
    SkillOut,
    SkillPath,
    SkillPrefix,
    SkillSummary,
    UserId,
    UserLimit,
    UserPage,
    UserPrefix,
)
from memory_admin.selectors.access import memory_user_for
from memory_admin.selectors.memory import memory_users_listed, notebook_of, skill_at, skills_listed
from memory_admin.services.imports import check_import, user_import
from memory_admin.services.notebook import notebook_save
from memory_admin.services.skills import check_skill_path, skill_save
from memory_admin.services.users import user_erase, user_export

router = Router(tags=["memory"])


@router.get("/users", response=UserPage)
def list_users(request, prefix: UserPrefix = "", cursor: UserPrefix = "", limit: UserLimit = 100):
    """The memory users this key reaches (erased ones excluded), by id, with the tasks they hold facts in."""
    items, next_cursor = memory_users_listed(request.principal, prefix=prefix, after=cursor, limit=limit)
    return {"items": items, "next_cursor": next_cursor}


@router.get("/users/{user_id}/notebook", response=NotebookOut)
def get_notebook(request, user_id: UserId):
    user = memory_user_for(request.principal, user_id)
    return NotebookOut.of(user, notebook_of(request.principal, user))


@router.put("/users/{user_id}/notebook", response=NotebookOut)
def put_notebook(request, user_id: UserId, payload: NotebookIn):
    notebook = notebook_save(
        principal=request.principal,
        user_id=user_id,
        content=payload.content,
        base_version=payload.version,
        note=payload.note,
    )
    return NotebookOut.of(notebook.memory_user, notebook)


@router.get("/skills", response=list[SkillSummary])
def list_skills(request, prefix: SkillPrefix = "", user_id: UserId | None = None):
    user = memory_user_for(request.principal, user_id) if user_id else None
    return [SkillSummary.of(s) for s in skills_listed(request.principal, prefix=prefix, memory_user=user)]


@router.get("/skills/{path:path}", response=SkillOut)
def get_skill(request, path: SkillPath, user_id: UserId | None = None):
    path = check_skill_path(path)
    user = memory_user_for(request.principal, user_id) if user_id else None
    return SkillOut.of(skill_at(request.principal, path, memory_user=user))


@router.put("/skills/{path:path}", response=SkillOut)
def put_skill(request, path: SkillPath, payload: SkillIn):
    skill = skill_save(
        principal=request.principal,
        path=path,
        content=payload.content,
        base_version=payload.version,
        user_id=payload.user_id,
    )
    return SkillOut.of(skill)


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
