"""Tools and resources on the notebook and skills."""

from __future__ import annotations

import json
from typing import Any

from django.db import close_old_connections
from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from memory_admin.api.schemas import NotebookIn, NotebookOut, SkillOut, SkillSummary
from memory_admin.mcp_server.door import UserId, _door, _json, _user_id
from memory_admin.selectors.access import Principal, memory_user_for
from memory_admin.selectors.memory import notebook_of, skill_at, skills_listed
from memory_admin.services.notebook import notebook_save
from memory_admin.services.skills import check_skill_path


def get_notebook(user_id: UserId = None) -> dict[str, Any]:
    """The user's notebook (markdown curated by people; it wins over facts) and its version."""
    with _door() as principal:
        user = memory_user_for(principal, _user_id(principal, user_id))
        return _json(NotebookOut.of(user, notebook_of(principal, user)))


def update_notebook(content: str, version: int, user_id: UserId = None, note: str = "") -> dict[str, Any]:
    """Save the user's notebook over `version` (from get_notebook; 0 for a new one). If someone saved
    since, nothing is overwritten and the error carries the current version: read it again, merge."""
    with _door() as principal:
        payload = NotebookIn(content=content, version=version, note=note)
        notebook = notebook_save(
            principal=principal,
            user_id=_user_id(principal, user_id),
            content=payload.content,
            base_version=payload.version,
            note=payload.note,
        )
        return _json(NotebookOut.of(notebook.memory_user, notebook))


def get_skill(path: str, user_id: str | None = None) -> dict[str, Any]:
    """A skill (procedural memory, markdown) by path, e.g. deploy/kubernetes.md: the tenant's, or the
    user's own when user_id is given."""
    with _door() as principal:
        user = memory_user_for(principal, user_id) if user_id else None
        return _json(SkillOut.of(skill_at(principal, check_skill_path(path), memory_user=user)))


def list_skills(prefix: str = "", user_id: str | None = None) -> dict[str, Any]:
    """The skills under a path prefix (the tenant's, plus the user's own when user_id is given)."""
    with _door() as principal:
        user = memory_user_for(principal, user_id) if user_id else None
        return _json(
            {"skills": [SkillSummary.of(s) for s in skills_listed(principal, prefix=prefix, memory_user=user)]}
        )


def notebook_resource(user_id: str) -> str:
    return _read(lambda p: NotebookOut.of(*_with_notebook(p, user_id))["content"])


def skills_resource() -> str:
    return _read(lambda p: json.dumps(_json([SkillSummary.of(s) for s in skills_listed(p)])))


def skill_resource(path: str) -> str:
    return _read(lambda p: skill_at(p, check_skill_path(path)).content)


def _with_notebook(principal: Principal, user_id: str):
    user = memory_user_for(principal, user_id)
    return user, notebook_of(principal, user)


def _read(fn) -> str:
    """A resource read: the same key check; a refusal is a resource error with the API's JSON."""
    close_old_connections()  # as a tool's call does (resources run on the SDK's worker threads)
    try:
        with _door() as principal:
            return fn(principal)
    except ToolError as exc:
        raise ResourceError(str(exc)) from None
