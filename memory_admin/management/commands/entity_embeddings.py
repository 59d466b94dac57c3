"""Give entities the embedding of their name and type (resolution's step 3 compares them).

    manage.py entity_embeddings               # entities without one (made before step 3 existed)
    manage.py entity_embeddings --all         # every entity again, in place (`reembed` switches engines
                                              # without downtime: facts, notebooks and entities)
    manage.py entity_embeddings --tenant acme

Idempotent and resumable: each batch is committed on its own, and a run without --all skips what an
earlier (interrupted) run already filled. A progress bar shows the rows left.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction
from tqdm import tqdm

from memory_admin.embedding import embed
from memory_admin.models import Entity
from memory_admin.services.entity_curation import entity_text

BATCH = 256


def fill(*, tenant: str = "", everything: bool = False, batch: int = BATCH, progress: bool = True, out=None) -> int:
    """Embed the entities that need it; returns how many were embedded."""
    entities = Entity.objects.all() if everything else Entity.objects.filter(embedding__isnull=True)
    if tenant:
        entities = entities.filter(tenant__slug=tenant)
    ids = list(entities.order_by("pk").values_list("pk", flat=True))
    done = 0
    with tqdm(total=len(ids), desc="entities", unit="row", disable=not progress, file=out) as bar:
        for start in range(0, len(ids), batch):
            rows = list(Entity.objects.filter(pk__in=ids[start : start + batch]).only("pk", "name", "type"))
            for row, vector in zip(rows, embed([entity_text(r) for r in rows]), strict=True):
                row.embedding = vector
            with transaction.atomic():
                Entity.objects.bulk_update(rows, ["embedding"])
            done += len(rows)
            bar.update(len(rows))
    return done


class Command(BaseCommand):
    help = "Embed entities by name and type (those without an embedding, or --all)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--all", action="store_true", dest="everything", help="re-embed every entity")
        parser.add_argument("--tenant", default="", help="only this tenant (slug)")
        parser.add_argument("--batch", type=int, default=BATCH)

    def handle(self, *args, everything: bool, tenant: str, batch: int, **options) -> None:
        done = fill(tenant=tenant, everything=everything, batch=max(1, batch), out=self.stderr)
        self.stdout.write(f"{done} entit{'y' if done == 1 else 'ies'} embedded.")
