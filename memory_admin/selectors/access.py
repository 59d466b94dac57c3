"""The one access check (SPEC §3): who may read and write what, applied inside the SQL query.

Every read and write, API and dashboard alike, starts from a `Principal` and goes through the
functions here. Objects of another tenant, or of a memory user the principal may not reach, are
filtered out by the query itself, so they look exactly like objects that do not exist (404).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db import connection, models
from django.db.models import Q

from memory_admin.db.hydrate import hydrate
from memory_admin.errors import Forbidden, NotFound
from memory_admin.models import (
    AuditEvent,
    Checkpoint,
    Contradiction,
    Edge,
    Entity,
    EntityMerge,
    EntityMergeReview,
    Episode,
    ExtractionBatch,
    Fact,
    FactEntity,
    KnowledgeChunk,
    KnowledgeDocument,
    KnowledgeSource,
    LlmCall,
    MemoryUser,
    Message,
    Notebook,
    NotebookRevision,
    PiiBlock,
    Relation,
    Skill,
    SkillRevision,
    StoreItem,
    Thread,
    UsageDay,
)

M = TypeVar("M", bound=models.Model)

# What each role may do besides reading what it can see.
READ = "read"
WRITE_MEMORY = "write_memory"  # facts, notebooks, skills, messages
CURATE = "curate"  # review queue, pin, correct or forget any fact
ADMIN = "admin"  # settings, API keys, export and erase
AUDIT = "audit"  # PII blocks and the audit log

ROLE_ABILITIES: dict[str, frozenset[str]] = {
    "admin": frozenset({READ, WRITE_MEMORY, CURATE, ADMIN, AUDIT}),
    "operator": frozenset({READ, WRITE_MEMORY, CURATE}),
    "auditor": frozenset({READ, AUDIT}),
    "member": frozenset({READ, WRITE_MEMORY}),
    "agent": frozenset({READ, WRITE_MEMORY}),
    "agent_admin": frozenset({READ, WRITE_MEMORY, ADMIN}),
    "system": frozenset({READ, WRITE_MEMORY, CURATE, ADMIN, AUDIT}),
}


@dataclass(frozen=True)
class Principal:
    """Whoever acts: an agent's API key, a dashboard account in one tenant, or the system itself."""

    tenant_id: int
    role: str
    actor: str
    actor_type: str = "agent"  # agent, staff, system
    agent_id: int | None = None
    api_key_id: int | None = None
    # Agent keys may be limited to memory users by their external ids (empty: all of the tenant).
    allowed_external_ids: tuple[str, ...] = ()
    # A member reaches exactly one memory user (its primary key).
    member_user_id: int | None = None
    # A read-only key: its role's abilities cut to READ; anything else is refused with `read_only_key`.
    read_only: bool = False
    abilities: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        if not self.abilities:
            abilities = ROLE_ABILITIES[self.role]
            object.__setattr__(self, "abilities", abilities & {READ} if self.read_only else abilities)

    def can(self, ability: str) -> bool:
        return ability in self.abilities

    def require(self, ability: str) -> None:
        if self.can(ability):
            return
        if self.read_only:
            raise Forbidden("This API key is read-only: it may search and read, not write.", code="read_only_key")
        raise Forbidden(f"Your role ({self.role}) may not do this.", code="forbidden")

    @property
    def restricted(self) -> bool:
        return bool(self.allowed_external_ids) or self.member_user_id is not None

    @classmethod
    def system(cls, tenant_id: int, actor: str = "system") -> Principal:
        return cls(tenant_id=tenant_id, role="system", actor=actor, actor_type="system")


def _user_q(principal: Principal, path: str) -> Q:
    """The memory users a restricted principal reaches, as a condition on `path` (a MemoryUser
    relation). Only call it when `principal.restricted`: an empty Q would vanish from an OR."""
    if principal.member_user_id is not None:
        return Q(**{f"{path}_id": principal.member_user_id})
    if principal.allowed_external_ids:
        return Q(**{f"{path}__external_id__in": list(principal.allowed_external_ids)})
    raise AssertionError("_user_q is only for restricted principals")


