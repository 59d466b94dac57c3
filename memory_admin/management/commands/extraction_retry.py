"""Retry failed extraction batches (the dashboard and `POST /api/v1/batches/{id}/retry` do the same)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory_admin.errors import DomainError
from memory_admin.models import ExtractionBatch, Tenant
from memory_admin.selectors.access import Principal
from memory_admin.services.extraction import batch_retry


class Command(BaseCommand):
    help = "Retry failed extraction batches: by id, or every failed batch of a tenant."

    def add_arguments(self, parser) -> None:
        parser.add_argument("batch_ids", nargs="*", type=int)
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--all-failed", action="store_true", help="every failed batch of the tenant")

    def handle(self, *args, batch_ids: list[int], tenant: str, all_failed: bool, **options) -> None:
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"No tenant {tenant!r}.")
        if all_failed:
            batch_ids = list(ExtractionBatch.objects.filter(tenant=found, status="failed").values_list("pk", flat=True))
        if not batch_ids:
            raise CommandError("Name batch ids, or pass --all-failed.")
        principal = Principal.system(found.pk, actor="manage.py extraction_retry")
        retried = 0
        for batch_id in batch_ids:
            try:
                batch_retry(principal, batch_id)
                retried += 1
            except DomainError as exc:
                self.stderr.write(f"batch {batch_id}: {exc.detail}")
        self.stdout.write(f"{retried} batch(es) queued for retry.")
