"""Judge again the contradictions the offline judge decided between two facts (after an upgrade of the judge).

    manage.py rejudge_contradictions                 # what would change, nothing is written
    manage.py rejudge_contradictions --apply         # dismiss the ones no longer contradictory
    manage.py rejudge_contradictions --apply --tenant acme

An open one the judge no longer calls contradictory is dismissed; one settled by confidence (the weaker fact
superseded) is reopened, which makes that fact active again if nothing changed it since, and dismissed.
Each step is audited with the actor "rejudge" and can be undone from the review queue like a reviewer's.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory_admin.models import Tenant
from memory_admin.services.contradictions import contradictions_rejudge


class Command(BaseCommand):
    help = "Judge again what the offline contradiction judge decided; --apply dismisses what it no longer holds."

    def add_arguments(self, parser):
        parser.add_argument("--apply", action="store_true", help="change what is found (default: only count)")
        parser.add_argument("--tenant", default="", help="one tenant's slug (default: every tenant)")

    def handle(self, *args, apply: bool, tenant: str, **options):
        tenant_id = None
        if tenant:
            found = Tenant.objects.filter(slug=tenant).values_list("pk", flat=True).first()
            if found is None:
                raise CommandError(f"No tenant has the slug {tenant[:64]!r}.")
            tenant_id = found
        counts = contradictions_rejudge(apply=apply, tenant_id=tenant_id)
        verb = "" if apply else "would be "
        self.stdout.write(
            f"{counts['judged']} contradictions the offline judge decided were judged again; "
            f"{counts['still_contradictory']} still contradictory; "
            f"{counts['open_dismissed']} open ones {verb}dismissed; "
            f"{counts['superseded_restored']} settled by confidence {verb}reopened and dismissed "
            f"(the superseded fact active again)"
            + (f"; {counts['left']} left (changed since)" if counts["left"] else "")
            + ("" if apply else ". Nothing was changed: add --apply.")
        )
