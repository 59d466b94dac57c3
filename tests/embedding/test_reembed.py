"""`manage.py reembed`: another engine's vectors fill a shadow column while search keeps serving the old
ones, rows written meanwhile are caught up, then one transaction swaps them in."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from memory_admin.embedding import make_embedder
from memory_admin.management.commands.reembed import fill, swap
from memory_admin.models import Entity, Fact, NotebookChunk
from memory_admin.selectors.access import Principal

pytestmark = pytest.mark.django_db
PAST = datetime(2025, 1, 1, tzinfo=UTC)


def write(api, content):
    r = api.post("users/alice/facts", {"content": content, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    return r.json()["fact"]["id"]


def top_hit(api, q):
    r = api.get("users/alice/search", q=q)
    assert r.status_code == 200, r.content
    return r.json()["hits"][0]["fact"]["id"]


def vectors(model, **filters):
    return {row.pk: np.array(row.embedding) for row in model.objects.filter(**filters)}


@pytest.fixture(scope="module")
def torch_engine():
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    return make_embedder("torch")


def test_fill_keeps_search_on_the_old_vectors_then_swap_switches(api, torch_engine):
    cat = write(api, "Alice's cat is called Miso")
    write(api, "Alice prefers vim as her editor")
    write(api, "Alice works on the billing service in Go")
    notebook = api.put("users/alice/notebook", {"content": "# Alice\n- Alice lives in Lyon", "version": 0})
    assert notebook.status_code == 200
    before = vectors(Fact)
    chunks_before = vectors(NotebookChunk)

    filled = fill(torch_engine, batch=2, progress=False)
    assert filled == len(before) + len(chunks_before)
    # Mid-way: nothing a reader uses has changed, and search answers as before.
    for pk, vector in vectors(Fact).items():
        np.testing.assert_array_equal(vector, before[pk])
    assert top_hit(api, "what is her cat called?") == cat

    # A fact written during the fill (by a server still on the old engine) is caught up by the next pass.
    late = write(api, "Alice's dog is called Pixel")
    assert fill(torch_engine, progress=False) == 1

    facts, chunks, *_ = swap()
    assert (facts, chunks) == (len(before) + 1, len(chunks_before))
    rows = Fact.objects.filter(content__gt="")
    expected = torch_engine.embed([row.content for row in rows])
    for row, vector in zip(rows, expected, strict=True):
        np.testing.assert_allclose(np.array(row.embedding), vector, atol=1e-6)
        assert row.embedding_next is None and row.embedding_next_hash == ""
    # the two engines agree closely, so searches keep finding the same facts across the switch
    for pk, vector in before.items():
        assert float(np.dot(vector, np.array(Fact.objects.get(pk=pk).embedding))) > 0.95
    assert top_hit(api, "what is her cat called?") == cat
    assert top_hit(api, "what is the dog's name") == late


def test_a_fact_changed_during_the_fill_is_embedded_again_before_the_swap(api, torch_engine):
    fact_id = write(api, "Alice's cat is called Miso")
    fill(torch_engine, progress=False)
    # The content changes in place meanwhile (as a merge does): the shadow vector is now stale.
    Fact.objects.filter(pk=fact_id).update(content="Alice's cat is called Tofu", content_hash="changed")
    assert swap()[:2] == (0, 0)  # a stale shadow vector is never swapped in
    assert fill(torch_engine, progress=False) == 1
    assert swap()[:2] == (1, 0)
    np.testing.assert_allclose(
        np.array(Fact.objects.get(pk=fact_id).embedding),
        torch_engine.embed(["Alice's cat is called Tofu"])[0],
        atol=1e-6,
    )


def test_command_reembeds_with_progress_and_rejects_an_unknown_engine(api):
    write(api, "Alice's cat is called Miso")
    write(api, "Alice prefers vim as her editor")
    out, err = StringIO(), StringIO()
    call_command("reembed", engine="onnx", batch=1, stdout=out, stderr=err)
    assert "swapped 2 facts" in out.getvalue()
    assert "2/2" in err.getvalue()  # the progress bar
    onnx = make_embedder("onnx")
    for row in Fact.objects.all():
        np.testing.assert_allclose(np.array(row.embedding), onnx.embed([row.content])[0], atol=1e-6)
    with pytest.raises(CommandError, match="unknown EMBEDDER"):
        call_command("reembed", engine="word2vec", stdout=StringIO(), stderr=StringIO())


# --- entities: the same shadow column, catch-up and swap, with a vector index on Entity.embedding ----


def _entity(tenant, name, kind):
    from memory_admin.services.entity_curation import entity_embed

    entity = Entity(
        tenant=tenant, scope="org", name=name, type=kind, aliases=[name], alias_keys=[name.casefold()],
        first_seen=PAST, last_seen=PAST,
    )  # fmt: skip
    entity_embed(entity)
    entity.save()
    return entity


def _entity_hnsw_indexes() -> list[str]:
    """The HNSW indexes on Entity.embedding; one is made here if the schema has none yet (the
    migration 0019 adds a partial one over the tenant's live entities): the swap must keep it usable."""
    table = Entity._meta.db_table
    query = "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef ILIKE '%%hnsw%%(embedding%%'"
    with connection.cursor() as cursor:
        cursor.execute(query, [table])
        names = [row[0] for row in cursor.fetchall()]
        if not names:
            cursor.execute(
                f"CREATE INDEX entity_embedding_hnsw_test ON {table} USING hnsw (embedding vector_cosine_ops)"
            )
            names = ["entity_embedding_hnsw_test"]
    return names


def _nearest_by_index(vector) -> tuple[str, str]:
    """The nearest entity to `vector` with sequential scans and sorts off (so through the HNSW index), and
    the plan."""
    table = Entity._meta.db_table
    literal = "[" + ",".join(f"{x:.7f}" for x in vector) + "]"
    # The tenant's live entities: the rows migration 0019's partial index (entity_org_embedding_hnsw) holds.
    live_org = "memory_user_id IS NULL AND merged_into_id IS NULL"
    sql = f"SELECT id FROM {table} WHERE {live_org} ORDER BY embedding <=> %s::vector LIMIT 1"
    with transaction.atomic(), connection.cursor() as cursor:
        # No sequential scan and no sort: only the vector index can give the rows in distance order.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + sql, [literal])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute(sql, [literal])
        return str(cursor.fetchone()[0]), plan


def test_entities_are_reembedded_through_a_shadow_column_and_keep_their_vector_index(tenant, torch_engine):
    from memory_admin.services.entity_curation import entity_rename, entity_text

    indexes = _entity_hnsw_indexes()  # before any row: an index build waits for no deferred check
    acme, dana = _entity(tenant, "Acme Robotics", "company"), _entity(tenant, "Dana Scully", "person")
    bare = Entity.objects.create(  # made before entities had embeddings: reembed gives it one
        tenant=tenant, scope="org", name="Lisbon", type="place", aliases=["Lisbon"], alias_keys=["lisbon"],
        first_seen=PAST, last_seen=PAST,
    )  # fmt: skip
    before = vectors(Entity)

    assert fill(torch_engine, batch=2, progress=False) == 3
    for pk, vector in vectors(Entity, embedding__isnull=False).items():  # readers still see the old ones
        np.testing.assert_array_equal(vector, before[pk])
    # Renamed during the fill (by a curator, on the old engine): the next pass catches it up.
    operator = Principal(tenant_id=tenant.pk, role="operator", actor="staff:otto", actor_type="staff")
    entity_rename(principal=operator, entity_id=dana.pk, name="Dana K. Scully")
    assert fill(torch_engine, progress=False) == 1
    # Renamed again after the last pass: its shadow vector is stale and is never swapped in.
    entity_rename(principal=operator, entity_id=dana.pk, name="Dana Katherine Scully")
    assert swap()[:3] == (0, 0, 2)
    dana.refresh_from_db()
    assert dana.embedding_next is not None
    assert float(np.dot(np.array(dana.embedding), torch_engine.embed([entity_text(dana)])[0])) < 1 - 1e-6
    # Running it again finishes the job.
    assert fill(torch_engine, progress=False) == 3
    assert swap()[:3] == (0, 0, 3)

    for entity in Entity.objects.all():
        np.testing.assert_allclose(np.array(entity.embedding), torch_engine.embed([entity_text(entity)])[0], atol=1e-6)
        assert entity.embedding_next is None and entity.embedding_next_hash == ""
    assert Entity.objects.get(pk=bare.pk).embedding is not None
    # The index is still there, valid, and answers nearest-neighbour queries with the new vectors.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT bool_and(i.indisvalid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname = ANY(%s)",
            [indexes],
        )
        assert cursor.fetchone()[0] is True
    found, plan = _nearest_by_index(torch_engine.embed([entity_text(acme)])[0])
    assert found == str(acme.pk) and any(name in plan for name in indexes), plan


