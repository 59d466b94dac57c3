"""Re-embed every fact and notebook statement with another engine, without stopping search.

    manage.py reembed --engine onnx          # fill the shadow column, catch up, swap
    manage.py reembed --engine onnx --no-swap   # fill only (run again later to finish)

1. fill: each row's vector from the target engine goes into `embedding_next` (for facts together with
   the content_hash it was computed from), in batches of --batch rows, one short transaction each, with a
   progress bar. `embedding` is untouched, so search, context and the write path go on as before.
2. catch up: rows written (or whose content changed) during the fill are filled, until none is left.
3. swap: one transaction moves `embedding_next` into `embedding` for every row whose hash still matches
   (readers are not blocked: they see the old vectors until the commit, the new ones after; a write to
   one of these rows waits for the commit). The shadow column is cleared.

Then restart the web and worker processes with EMBEDDER set to the engine (gunicorn: `kill -HUP`).
Rows written between the swap and the restart carry the old engine's vector; `reembed` again later
re-embeds everything (ONNX and torch vectors of the same text have a cosine of ~0.99, so for that pair
the mixed window is harmless).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.db.models import F, Q
from tqdm import tqdm

from memory_admin.embeddings import make_embedder
from memory_admin.models import Fact, NotebookChunk

BATCH = 256


def _pending(model, tenant: str):
    if model is Fact:
        qs = Fact.objects.exclude(content="").filter(
            Q(embedding_next__isnull=True) | ~Q(embedding_next_hash=F("content_hash"))
        )
        return qs.filter(tenant__slug=tenant) if tenant else qs
    qs = NotebookChunk.objects.exclude(text="").filter(embedding_next__isnull=True)
    return qs.filter(notebook__tenant__slug=tenant) if tenant else qs


def fill(embedder, *, tenant: str = "", batch: int = BATCH, progress: bool = True, out=None) -> int:
    """Fill the shadow column of every row that lacks a current one; returns the rows filled."""
    filled = 0
    for model, text_field in ((Fact, "content"), (NotebookChunk, "text")):
        fields = ["pk", text_field] + (["content_hash"] if model is Fact else [])
        while True:  # a pass, then passes for what was written meanwhile, until nothing is pending
            ids = list(_pending(model, tenant).order_by("pk").values_list("pk", flat=True))
            if not ids:
                break
            with tqdm(
                total=len(ids), desc=model._meta.verbose_name_plural, unit="row", disable=not progress, file=out
            ) as bar:
                for start in range(0, len(ids), batch):
                    rows = list(model.objects.filter(pk__in=ids[start : start + batch]).only(*fields))
                    vectors = embedder.embed([getattr(r, text_field) for r in rows])
                    for row, vector in zip(rows, vectors, strict=True):
                        row.embedding_next = vector
                        if model is Fact:
                            row.embedding_next_hash = row.content_hash
                    with transaction.atomic():
                        model.objects.bulk_update(
                            rows, ["embedding_next"] + (["embedding_next_hash"] if model is Fact else [])
                        )
                    filled += len(rows)
                    bar.update(len(rows))
    return filled


def swap(*, tenant: str = "") -> tuple[int, int]:
    """Move the shadow vectors into `embedding` in one transaction; returns (facts, chunks) swapped."""
    fact, chunk = Fact._meta.db_table, NotebookChunk._meta.db_table
    fact_filter, chunk_filter, params = "", "", []
    if tenant:
        fact_filter = " AND tenant_id = (SELECT id FROM memory_admin_tenant WHERE slug = %s)"
        chunk_filter = (
            " AND notebook_id IN (SELECT n.id FROM memory_admin_notebook n JOIN memory_admin_tenant t"
            " ON t.id = n.tenant_id WHERE t.slug = %s)"
        )
        params = [tenant]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {fact} SET embedding = embedding_next, embedding_next = NULL, embedding_next_hash = ''"
            f" WHERE embedding_next IS NOT NULL AND embedding_next_hash = content_hash{fact_filter}",
            params,
        )
        facts = cursor.rowcount
        cursor.execute(
            f"UPDATE {chunk} SET embedding = embedding_next, embedding_next = NULL"
            f" WHERE embedding_next IS NOT NULL{chunk_filter}",
            params,
        )
        return facts, cursor.rowcount


class Command(BaseCommand):
    help = (
        "Recompute the embeddings of all facts and notebook statements with an engine (default: the "
        "configured EMBEDDER) into a shadow column, in batches with a progress bar, then swap them in."
    )

    def add_arguments(self, parser):
        parser.add_argument("--engine", default="", help="onnx, static, torch or openai (default: settings.EMBEDDER)")
        parser.add_argument("--tenant", default="", help="only this tenant's slug")
        parser.add_argument("--batch", type=int, default=BATCH, help="rows per transaction")
        parser.add_argument("--no-swap", action="store_true", help="fill the shadow column only")

    def handle(self, *args, engine: str, tenant: str, batch: int, no_swap: bool, **options):
        from django.conf import settings

        try:
            embedder = make_embedder(engine or settings.EMBEDDER)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"embedder: {embedder.name}")
        filled = fill(embedder, tenant=tenant, batch=max(1, batch), out=self.stderr)
        self.stdout.write(f"filled {filled} rows")
        if no_swap:
            return
        facts, chunks = swap(tenant=tenant)
        self.stdout.write(f"swapped {facts} facts and {chunks} notebook statements to {embedder.name}")
        if (engine or settings.EMBEDDER) != settings.EMBEDDER:
            self.stdout.write(f"now restart the web and worker processes with EMBEDDER={engine}")
