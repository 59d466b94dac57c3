"""Memory users, notebooks and skills."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from ninja import Schema
from pydantic import Field, StrictInt

from memory_admin.api.schemas.common import StrictIn, Text, UserId, text
from memory_admin.inputs import INT4_MAX
from memory_admin.models import MemoryUser, Notebook, Skill


class NotebookOut(Schema):
    user_id: str
    content: str
    version: int
    updated_at: datetime | None
    updated_by: str

    @staticmethod
    def of(user: MemoryUser, notebook: Notebook | None) -> dict[str, Any]:
        return {
            "user_id": user.external_id,
            "content": notebook.content if notebook else "",
            "version": notebook.version if notebook else 0,
            "updated_at": notebook.updated_at if notebook else None,
            "updated_by": notebook.updated_by if notebook else "",
        }


class NotebookIn(StrictIn):
    content: Text
    version: Annotated[StrictInt, Field(ge=0, le=INT4_MAX)]
    note: text(max_length=500) = ""


class SkillIn(StrictIn):
    content: Text
    version: Annotated[StrictInt, Field(ge=0, le=INT4_MAX)] | None = None
    user_id: UserId | None = None


class SkillSummary(Schema):
    path: str
    scope: str
    user_id: str | None
    version: int
    updated_at: datetime

    @staticmethod
    def of(skill: Skill) -> dict[str, Any]:
        return {
            "path": skill.path,
            "scope": "user" if skill.memory_user_id else "tenant",
            "user_id": skill.memory_user.external_id if skill.memory_user_id else None,
            "version": skill.version,
            "updated_at": skill.updated_at,
        }


class SkillOut(Schema):
    path: str
    scope: str
    user_id: str | None
    version: int
    content: str
    updated_at: datetime
    updated_by: str

    @staticmethod
    def of(skill: Skill) -> dict[str, Any]:
        return {**SkillSummary.of(skill), "content": skill.content, "updated_by": skill.updated_by}


# --- Memory users, notebooks, skills --------------------------------------------------------------

# Checked (and normalised) by check_skill_path; the type bounds what reaches it.
SkillPath = text(min_length=1, max_length=300)
SkillPrefix = text(max_length=300)
UserPrefix = text(max_length=200)
# A page of memory users: larger than other pages (a user row is small).
UserLimit = Annotated[int, Field(ge=1, le=500)]


class UserOut(Schema):
    user_id: str
    task_ids: list[str]
    created_at: datetime


class UserPage(Schema):
    items: list[UserOut]
    next_cursor: str | None
