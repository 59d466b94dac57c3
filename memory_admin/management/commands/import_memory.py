"""`manage.py import_memory TENANT USER FILE`: replay an export into a memory user of a tenant.

The same validation (`ExportIn`) and service (`services.imports.user_import`) as
`POST /api/v1/users/{id}/import`, for exports larger than an API request may be
(up to IMPORT_MAX_FILE_BYTES and IMPORT_MAX_FILE_ITEMS). The writes are audited as `system:import`.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from pydantic import ValidationError

from memory_admin.api import invalid_body
from memory_admin.api.schemas import ExportIn
from memory_admin.errors import DomainError
from memory_admin.models import Tenant
from memory_admin.selectors.access import Principal, memory_user_for
from memory_admin.services.imports import check_import, user_import


def _read_export(file: Path) -> dict:
    if not file.is_file():
        raise CommandError(f"{file}: no such file.")
    size = file.stat().st_size
    if size > settings.IMPORT_MAX_FILE_BYTES:
        raise CommandError(
            f"{file} has {size} bytes; an import file may hold at most "
            f"{settings.IMPORT_MAX_FILE_BYTES} (IMPORT_MAX_FILE_BYTES). Nothing was imported."
        )
    try:
        return ExportIn.model_validate(json.loads(file.read_bytes())).model_dump()
    except (ValueError, RecursionError) as exc:
        errors = invalid_body(exc.errors()) if isinstance(exc, ValidationError) else {"detail": "not valid JSON"}
        raise CommandError(
            f"{file} is not an export this install reads: {errors['detail']}. Nothing was imported."
        ) from exc


class Command(BaseCommand):
    help = "Import an export (GET /users/{id}/export) into USER of TENANT, through the write path."

    def add_arguments(self, parser) -> None:
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("user", help="the memory user's id in that tenant (created if new)")
        parser.add_argument("file", type=Path)

    def handle(self, *args, tenant: str, user: str, file: Path, **options) -> None:
        owner = Tenant.objects.filter(slug=tenant).first()
        if owner is None:
            raise CommandError(f"No tenant {tenant!r}.")
        data = _read_export(file)
        principal = Principal.system(owner.pk, actor="system:import")
        try:
            check_import(data, max_items=settings.IMPORT_MAX_FILE_ITEMS)
            memory_user = memory_user_for(principal, user, create=True)
            report = user_import(
                principal=principal, memory_user=memory_user, data=data, max_items=settings.IMPORT_MAX_FILE_ITEMS
            )
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.detail}") from exc
        self.stdout.write(json.dumps(report.as_dict(), indent=1))
