"""Draw entities for facts stored before entities existed (or while no worker drew them).

    manage.py entities_backfill                      # every tenant
    manage.py entities_backfill --tenant acme --batch-size 500
    manage.py entities_backfill --limit 10000        # a slice now, the rest in a later run
    manage.py entities_backfill --restart            # from the first fact again

Active facts are read in (created_at, id) order, --batch-size at a time; each batch is drawn the way the
write path's task draws one (services.entity_draw.facts_draw, each owner's facts under its write lock),
then the marker (EntityBackfill: the last fact gone through) moves past it. Resumable: a rerun, after an
interruption or a --limit, continues after the marker. Idempotent: a fact that already has mentions is
left alone and resolution finds the existing entities, so a rerun (even with --restart) creates nothing
new. Facts written meanwhile are drawn by the live task anyway."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from tqdm import tqdm

from memory_admin.models import EntityBackfill, Tenant
from memory_admin.services.entity_draw import facts_after, walk_step

BATCH = 500


class Command(BaseCommand):
    help = "Draw entities (and relations) for existing facts; resumable and idempotent."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", default="", help="a tenant's slug (default: every tenant)")
        parser.add_argument("--batch-size", type=int, default=BATCH)
        parser.add_argument("--limit", type=int, default=0, help="stop after this many facts (0: no limit)")
        parser.add_argument("--restart", action="store_true", help="ignore the marker: from the first fact")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, tenant: str, batch_size: int, limit: int, restart: bool, no_progress: bool, **options):
        if batch_size < 1 or limit < 0:
            raise CommandError("--batch-size must be at least 1 and --limit at least 0")
        owner = Tenant.objects.filter(slug=tenant).first() if tenant else None
        if tenant and owner is None:
            raise CommandError(f"no tenant with the slug {tenant!r}")
        marker, _ = EntityBackfill.objects.get_or_create(scope=tenant or "*")
        if restart:
            marker.last_created_at, marker.last_fact_id, marker.facts_done, marker.finished_at = None, None, 0, None
            marker.save()
        elif marker.last_fact_id is not None:
            self.stdout.write(f"resuming after {marker.facts_done} facts gone through")
        tenant_id = owner.pk if owner else None
        total = facts_after(marker, tenant_id=tenant_id).count()
        total = min(total, limit) if limit else total
        done = linked = 0
        with tqdm(total=total, desc="facts", unit="fact", disable=no_progress, file=self.stderr) as bar:
            while done < total:
                step, made = walk_step(marker, facts_after(marker, tenant_id=tenant_id), min(batch_size, total - done))
                if not step:
                    break
                done, linked = done + step, linked + made
                bar.update(step)
        if not facts_after(marker, tenant_id=tenant_id).exists():
            marker.finished_at = timezone.now()
            marker.save(update_fields=["finished_at", "updated_at"])
        self.stdout.write(f"went through {done} facts; {linked} entity links made")
