"""Dashboard accounts: create a person's login and their role in a tenant."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction

from memory_admin.errors import Invalid, NotFound
from memory_admin.models import Membership, MemoryUser, Tenant


@transaction.atomic
def staff_create(
    *,
    tenant_slug: str,
    username: str,
    role: str,
    memory_user_external_id: str | None = None,
    password: str | None = None,
    email: str = "",
) -> tuple[Membership, str | None]:
    """Create (or update) a dashboard account and its membership in one tenant. Idempotent: running it
    again changes the role and, when given, the password. A member must name the memory user it is.

    Returns the membership and the password that was set (generated when none was given for a new
    account; None when an existing account kept its password)."""
    if role not in Membership.Role.values:
        raise Invalid(f"role must be one of {', '.join(Membership.Role.values)}.", field="role")
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        raise NotFound(f"No tenant {tenant_slug!r}; create it first with create_tenant.")
    memory_user = None
    if role == Membership.Role.MEMBER:
        if not memory_user_external_id:
            raise Invalid(
                "A member needs --memory-user: the memory user whose notebook and facts they own.", field="memory_user"
            )
        # A member may sign in before any agent wrote about them: create their memory user.
        memory_user, _ = MemoryUser.objects.get_or_create(tenant=tenant, external_id=memory_user_external_id)
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=username, defaults={"email": email})
    if created and not password:
        password = secrets.token_urlsafe(18)
    if password:
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise Invalid("The password is too weak: " + " ".join(exc.messages), field="password") from exc
        user.set_password(password)
        user.save(update_fields=["password"])
    membership, _ = Membership.objects.update_or_create(
        user=user, tenant=tenant, defaults={"role": role, "memory_user": memory_user}
    )
    return membership, password
