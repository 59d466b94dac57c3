"""`manage.py config_table [--check]`: write README's Configuration table from memory_admin/config.py."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memory_admin import config


class Command(BaseCommand):
    help = "Write README.md's configuration table from the declarations in memory_admin/config.py."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="change nothing; fail when README differs")

    def handle(self, *args, check: bool, **options):
        readme = settings.BASE_DIR / "README.md"
        text = readme.read_text()
        wanted = config.readme_with_table(text)
        if wanted == text:
            self.stdout.write(f"README.md's configuration table is up to date ({len(config.VARIABLES)} variables).")
            return
        if check:
            raise CommandError(
                "README.md's configuration table differs from memory_admin/config.py: run `manage.py config_table`."
            )
        readme.write_text(wanted)
        self.stdout.write(f"README.md: configuration table written ({len(config.VARIABLES)} variables).")
