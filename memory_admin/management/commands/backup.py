"""`manage.py backup FILE`: one consistent snapshot of the whole database plus the install's keys.

See `memory_admin/backup.py` for what the file holds. The file is created 0600: it carries every
memory and, unless `--no-secrets`, the install's SECRET_KEY and PII_FINGERPRINT_KEY.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memory_admin.backup import BackupError, Db, backup_create, secrets_in_effect


class Command(BaseCommand):
    help = "Back up the whole database (pg_dump, one snapshot) and the install's keys into FILE (mode 0600)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--no-secrets",
            action="store_true",
            help="leave out secret_key and pii_fingerprint_key (restored PII fingerprints "
            "then only match new ones if the target install has the same key)",
        )

    def handle(self, *args, file: Path, no_secrets: bool, **options) -> None:
        if file.exists() and file.is_dir():
            raise CommandError(f"{file} is a directory; name the backup file.")
        try:
            manifest = backup_create(
                file, Db.from_django(settings.DATABASES["default"]), secrets=None if no_secrets else secrets_in_effect()
            )
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        rows = sum(manifest["row_counts"].values())
        self.stdout.write(
            f"backup written to {file}: {len(manifest['row_counts'])} tables, {rows} rows, "
            f"{manifest['dump_bytes']} bytes of dump; keys included: "
            f"{', '.join(manifest['secrets']) or 'none'}"
        )