# For each model: the relation to the memory user that owns a row, and whether rows without one
# (tenant-wide objects such as the tenant notebook or tenant skills) are visible to restricted principals.
_OWNER_PATH: dict[type[models.Model], tuple[str, str]] = {
    MemoryUser: ("", "tenant_id"),
    Fact: ("memory_user", "tenant_id"),
    Notebook: ("memory_user", "tenant_id"),
    NotebookRevision: ("notebook__memory_user", "notebook__tenant_id"),
    Skill: ("memory_user", "tenant_id"),
    SkillRevision: ("skill__memory_user", "skill__tenant_id"),
    Thread: ("memory_user", "tenant_id"),
    Message: ("memory_user", "tenant_id"),
    Episode: ("memory_user", "tenant_id"),
    Contradiction: ("memory_user", "tenant_id"),
    ExtractionBatch: ("memory_user", "tenant_id"),
    PiiBlock: ("memory_user", "tenant_id"),
    AuditEvent: ("memory_user", "tenant_id"),
    Edge: ("src_fact__memory_user", "tenant_id"),
    LlmCall: ("batch__memory_user", "tenant_id"),
    UsageDay: ("", "tenant_id"),
    Entity: ("memory_user", "tenant_id"),
    Relation: ("memory_user", "tenant_id"),
    FactEntity: ("fact__memory_user", "fact__tenant_id"),
    EntityMerge: ("memory_user", "tenant_id"),
    EntityMergeReview: ("memory_user", "tenant_id"),
    StoreItem: ("memory_user", "tenant_id"),
    Checkpoint: ("memory_user", "tenant_id"),
    KnowledgeSource: ("memory_user", "tenant_id"),
    KnowledgeDocument: ("memory_user", "tenant_id"),
    KnowledgeChunk: ("memory_user", "tenant_id"),
}

# Models whose rows without a memory user are shared by the whole tenant, like org facts.
_SHARED_WHEN_NO_USER = (Notebook, Skill, NotebookRevision, SkillRevision, Entity, Relation, FactEntity)
_SHARED_WHEN_NO_USER += (KnowledgeSource, KnowledgeDocument, KnowledgeChunk)  # a tenant's shared sources


def visible(principal: Principal, queryset: models.QuerySet[M]) -> models.QuerySet[M]:
    """Narrow any queryset to the rows this principal may read. Used by every read."""
    model = queryset.model
    user_path, tenant_path = _OWNER_PATH[model]
    if model is MemoryUser:
        q = Q(tenant_id=principal.tenant_id)
        if principal.member_user_id is not None:
            q &= Q(pk=principal.member_user_id)
        elif principal.allowed_external_ids:
            q &= Q(external_id__in=list(principal.allowed_external_ids))
        return queryset.filter(q)
    if model is UsageDay:
        # Tenant-wide counts of every user's reads: not for principals restricted to some users.
        return queryset.none() if principal.restricted else queryset.filter(tenant_id=principal.tenant_id)
    q = Q(**{tenant_path: principal.tenant_id})
    if model is Fact:
        # A user reads its ancestors: the tenant's org scope and the global scope (SPEC §3).
        if principal.restricted:
            q &= Q(memory_user__isnull=True) | _user_q(principal, user_path)
        q |= Q(scope=Fact.Scope.GLOBAL)
        return queryset.filter(q)
    if principal.restricted:
        if model in _SHARED_WHEN_NO_USER:
            # Tenant notebook, tenant skills and org entities are readable by everyone in the tenant.
            q &= Q(**{f"{user_path}__isnull": True}) | _user_q(principal, user_path)
        else:
            q &= _user_q(principal, user_path)
    return queryset.filter(q)


def get_visible(principal: Principal, queryset: models.QuerySet[M], **lookup) -> M:
    """One object the principal may read, or NotFound (for missing, forbidden and malformed ids alike)."""
    try:
        return visible(principal, queryset).get(**lookup)
    except (queryset.model.DoesNotExist, ValueError, TypeError, ValidationError) as exc:
        raise NotFound(f"No {queryset.model._meta.verbose_name} with that id is visible to you.") from exc


_EXTERNAL_ID = "\x00external-id\x00"  # stands for the request's external id in the cached SQL


