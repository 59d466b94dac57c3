"""Re-embed every fact, notebook statement, entity and document chunk with another engine, without
stopping search.

    manage.py reembed --engine onnx          # fill the shadow column, catch up, swap
    manage.py reembed --engine onnx --no-swap   # fill only (run again later to finish)

1. fill: each row's vector from the target engine goes into `embedding_next` (for facts together with
   the content_hash it was computed from, for entities with the hash of the name and type; a document
   chunk's text never changes in place, a changed document makes new chunks), in batches
   of --batch rows, one short transaction each, with a progress bar per kind of row. `embedding` is
   untouched, so search, context, resolution and the write path go on as before.
2. catch up: rows written (or whose content changed, or entities renamed) during the fill are filled,
   until none is left.
3. swap: one transaction moves `embedding_next` into `embedding` for every row whose hash still matches
   (readers are not blocked: they see the old vectors until the commit, the new ones after; a write to
   one of these rows waits for the commit). The shadow column is cleared. The HNSW indexes on
   `embedding` stay: they are updated with the rows, never dropped, so vector search keeps its index.
   That costs the swap time: 20k entities under an HNSW index swapped in 57 s, against 2.2 s with no
   index (2 cores at load 8); writes to those rows (resolution's, curation's) wait for the commit,
   reads never do.

Then restart the web and worker processes with EMBEDDER set to the engine (gunicorn: `kill -HUP`).
Rows written between the swap and the restart carry the old engine's vector; `reembed` again later
re-embeds everything (ONNX and torch vectors of the same text have a cosine of ~0.99, so for that pair
the mixed window is harmless).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, models, transaction
from django.db.models import F, Q
from tqdm import tqdm

from memory_admin.embedding import make_embedder
from memory_admin.knowledge.digest import embedding_text
from memory_admin.models import Entity, Fact, KnowledgeChunk, NotebookChunk
from memory_admin.services.entity_curation import ENTITY_TEXT_HASH_SQL, entity_text, entity_text_hash

BATCH = 256


@dataclass(frozen=True)
class _Table:
    """One kind of embedded row: what it is embedded from and how a shadow vector is checked as current."""

    model: type[models.Model]
    fields: tuple[str, ...]  # what the text (and its hash) is read from
    text: Callable[[models.Model], str]
    hash: Callable[[models.Model], str] | None  # stored in embedding_next_hash; None: no hash column
    tenant_path: str


_TABLES = (
    _Table(Fact, ("content", "content_hash"), lambda r: r.content, lambda r: r.content_hash, "tenant__slug"),
    _Table(NotebookChunk, ("text",), lambda r: r.text, None, "notebook__tenant__slug"),
    # An entity's vector is of its name and type (resolution's step 3 and entity-anchored search).
    _Table(Entity, ("name", "type"), entity_text, entity_text_hash, "tenant__slug"),
    # A document chunk's vector is of its heading path and text, as digestion embedded it; every status
    # (a quarantined chunk released, a superseded one read as history, keep a vector of the live engine).
    _Table(
        KnowledgeChunk,
        ("heading_path", "content"),
        lambda r: embedding_text(r.heading_path, r.content),
        None,
        "tenant__slug",
    ),
)


class Swapped(NamedTuple):
    facts: int
    chunks: int  # notebook statements
    entities: int
    document_chunks: int


def _pending(table: _Table, tenant: str):
    """Rows without a shadow vector, or with one computed from a text they no longer have."""
    if table.model is Fact:
        qs = Fact.objects.exclude(content="").filter(
            Q(embedding_next__isnull=True) | ~Q(embedding_next_hash=F("content_hash"))
        )
    elif table.model is Entity:
        qs = Entity.objects.filter(Q(embedding_next__isnull=True) | ~Q(embedding_next_hash=ENTITY_TEXT_HASH_SQL))
    elif table.model is KnowledgeChunk:
        qs = KnowledgeChunk.objects.filter(embedding_next__isnull=True)
    else:
        qs = NotebookChunk.objects.exclude(text="").filter(embedding_next__isnull=True)
    return qs.filter(**{table.tenant_path: tenant}) if tenant else qs


def _fill_batch(embedder, table: _Table, ids: list) -> int:
    rows = list(table.model.objects.filter(pk__in=ids).only("pk", *table.fields))
    for row, vector in zip(rows, embedder.embed([table.text(r) for r in rows]), strict=True):
        row.embedding_next = vector
        if table.hash is not None:
            row.embedding_next_hash = table.hash(row)
    with transaction.atomic():
        table.model.objects.bulk_update(
            rows, ["embedding_next"] + (["embedding_next_hash"] if table.hash is not None else [])
        )
    return len(rows)


def fill(embedder, *, tenant: str = "", batch: int = BATCH, progress: bool = True, out=None) -> int:
    """Fill the shadow column of every row that lacks a current one; returns the rows filled."""
    filled = 0
    for table in _TABLES:
        while True:  # a pass, then passes for what was written meanwhile, until nothing is pending
            ids = list(_pending(table, tenant).order_by("pk").values_list("pk", flat=True))
            if not ids:
                break
            name = table.model._meta.verbose_name_plural
            with tqdm(total=len(ids), desc=name, unit="row", disable=not progress, file=out) as bar:
                for start in range(0, len(ids), batch):
                    done = _fill_batch(embedder, table, ids[start : start + batch])
                    filled += done
                    bar.update(done)
    return filled


def swap(*, tenant: str = "") -> Swapped:
    """Move the shadow vectors into `embedding` in one transaction; returns how many of each kind were
    swapped. Plain UPDATEs: the vector indexes on `embedding` (facts' and entities' HNSW) are kept and
    take the new vectors as the rows change, so search goes on using them throughout."""
    fact, chunk, document_chunk = Fact._meta.db_table, NotebookChunk._meta.db_table, KnowledgeChunk._meta.db_table
    fact_filter, chunk_filter, params = "", "", []
    if tenant:
        fact_filter = " AND tenant_id = (SELECT id FROM memory_admin_tenant WHERE slug = %s)"
        chunk_filter = (
            " AND notebook_id IN (SELECT n.id FROM memory_admin_notebook n JOIN memory_admin_tenant t"
            " ON t.id = n.tenant_id WHERE t.slug = %s)"
        )
        params = [tenant]
    entities = Entity.objects.filter(embedding_next__isnull=False, embedding_next_hash=ENTITY_TEXT_HASH_SQL)
    if tenant:
        entities = entities.filter(tenant__slug=tenant)
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
        chunks = cursor.rowcount
        swapped = entities.update(embedding=F("embedding_next"), embedding_next=None, embedding_next_hash="")
        cursor.execute(
            f"UPDATE {document_chunk} SET embedding = embedding_next, embedding_next = NULL"
            f" WHERE embedding_next IS NOT NULL{fact_filter}",
            params,
        )
        return Swapped(facts, chunks, swapped, cursor.rowcount)


class Command(BaseCommand):
    help = (
        "Recompute the embeddings of all facts, notebook statements, entities and document chunks with an "
        "engine (default: "
        "the configured EMBEDDER) into a shadow column, in batches with a progress bar, then swap them in."
    )

    def add_arguments(self, parser):
        parser.add_argument("--engine", default="", help="onnx, torch or openai (default: settings.EMBEDDER)")
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
        done = swap(tenant=tenant)
        self.stdout.write(
            f"swapped {done.facts} facts, {done.chunks} notebook statements, {done.entities} entities and "
            f"{done.document_chunks} document chunks to {embedder.name}"
        )
        if (engine or settings.EMBEDDER) != settings.EMBEDDER:
            self.stdout.write(f"now restart the web and worker processes with EMBEDDER={engine}")
