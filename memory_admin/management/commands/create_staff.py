from django.core.management.base import BaseCommand, CommandError

from memory_admin.errors import DomainError
from memory_admin.services.staff import staff_create


class Command(BaseCommand):
    help = "Create or update a dashboard account and its role in a tenant (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=["admin", "operator", "auditor", "member"])
        parser.add_argument("--memory-user", default=None, help="for members: the memory user's external id")
        parser.add_argument("--password", default=None, help="default: keep, or generate for a new account")
        parser.add_argument("--email", default="")

    def handle(
        self,
        *args,
        tenant: str,
        username: str,
        role: str,
        memory_user: str | None,
        password: str | None,
        email: str,
        **options,
    ):
        try:
            membership, password_set = staff_create(
                tenant_slug=tenant,
                username=username,
                role=role,
                memory_user_external_id=memory_user,
                password=password,
                email=email,
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        line = f"{username} is {membership.role} of {tenant}"
        if membership.memory_user_id:
            line += f" (memory user {membership.memory_user.external_id})"
        if password_set and not password:
            line += f"; generated password: {password_set}"
        self.stdout.write(line)
