"""Dashboard accounts: a signed-in person's role in one tenant, as the same `Principal` the API uses.

A dashboard account reaches a tenant only through a Membership; without one the tenant looks like it
does not exist (404), exactly as another tenant's objects do for an API key.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from memory_admin.models import Membership
from memory_admin.selectors.access import Principal


def memberships_of(user: AbstractBaseUser | AnonymousUser) -> list[Membership]:
    """Every tenant this account belongs to, with the tenant and (for members) the memory user."""
    if not user.is_authenticated:
        return []
    return list(
        Membership.objects.filter(user_id=user.pk).select_related("tenant", "memory_user").order_by("tenant__slug")
    )


def principal_from_membership(membership: Membership, username: str) -> Principal:
    return Principal(
        tenant_id=membership.tenant_id,
        role=membership.role,
        actor=f"staff:{username}",
        actor_type="staff",
        # A member reaches exactly its own memory user; every other role sees the whole tenant.
        member_user_id=membership.memory_user_id if membership.role == Membership.Role.MEMBER else None,
    )
