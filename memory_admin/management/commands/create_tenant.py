from django.core.management.base import BaseCommand

from memory_admin.services.tenants import tenant_create


class Command(BaseCommand):
    help = "Create a tenant (idempotent) with default settings."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug: str, name: str, **options):
        tenant = tenant_create(slug=slug, name=name)
        self.stdout.write(f"tenant {tenant.slug} (id {tenant.pk})")
