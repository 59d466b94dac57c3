from django.core.management.base import BaseCommand, CommandError

from memory_admin.models import Tenant
from memory_admin.services.keys import api_key_create


class Command(BaseCommand):
    help = "Create an API key for an agent of a tenant. The key is printed once and never stored."

    def add_arguments(self, parser):
        parser.add_argument("tenant")
        parser.add_argument("agent")
        parser.add_argument("--admin", action="store_true", help="may change settings, export and erase")
        parser.add_argument("--users", default="", help="comma-separated memory user ids this key is limited to")

    def handle(self, *args, tenant: str, agent: str, admin: bool, users: str, **options):
        try:
            tenant_obj = Tenant.objects.get(slug=tenant)
        except Tenant.DoesNotExist as exc:
            raise CommandError(f"No tenant {tenant!r}; create it with create_tenant first.") from exc
        allowed = [u.strip() for u in users.split(",") if u.strip()]
        _, raw = api_key_create(tenant_id=tenant_obj.pk, agent_name=agent, is_admin=admin, allowed_user_ids=allowed)
        self.stdout.write(raw)