@functools.lru_cache(maxsize=256)
def _memory_user_statement(principal: Principal) -> tuple[str, tuple]:
    """The lookup of one memory user by external id through `visible()`, compiled once per principal
    (the whole frozen principal is the key: whatever the access check reads gets its own entry)."""
    sql, params = visible(principal, MemoryUser.objects.filter(external_id=_EXTERNAL_ID))[:1].query.sql_with_params()
    return sql, tuple(params)


def _visible_memory_user(principal: Principal, external_id: str) -> MemoryUser | None:
    sql, params = _memory_user_statement(principal)
    with connection.cursor() as cursor:
        cursor.execute(sql, [external_id if p == _EXTERNAL_ID else p for p in params])
        names = [column.name for column in cursor.description]
        users = hydrate(MemoryUser, names, cursor.fetchall())
    return users[0] if users else None


def memory_user_lookup(principal: Principal, external_id: str) -> tuple[str, list]:
    """`memory_user_for`'s own statement (SQL and parameters) for this principal and external id, for a
    caller that sends it inside a statement of its own (the API key statement); its rows go to
    `known_memory_user`."""
    sql, params = _memory_user_statement(principal)
    return sql, [external_id if p == _EXTERNAL_ID else p for p in params]


@dataclass(frozen=True)
class KnownUser:
    """What `memory_user_lookup`'s statement answered for `principal` and `external_id` in this request
    (`user` None: no such visible user). `memory_user_for` uses it for that principal and id only."""

    principal: Principal
    external_id: str
    user: MemoryUser | None


def known_memory_user(principal: Principal, external_id: str, names: list[str], row: tuple) -> KnownUser:
    """A KnownUser from one row of `memory_user_lookup`'s columns (`names`; all NULL: no user)."""
    user = hydrate(MemoryUser, names, [row])[0] if row and row[0] is not None else None
    return KnownUser(principal, external_id, user)


def memory_user_for(
    principal: Principal, external_id: str, *, create: bool = False, known: KnownUser | None = None
) -> MemoryUser:
    """The memory user with this external id. Reads never create; the first write does (SPEC §8).
    `known`: the same lookup already answered in this request (by the key statement), used when it was
    made for this very principal and id."""
    if known is not None and known.principal == principal and known.external_id == external_id:
        user = known.user
    else:
        user = _visible_memory_user(principal, external_id)
    if user is not None:
        if user.erased_at is not None and not create:
            raise NotFound("No memory user with that id is visible to you.")
        return user
    if not create:
        raise NotFound("No memory user with that id is visible to you.")
    principal.require(WRITE_MEMORY)
    if principal.member_user_id is not None or (
        principal.allowed_external_ids and external_id not in principal.allowed_external_ids
    ):
        raise NotFound("No memory user with that id is visible to you.")
    from memory_admin.services.screening import screen_identifier  # inside: screening imports this module

    screen_identifier(principal, external_id, what="user id", route="user_id")
    user, _ = MemoryUser.objects.get_or_create(tenant_id=principal.tenant_id, external_id=external_id)
    return user


def require_tenant_wide(principal: Principal, ability: str = WRITE_MEMORY) -> None:
    """Writes to what every user of the tenant reads or is governed by (tenant skills, the tenant
    notebook, settings, API keys) need `ability` and a reach over the whole tenant: a principal limited
    to some memory users (a restricted key, a member) may not change them unless it can curate."""
    principal.require(ability)
    if principal.restricted and not principal.can(CURATE):
        raise Forbidden(
            "You are limited to some memory users; changing what the whole tenant shares needs an "
            "unrestricted key or the curate ability.",
            code="forbidden",
        )


def require_write_to(principal: Principal, memory_user: MemoryUser | None) -> None:
    """A write of memory (notebook, skill) to one user's scope, or with no user to the tenant scope."""
    if memory_user is None:
        require_tenant_wide(principal, WRITE_MEMORY)
    else:
        principal.require(WRITE_MEMORY)


def writable_fact(principal: Principal, fact_id: UUID | str) -> Fact:
    """A fact the principal may change: visible, and in a user scope it reaches (not org/global)."""
    fact = get_visible(principal, Fact.objects.select_related("memory_user"), pk=fact_id)
    if fact.memory_user_id is None:
        if not principal.can(CURATE):
            raise Forbidden("Shared (org or global) facts are read-only to you.", code="read_only_scope")
    principal.require(WRITE_MEMORY)
    return fact
