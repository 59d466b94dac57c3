"""`manage.py restore FILE`: put a backup in place of the current database, never deleting first.

The backup is checked, restored into a new database, verified (row counts, migrations; an older
backup is migrated), and swapped in by renaming; the previous database is kept under a printed name.
Stop the web server, worker and beat first (or pass `--terminate` to end their sessions at the swap).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from memory_admin.backup import BackupError, Db, install_backup_secrets, restore


class Command(BaseCommand):
    help = "Restore a backup made by `manage.py backup` (into a new database, verified, then swapped in)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--terminate",
            action="store_true",
            help="end other sessions on the database at the swap instead of refusing",
        )
        parser.add_argument(
            "--keep-secrets", action="store_true", help="keep this install's keys rather than the backup's"
        )

    def handle(self, *args, file: Path, terminate: bool, keep_secrets: bool, **options) -> None:
        connections.close_all()  # this process's own session must not hold the database
        try:
            result = restore(file, Db.from_django(settings.DATABASES["default"]), terminate=terminate)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        written = [] if keep_secrets else install_backup_secrets(result.secrets, settings.DATA_DIR)
        rows = sum(result.manifest["row_counts"].values())
        self.stdout.write(
            f"restored {file} (made {result.manifest['created_at']}): {rows} rows verified"
            + (f", {len(result.migrated)} migrations applied" if result.migrated else "")
        )
        if result.kept_as:
            self.stdout.write(f"the previous database is kept as {result.kept_as}; drop it once satisfied.")
        if written:
            self.stdout.write(
                f"install keys restored into {settings.DATA_DIR}: {', '.join(written)} "
                "(previous files kept as *.pre-restore); restart the services."
            )