def test_the_entity_text_hash_in_python_and_in_sql_agree(tenant):
    from memory_admin.services.entity_curation import ENTITY_TEXT_HASH_SQL, entity_text_hash

    for name, kind in [("Acme", "company"), ("Zoë Łukasz 東京", "person"), ("O'Brien (the elder)", "other")]:
        entity = Entity.objects.create(
            tenant=tenant, scope="org", name=name, type=kind, aliases=[name], alias_keys=[name.casefold()],
            first_seen=PAST, last_seen=PAST,
        )  # fmt: skip
        assert Entity.objects.annotate(h=ENTITY_TEXT_HASH_SQL).get(pk=entity.pk).h == entity_text_hash(entity)


def test_the_command_reports_entities_with_their_progress_bar(tenant):
    _entity(tenant, "Acme Robotics", "company")
    out, err = StringIO(), StringIO()
    call_command("reembed", engine="onnx", stdout=out, stderr=err)
    assert "1 entities" in out.getvalue()
    assert "entities: 100%" in err.getvalue() and "1/1" in err.getvalue()


# --- document chunks: the same shadow column and swap, every status, the heading path in the text ----


def test_document_chunks_are_reembedded_from_their_heading_path_and_text(tenant):
    from memory_admin.knowledge.digest import embedding_text
    from memory_admin.knowledge.services import source_create
    from memory_admin.models import KnowledgeChunk
    from tests.knowledge.conftest import crawl_all

    guide = (
        b"# Guide\n\n## Backups\n\nBackups run nightly at 02:00 UTC.\n\n## Pager\n\nThe rotation changes on Mondays.\n"
    )
    source = source_create(
        Principal.system(tenant.pk), kind="file", name="guide.md", location="guide.md", upload=guide, dispatch=False
    )
    crawl_all(source)
    chunks = KnowledgeChunk.objects.filter(source=source)
    assert chunks.count() == 2
    old = [1.0] + [0.0] * (len(chunks[0].embedding) - 1)  # a vector no engine gives these texts
    chunks.update(embedding=old)
    KnowledgeChunk.objects.filter(pk=chunks.order_by("ordinal")[0].pk).update(status="superseded")

    assert fill(make_embedder("onnx"), progress=False) == 2
    for row in KnowledgeChunk.objects.all():  # readers still see the old vectors until the swap
        np.testing.assert_array_equal(np.array(row.embedding), old)
        assert row.embedding_next is not None
    out = StringIO()
    call_command("reembed", engine="onnx", stdout=out, stderr=StringIO())
    assert "and 2 document chunks" in out.getvalue()
    onnx = make_embedder("onnx")
    for row in KnowledgeChunk.objects.all():
        expected = onnx.embed([embedding_text(row.heading_path, row.content)])[0]
        np.testing.assert_allclose(np.array(row.embedding), expected, atol=1e-6)
        assert row.embedding_next is None
    assert swap().document_chunks == 0  # nothing left in the shadow column
