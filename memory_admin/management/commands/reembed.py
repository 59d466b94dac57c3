"""Re-embed every fact and notebook statement with the configured embedder (after changing EMBEDDER)."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from tqdm import tqdm

from memory_admin.embeddings import embed, get_embedder
from memory_admin.models import Fact, NotebookChunk

BATCH = 256


class Command(BaseCommand):
    help = "Recompute the embeddings of all facts and notebook statements, in batches, with a progress bar."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", default="", help="only this tenant's slug")

    def handle(self, *args, tenant: str, **options):
        self.stdout.write(f"embedder: {get_embedder().name}")
        for model, text_field in ((Fact, "content"), (NotebookChunk, "text")):
            qs = model.objects.exclude(**{text_field: ""})
            if tenant:
                qs = qs.filter(**({"tenant__slug": tenant} if model is Fact else {"notebook__tenant__slug": tenant}))
            ids = list(qs.order_by("pk").values_list("pk", flat=True))
            with tqdm(total=len(ids), desc=model._meta.verbose_name_plural, unit="row") as bar:
                for start in range(0, len(ids), BATCH):
                    rows = list(model.objects.filter(pk__in=ids[start : start + BATCH]).only("pk", text_field))
                    for row, vector in zip(rows, embed([getattr(r, text_field) for r in rows]), strict=True):
                        row.embedding = vector
                    model.objects.bulk_update(rows, ["embedding"])
                    bar.update(len(rows))
