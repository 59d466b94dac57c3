"""Search latency with 100,000 document chunks beside 10,000 facts (issue 34), through the real HTTP API.

Loading: the corpus of bench/knowledge_ingest.py (installed packages' long descriptions, nobody here wrote
them) is digested once through the real pipeline (chunked, screened, embedded); its chunks are then
repeated, each copy with its embedding moved by a little Gaussian noise (renormalised) and bulk-inserted
with COPY, until --chunks chunks are stored: digesting 100,000 chunks one by one takes hours on this
shared machine. The HNSW and GIN indexes on chunks are built once, after the load. Facts: --own facts of
the user searched (dana), --large facts of a second user (lee: above the exact limit of a user's own facts,
retrieval/candidates.py) and --shared org facts (synthetic sentences and clustered vectors, bench/scale.py's),
bulk-loaded the same way (every one observed at the same instant).

Then the bench's questions (bench/knowledge_retrieval.py) are asked through gunicorn for each user, with
kinds=fact and with every kind, alternately; it prints the server-side p50/p95 without the query's embedding
(the Server-Timing header) of each, and the chunk statement's own time.

    .venv/bin/python bench/knowledge_search_latency.py                      # 100,000 chunks, 20,000 facts
    .venv/bin/python bench/knowledge_search_latency.py --reuse              # skip loading
    .venv/bin/python bench/knowledge_search_latency.py --reuse --questions 10 --rounds 1   # a shorter run
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Client, Server, database_url, migrate, percentile, server_timing, setup_django  # noqa: E402

CHUNK_COLUMNS = (
    "id",
    "tenant_id",
    "source_id",
    "document_id",
    "ordinal",
    "heading_path",
    "content",
    "content_hash",
    "tokens",
    "status",
    "status_reason",
    "document_version",
    "redacted_kinds",
    "embedding",
    "fetched_at",
    "created_at",
    "updated_at",
)


def _array(vector):
    """An embedding as read (numpy array, list, or pgvector's Vector) as something numpy takes."""
    return vector.to_numpy() if hasattr(vector, "to_numpy") else vector


def load(url: str, args) -> None:
    import psycopg
    from knowledge_ingest import corpus
    from pgvector.psycopg import register_vector
    from scale import Vectors, sentence, vocabulary

    from memory_admin.knowledge.digest import digest_document
    from memory_admin.knowledge.parsing import parse
    from memory_admin.models import Fact, KnowledgeChunk, KnowledgeDocument, KnowledgeSource
    from memory_admin.selectors.access import Principal, memory_user_for
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="bench-knowledge-latency")
    principal = Principal.system(tenant.pk, actor="bench")
    dana = memory_user_for(principal, "dana", create=True)
    lee = memory_user_for(principal, "lee", create=True)
    source = KnowledgeSource.objects.create(tenant=tenant, kind="file", name="package descriptions", state="idle")
    t0 = time.time()
    if args.from_db:
        # The chunks bench/knowledge_retrieval.py digested (the same corpus, the same pipeline), read back.
        with psycopg.connect(database_url(args.from_db, fresh=False)) as other:
            register_vector(other)
            names = ("document__locator", "ordinal", "heading_path", "content", "content_hash", "tokens", "embedding")
            rows = other.execute(
                "SELECT d.locator, c.ordinal, c.heading_path, c.content, c.content_hash, c.tokens, c.embedding"
                " FROM memory_admin_knowledgechunk c JOIN memory_admin_knowledgedocument d ON d.id = c.document_id"
                " WHERE c.status = 'active' AND d.locator LIKE 'pypi:%%'"
            ).fetchall()
        real = [dict(zip(names, row, strict=True)) for row in rows]
        print(f"read {len(real)} digested chunks from {args.from_db}", flush=True)
        done = 0
    else:
        for name, kind, text in corpus(None):
            parsed = parse(text.encode(), kind)
            document = KnowledgeDocument.objects.create(source=source, tenant=tenant, locator=f"pypi:{name}")
            digest_document(principal, document, parsed.text, title=parsed.title or name)
        real = list(
            KnowledgeChunk.objects.filter(source=source, status="active").values(
                "document__locator", "ordinal", "heading_path", "content", "content_hash", "tokens", "embedding"
            )
        )
        print(f"digested {len(real)} real chunks in {time.time() - t0:.0f} s", flush=True)
        done = len(real)
    copies = -(-(args.chunks - done) // len(real))
    now = datetime.now(UTC)
    rng = np.random.default_rng(34)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET maintenance_work_mem = '512MB'")
        heavy = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_admin_knowledgechunk' "
            "AND indexname IN ('kchunk_embedding_hnsw', 'kchunk_search_gin')"
        ).fetchall()
        for name, _ in heavy:
            conn.execute(f'DROP INDEX "{name}"')
        locators = sorted({c["document__locator"] for c in real})
        t1 = time.time()
        left = args.chunks - done
        for copy_no in range(copies):
            documents = {
                loc: KnowledgeDocument.objects.create(source=source, tenant=tenant, locator=f"{loc}#{copy_no}").pk
                for loc in locators
            }
            part = real[: min(len(real), left)]
            vectors = np.stack([np.asarray(_array(c["embedding"]), dtype=np.float32) for c in part])
            if copy_no or not args.from_db:  # the first copy read from another database: as it was digested
                vectors += 0.02 * rng.standard_normal(vectors.shape).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            with conn.cursor().copy(
                f"COPY memory_admin_knowledgechunk ({', '.join(CHUNK_COLUMNS)}) FROM STDIN"
            ) as copy:
                for c, vector in zip(part, vectors, strict=True):
                    copy.write_row(
                        (
                            uuid.uuid4(),
                            tenant.pk,
                            source.pk,
                            documents[c["document__locator"]],
                            c["ordinal"],
                            c["heading_path"],
                            c["content"],
                            c["content_hash"],
                            c["tokens"],
                            "active",
                            "",
                            1,
                            [],
                            vector,
                            now,
                            now,
                            now,
                        )
                    )
            left -= len(part)
            if left <= 0:
                break
        print(f"copied {args.chunks - done:,} chunks in {time.time() - t1:.0f} s", flush=True)
        for name, definition in heavy:
            t2 = time.time()
            conn.execute(definition)
            print(f"built {name} in {time.time() - t2:.0f} s", flush=True)

        # Facts: the user's own and the org's, synthetic (bench/scale.py's sentences and clustered vectors).
        heavy = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_admin_fact' "
            "AND indexname IN ('fact_shared_embedding_hnsw', 'fact_search_vector_gin')"
        ).fetchall()
        for name, _ in heavy:
            conn.execute(f'DROP INDEX "{name}"')
        words, pyrng = vocabulary(random.Random(7)), random.Random(8)
        owners = [(dana.pk, "user")] * args.own + [(lee.pk, "user")] * args.large + [(None, "org")] * args.shared
        vectors = Vectors(seed=11).sample(len(owners))
        columns = "id, tenant_id, memory_user_id, scope, task_ref, content, content_hash, category, kind, confidence"
        columns += ", importance, source, status, status_reason, version, embedding, pinned, contested, valid_from"
        columns += ", created_at, updated_at, access_count, metadata, created_by, extractor"
        with conn.cursor().copy(f"COPY memory_admin_fact ({columns}) FROM STDIN") as copy:
            for (uid, scope), vector in zip(owners, vectors, strict=True):
                copy.write_row(
                    (uuid.uuid4(), tenant.pk, uid, scope, "", sentence(pyrng, words), uuid.uuid4().hex, "other")
                    + ("fact", 0.9, 0.5, "user_stated", "active", "", 1, vector, False, False, now, now, now, 0)
                    + ("{}", "bench", "")
                )
        for _, definition in heavy:
            conn.execute(definition)
        conn.execute("VACUUM ANALYZE memory_admin_knowledgechunk")
        conn.execute("VACUUM ANALYZE memory_admin_fact")
    print(f"facts: {Fact.objects.filter(tenant=tenant).count():,}", flush=True)
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="bench")
    Path(args.key_file).write_text(key)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--own", type=int, default=1_000)
    parser.add_argument("--shared", type=int, default=9_000)
    parser.add_argument("--large", type=int, default=10_000, help="own facts of a second user, lee")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--questions", type=int, default=0, help="ask only the first N questions (0: all 30)")
    parser.add_argument("--db", default="bench_knowledge_latency")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument(
        "--from-db", default="", help="take the digested chunks of bench/knowledge_retrieval.py's database"
    )
    parser.add_argument("--key-file", default="/tmp/bench_knowledge_latency.key")
    args = parser.parse_args()

    url = database_url(args.db, fresh=not args.reuse)
    if not args.reuse:
        migrate(url)
    setup_django(url)
    if not args.reuse:
        load(url, args)
    from knowledge_retrieval import QUESTIONS

    questions = QUESTIONS[: args.questions or None]

    from memory_admin.models import Fact, KnowledgeChunk

    print(
        f"stored: {KnowledgeChunk.objects.filter(status='active').count():,} active chunks, "
        f"{Fact.objects.count():,} facts"
    )
    key = Path(args.key_file).read_text().strip()
    users = ("dana", "lee") if args.large else ("dana",)
    times: dict[tuple[str, str], list[float]] = {(user, name): [] for user in users for name in ("fact", "all")}
    chunk_ms: list[float] = []
    with Server(url, workers=1, threads=2) as server:
        client = Client(server.port, key)
        for _, _, question in questions[:3]:  # warm: compiled statements, connection settings
            for user in users:
                for kinds in ("fact", "fact,message,chunk"):
                    client.request("GET", f"/api/v1/users/{user}/search", params={"q": question, "kinds": kinds})
        for _ in range(args.rounds):
            for _, _, question in questions:
                for user in users:
                    for name, kinds in (("fact", "fact"), ("all", "fact,message,chunk")):
                        status, body, headers = client.request(
                            "GET", f"/api/v1/users/{user}/search", params={"q": question, "k": 10, "kinds": kinds}
                        )
                        assert status == 200, body
                        timing = server_timing(headers)
                        times[user, name].append(timing["server_ms_excluding_embed"])
                        if name == "all":
                            chunk_ms.append(timing.get("chunks_ms", float("nan")))
    for (user, name), values in times.items():
        print(
            f"{user} search kinds={name:4}: server ms excluding embedding p50 {statistics.median(values):.1f}, "
            f"p95 {percentile(values, 95):.1f} ({len(values)} searches)"
        )
    print(f"  of which the chunk statement and scoring, p50 {statistics.median(chunk_ms):.1f} ms")


if __name__ == "__main__":
    main()
