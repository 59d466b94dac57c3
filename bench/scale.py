"""Latency and throughput at scale, through the real HTTP API.

A tenant of --users memory users × --facts-per-user facts plus a shared org scope of --shared facts
(synthetic, clustered, L2-normalised 384-d vectors; bulk-loaded with binary COPY, not through the API)
in a database of the benchmark's own; indexes built; then concurrent loopback clients drive search,
context, POST facts and POST facts/batch through gunicorn. Prints client-side p50/p95/p99 and
throughput, the server-side time without query embedding (the Server-Timing header), and HNSW
recall@10 on the shared scope against exact search.

    .venv/bin/python bench/scale.py                       # 10,000 users × 100 facts + 100,000 shared
    .venv/bin/python bench/scale.py --users 500 --shared 5000 --requests 300   # a quick run
    .venv/bin/python bench/scale.py --reuse               # skip loading, reuse the last database

With --entities, the knowledge graph is added to the database (once; a rerun finds it there): 10-30
entities per user (plus a few hundred shared org entities), about two mentions per fact (1-4 picks, a
few entities of a user mentioned far more than the rest, as in real memory), a relation for about a third of the
facts that mention two entities (some of them closed), bulk-loaded with COPY. The `search_entity`
phase then asks queries that name one of the user's entities, as an agent would ("what does <name>
..."): with entity-anchored search those queries take the entity path. Use it on a COPY of the
1.1M-fact database, never on the original:

    createdb -T bench_scale bench_scale_entities     # in the cluster of MEMORY_ADMIN_DATA_DIR
    .venv/bin/python bench/scale.py --db bench_scale_entities --reuse --migrate --entities \
        --phases search,search_entity,entity_lookup --clients 1 --requests 200
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import numpy as np
from _harness import Client, Server, database_url, migrate, percentile, server_timing, setup_django

DIM = 384
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "ti",
    "vo",
    "ze",
    "ba",
    "do",
    "fi",
    "gu",
    "ha",
    "je",
    "pa",
    "qui",
    "ro",
    "su",
    "te",
    "ul",
    "va",
    "wo",
    "xe",
    "yo",
    "zu",
    "ar",
    "el",
    "in",
    "on",
]
VERBS = ["prefers", "uses", "works on", "likes", "visited", "maintains", "deployed", "reviewed", "owns", "plans"]


def vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def sentence(rng: random.Random, vocab: list[str]) -> str:
    # Zipf-like word choice: a few common words, a long tail, as in real text.
    words = [vocab[min(len(vocab) - 1, int(rng.paretovariate(1.1)) - 1 + rng.randrange(3))] for _ in range(2)]
    tail = [rng.choice(vocab) for _ in range(rng.randint(3, 8))]
    return f"{words[0].capitalize()} {rng.choice(VERBS)} {words[1]} " + " ".join(tail)


class Vectors:
    """Clustered unit vectors: real embeddings are far from uniform on the sphere, and uniform random
    vectors are the one case where no ANN index (or embedding) is meaningful."""

    def __init__(self, seed: int, clusters: int = 2000):
        self.rng = np.random.default_rng(seed)
        centroids = self.rng.standard_normal((clusters, DIM)).astype(np.float32)
        self.centroids = centroids / np.linalg.norm(centroids, axis=1, keepdims=True)

    def sample(self, n: int) -> np.ndarray:
        picks = self.centroids[self.rng.integers(0, len(self.centroids), n)]
        noisy = picks + 0.06 * self.rng.standard_normal((n, DIM)).astype(np.float32)
        return noisy / np.linalg.norm(noisy, axis=1, keepdims=True)


def load(url: str, args, vocab: list[str]) -> None:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg.types.json import Jsonb

    setup_django(url)
    from memory_admin.services.tenants import tenant_create

    tenant = tenant_create(slug="scale")
    rng = random.Random(7)
    vectors = Vectors(seed=11)
    now = datetime.now(UTC)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET maintenance_work_mem = '1GB'")
        # Secondary indexes that COPY would maintain row by row are rebuilt once at the end.
        heavy = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_admin_fact' "
            "AND indexname IN ('fact_shared_embedding_hnsw', 'fact_search_vector_gin')"
        ).fetchall()
        for name, _ in heavy:
            conn.execute(f'DROP INDEX "{name}"')
        t0 = time.time()
        with conn.cursor().copy(
            "COPY memory_admin_memoryuser (tenant_id, external_id, display_name, created_at) FROM STDIN"
        ) as copy:
            for i in range(args.users):
                copy.write_row((tenant.pk, f"user-{i}", "", now))
        user_ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM memory_admin_memoryuser WHERE tenant_id = %s ORDER BY id", [tenant.pk]
            )
        ]
        columns = (
            "id",
            "tenant_id",
            "memory_user_id",
            "scope",
            "task_ref",
            "content",
            "content_hash",
            "category",
            "kind",
            "confidence",
            "importance",
            "source",
            "status",
            "status_reason",
            "version",
            "embedding",
            "pinned",
            "contested",
            "valid_from",
            "created_at",
            "updated_at",
            "access_count",
            "metadata",
            "created_by",
            "extractor",
        )
        types = (
            "uuid",
            "int8",
            "int8",
            "varchar",
            "varchar",
            "text",
            "varchar",
            "varchar",
            "varchar",
            "float8",
            "float8",
            "varchar",
            "varchar",
            "varchar",
            "int4",
            "vector",
            "bool",
            "bool",
            "timestamptz",
            "timestamptz",
            "timestamptz",
            "int4",
            "jsonb",
            "varchar",
            "varchar",
        )
        owners = [(uid, "user") for uid in user_ids for _ in range(args.facts_per_user)]
        owners += [(None, "org")] * args.shared
        chunk = 20000
        written = 0
        for start in range(0, len(owners), chunk):
            part = owners[start : start + chunk]
            embeds = vectors.sample(len(part))
            with conn.cursor().copy(
                f"COPY memory_admin_fact ({', '.join(columns)}) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy:
                copy.set_types(types)
                for (uid, scope), vec in zip(part, embeds, strict=True):
                    age = timedelta(days=rng.uniform(0, 400))
                    content = sentence(rng, vocab)
                    copy.write_row(
                        (
                            uuid.uuid4(),
                            tenant.pk,
                            uid,
                            scope,
                            "",
                            content,
                            uuid.uuid4().hex,
                            "other",
                            "fact",
                            rng.uniform(0.7, 1.0),
                            0.5,
                            "user_stated",
                            "active",
                            "",
                            1,
                            vec,
                            False,
                            False,
                            now - age,
                            now - age,
                            now - age,
                            0,
                            Jsonb({}),
                            "bench",
                            "",
                        )
                    )
            written += len(part)
            print(f"  {written:,} facts loaded ({time.time() - t0:.0f} s)", flush=True)
        print(f"loaded {args.users:,} users, {written:,} facts in {time.time() - t0:.0f} s", flush=True)
        for name, definition in heavy:
            t1 = time.time()
            conn.execute(definition)
            print(f"built {name} in {time.time() - t1:.0f} s", flush=True)
        conn.execute("VACUUM ANALYZE memory_admin_fact")
        conn.execute("VACUUM ANALYZE memory_admin_memoryuser")


ENTITY_TYPES = ["person", "company", "project", "place", "tool", "other"]
RELATION_TYPES = ["works_at", "works_on", "uses", "manages", "lives_in", "knows", "owns", "reports_to", "part_of"]
ORG_ENTITIES = 300


def entity_names(user_index: int, vocab: list[str]) -> list[tuple[str, str]]:
    """The entities of user-<user_index> (name, type): the same on every run, so the benchmark's
    queries can name them without asking the database."""
    rng = random.Random(user_index * 7919 + 13)
    names: dict[str, str] = {}
    for _ in range(rng.randint(10, 30)):
        names.setdefault(f"{rng.choice(vocab).capitalize()} {rng.choice(vocab).capitalize()}", rng.choice(ENTITY_TYPES))
    return list(names.items())


def _copy_rows(conn, model, rows) -> int:
    """COPY rows (dicts of attnames) into the model's table; fields a row leaves out get the model's
    default, so the loader keeps working when a later migration adds a column."""
    from django.db import connection

    serial = ("AutoField", "BigAutoField")  # the table's sequence numbers these
    fields = [f for f in model._meta.concrete_fields if not (f.primary_key and f.get_internal_type() in serial)]
    defaults = {
        f.attname: None if f.null and not f.has_default() else f.get_db_prep_save(f.get_default(), connection)
        for f in fields
    }
    columns = ", ".join(f'"{f.column}"' for f in fields)
    written = 0
    with conn.cursor().copy(f'COPY "{model._meta.db_table}" ({columns}) FROM STDIN') as copy:
        for row in rows:
            copy.write_row([row[f.attname] if f.attname in row else defaults[f.attname] for f in fields])
            written += 1
    return written


def _entity_row(tenant_id: int, user_id: int | None, name: str, kind: str, now: datetime) -> dict:
    first = name.split()[0]
    return {
        "id": uuid.uuid4(),
        "tenant_id": tenant_id,
        "memory_user_id": user_id,
        "scope": "user" if user_id else "org",
        "name": name,
        "type": kind,
        "aliases": [name, first],
        "alias_keys": [name.lower(), first.lower()],
        "summary": "",
        "embedding": None,
        "first_seen": now - timedelta(days=400),
        "last_seen": now,
        "created_at": now,
    }


def add_graph(url: str, vocab: list[str]) -> None:
    """The knowledge graph of --entities (see the module docstring), unless the database has one."""
    import psycopg

    from memory_admin.models import Entity, FactEntity, MemoryUser, Relation, Tenant

    tenant = Tenant.objects.get(slug="scale")
    if Entity.objects.filter(tenant=tenant).exists():
        print(f"graph already there: {Entity.objects.filter(tenant=tenant).count():,} entities", flush=True)
        return
    rng, now, t0 = random.Random(17), datetime.now(UTC), time.time()
    users = {
        int(ext.split("-")[1]): pk
        for pk, ext in MemoryUser.objects.filter(tenant=tenant).values_list("pk", "external_id")
    }
    entities: dict[int | None, list[uuid.UUID]] = {}
    rows = []
    for index, user_id in users.items():
        mine = [_entity_row(tenant.pk, user_id, name, kind, now) for name, kind in entity_names(index, vocab)]
        entities[user_id] = [row["id"] for row in mine]
        rows += mine
    shared = [
        _entity_row(tenant.pk, None, f"{rng.choice(vocab).capitalize()} Org{i}", "company", now)
        for i in range(ORG_ENTITIES)
    ]
    entities[None] = [row["id"] for row in shared]
    with psycopg.connect(url, autocommit=True) as conn:
        n = _copy_rows(conn, Entity, rows + shared)
        print(f"  {n:,} entities ({time.time() - t0:.0f} s)", flush=True)
        facts = conn.execute(
            "SELECT id, memory_user_id, valid_from FROM memory_admin_fact WHERE tenant_id = %s "
            "ORDER BY memory_user_id, id",
            [tenant.pk],
        ).fetchall()
        mentions, relations, open_edges = [], [], set()
        for fact_id, user_id, valid_from in facts:
            pool = entities[user_id]
            if user_id is None and rng.random() < 0.5:
                continue  # half the shared facts name no entity
            # A few entities of each user are its hubs: Pareto-distributed picks, 1-4 per fact.
            named = list(
                dict.fromkeys(
                    pool[min(len(pool) - 1, int(rng.paretovariate(1.2)) - 1)] for _ in range(rng.randint(1, 4))
                )
            )
            for position, entity_id in enumerate(named):
                role = "subject" if position == 0 and len(named) > 1 else "object" if position == 1 else "mentioned"
                mentions.append({"fact_id": fact_id, "entity_id": entity_id, "role": role, "created_at": now})
            if len(named) > 1 and user_id is not None and rng.random() < 0.33:
                kind = rng.choice(RELATION_TYPES)
                closed = rng.random() < 0.15
                edge = (named[0], kind, named[1])
                if not closed and edge in open_edges:
                    continue
                open_edges.update([] if closed else [edge])
                relations.append(
                    {
                        "tenant_id": tenant.pk,
                        "memory_user_id": user_id,
                        "subject_id": named[0],
                        "object_id": named[1],
                        "type": kind,
                        "source_fact_id": fact_id,
                        "valid_from": valid_from,
                        "valid_to": valid_from + timedelta(days=rng.uniform(1, 90)) if closed else None,
                        "invalidated_by_id": None,
                        "closed_reason": "forgotten" if closed else "",
                        "created_at": now,
                    }
                )
        n = _copy_rows(conn, FactEntity, mentions)
        print(f"  {n:,} mentions ({time.time() - t0:.0f} s)", flush=True)
        n = _copy_rows(conn, Relation, relations)
        print(f"  {n:,} relations ({time.time() - t0:.0f} s)", flush=True)
        if hasattr(Relation, "stated_by"):  # each relation is stated by its source fact
            conn.execute(
                f"INSERT INTO {Relation.stated_by.through._meta.db_table} (relation_id, fact_id) "
                "SELECT id, source_fact_id FROM memory_admin_relation WHERE tenant_id = %s ON CONFLICT DO NOTHING",
                [tenant.pk],
            )
        tables = ["memory_admin_entity", "memory_admin_factentity", "memory_admin_relation"]
        if hasattr(Relation, "stated_by"):
            tables.append(Relation.stated_by.through._meta.db_table)
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")
    print(f"graph added in {time.time() - t0:.0f} s", flush=True)


def hnsw_recall(url: str, queries: int, ef_search: int) -> tuple[float, float, float]:
    """recall@10 of the shared-scope HNSW index against exact search, for perturbed stored vectors."""
    import psycopg
    from pgvector.psycopg import register_vector

    base = (
        "SELECT id FROM memory_admin_fact WHERE memory_user_id IS NULL AND status = 'active' "
        "ORDER BY embedding <=> %s LIMIT 10"
    )
    found = total = 0
    approx_ms = []
    rng = np.random.default_rng(5)
    with psycopg.connect(url) as conn:
        register_vector(conn)
        sample = [
            r[0]
            for r in conn.execute(
                "SELECT embedding FROM memory_admin_fact WHERE memory_user_id IS NULL ORDER BY random() LIMIT %s",
                [queries],
            )
        ]
        for vec in sample:
            q = vec.to_numpy() + 0.05 * rng.standard_normal(DIM).astype(np.float32)
            q /= np.linalg.norm(q)
            with conn.transaction():
                conn.execute("SET LOCAL enable_indexscan = off")
                exact = {r[0] for r in conn.execute(base, [q])}
            with conn.transaction():
                conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")
                # Small scopes plan as exact scans; measure the index itself.
                conn.execute("SET LOCAL enable_bitmapscan = off")
                conn.execute("SET LOCAL enable_seqscan = off")
                t0 = time.perf_counter()
                approx = {r[0] for r in conn.execute(base, [q])}
                approx_ms.append((time.perf_counter() - t0) * 1000)
            found += len(exact & approx)
            total += len(exact)
    return found / total, percentile(approx_ms, 50), percentile(approx_ms, 95)


def drive(name: str, port: int, key: str, clients: int, requests: int, make_request, seed: int = 0) -> dict:
    """`clients` threads share `requests` calls (a bounded loop); latency per call, client side."""
    per_client = max(1, requests // clients)

    def worker(index: int):
        rng = random.Random(seed * 1000 + index)
        client = Client(port, key)
        out = []
        for _ in range(per_client):
            method, path, body, params, ok = make_request(rng)
            t0 = time.perf_counter()
            status, payload, headers = client.request(method, path, body, params)
            elapsed = (time.perf_counter() - t0) * 1000
            assert status in ok, (status, payload)
            out.append((elapsed, server_timing(headers), payload))
        return out

    t0 = time.time()
    with ThreadPoolExecutor(clients) as pool:
        results = [r for part in pool.map(worker, range(clients)) for r in part]
    wall = time.time() - t0
    lat = [r[0] for r in results]
    server = [r[1]["server_ms_excluding_embed"] for r in results if "server_ms_excluding_embed" in r[1]]
    embed = [r[1].get("embed_ms", r[1].get("search_embed_ms", 0.0)) for r in results if r[1]]
    stats = {
        "name": name,
        "n": len(results),
        "rps": len(results) / wall,
        "p50": percentile(lat, 50),
        "p95": percentile(lat, 95),
        "p99": percentile(lat, 99),
        "results": results,
    }
    if server:
        stats.update(
            s50=percentile(server, 50),
            s95=percentile(server, 95),
            s99=percentile(server, 99),
            e50=percentile(embed, 50),
        )
    # The whole API view (key, rate count, user, handler, rendering) less the query embedding.
    view = [
        r[1]["view_ms"] - r[1].get("embed_ms", r[1].get("search_embed_ms", 0.0))
        for r in results
        if "view_ms" in r[1] and "server_ms_excluding_embed" in r[1]
    ]
    if view:
        stats.update(v50=percentile(view, 50))
    return stats


def print_stats(s: dict) -> None:
    line = (
        f"{s['name']:<8} n={s['n']:<6} {s['rps']:7.1f} req/s   client p50 {s['p50']:6.1f}  p95 {s['p95']:6.1f}"
        f"  p99 {s['p99']:6.1f} ms"
    )
    if "s50" in s:
        line += (
            f"   server excl. embedding p50 {s['s50']:5.1f}  p95 {s['s95']:5.1f}  p99 {s['s99']:5.1f} ms"
            f"   (query embedding p50 {s['e50']:.1f} ms)"
        )
    if "v50" in s:
        line += f"   whole view excl. embedding p50 {s['v50']:.1f} ms"
    print(line, flush=True)
    # The handler's own parts (Server-Timing), to tell which statement a change of the total comes from.
    parts = sorted({name for _, timing, _ in s["results"] for name in timing if name.endswith("_ms")})
    medians = [
        f"{name.removesuffix('_ms')} {percentile([t[name] for _, t, _ in s['results'] if name in t], 50):.1f}"
        for name in parts
        if name not in ("server_ms_excluding_embed", "view_ms")
    ]
    if medians:
        print(f"         parts p50 (ms): {', '.join(medians)}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10000)
    parser.add_argument("--facts-per-user", type=int, default=100)
    parser.add_argument("--shared", type=int, default=100000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=2000, help="per operation")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--recall-queries", type=int, default=200)
    parser.add_argument("--db", default="bench_scale")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--batch-size", type=int, default=50, help="facts per POST /facts/batch")
    parser.add_argument("--entities", action="store_true", help="add the knowledge graph (see above), once")
    parser.add_argument("--migrate", action="store_true", help="with --reuse: migrate the reused database first")
    parser.add_argument("--kinds", default="", help="the search phases' `kinds` (default: the API's, every kind)")
    parser.add_argument(
        "--phases",
        default="search,context,write,write_batch",
        help="comma-separated subset of search,search_entity,entity_lookup,entity_detail,entity_graph,context,"
        "write,write_batch",
    )
    args = parser.parse_args()

    vocab = vocabulary(random.Random(3))
    url = database_url(args.db, fresh=not args.reuse)
    if not args.reuse or args.migrate:
        migrate(url)
    if not args.reuse:
        load(url, args, vocab)
    setup_django(url)
    if args.entities:
        add_graph(url, vocab)
    from memory_admin.models import MemoryUser, Tenant
    from memory_admin.services.keys import api_key_create

    tenant = Tenant.objects.get(slug="scale")
    users = MemoryUser.objects.filter(tenant=tenant).count()
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="scale-bench")
    from memory_admin.retrieval.candidates import hnsw_ef_search

    ef = hnsw_ef_search(20)  # what a search with k=10 uses
    recall, a50, a95 = hnsw_recall(url, args.recall_queries, ef_search=ef)
    print(
        f"HNSW recall@10 on the shared scope vs exact (ef_search={ef}, {args.recall_queries} queries): "
        f"{recall:.3f}; index scan p50 {a50:.1f} ms, p95 {a95:.1f} ms",
        flush=True,
    )

    rng0 = random.Random(1)

    def search_request(rng):
        q = " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 5)))
        params = {"q": q, "k": 10, **({"kinds": args.kinds} if args.kinds else {})}
        return "GET", f"/api/v1/users/user-{rng.randrange(users)}/search", None, params, (200,)

    def search_entity_request(rng):
        # A question that names one of the user's entities, then a few words.
        index = rng.randrange(users)
        name, _ = rng.choice(entity_names(index, vocab))
        q = f"{name} " + " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 3)))
        return "GET", f"/api/v1/users/user-{index}/search", None, {"q": q, "k": 10}, (200,)

    def entity_lookup_request(rng):
        index = rng.randrange(users)
        name, _ = rng.choice(entity_names(index, vocab))
        return "GET", "/api/v1/entities", None, {"q": name, "user_id": f"user-{index}", "limit": 10}, (200,)

    sample_entities: list[str] = []
    if any(p.strip() in ("entity_detail", "entity_graph") for p in args.phases.split(",")):
        from memory_admin.models import Entity

        sample_entities = [
            str(pk) for pk in Entity.objects.filter(tenant=tenant).order_by("?").values_list("pk", flat=True)[:400]
        ]

    def entity_detail_request(rng):
        return "GET", f"/api/v1/entities/{rng.choice(sample_entities)}", None, None, (200,)

    def entity_graph_request(rng):
        params = {"depth": 2}
        return "GET", f"/api/v1/entities/{rng.choice(sample_entities)}/graph", None, params, (200,)

    def context_request(rng):
        task = " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 5)))
        return (
            "GET",
            f"/api/v1/users/user-{rng.randrange(users)}/context",
            None,
            {"task": task, "budget_tokens": 2000},
            (200,),
        )

    def write_request(rng):
        content = sentence(rng, vocab) + f" ({rng0.getrandbits(40):x})"
        return (
            "POST",
            f"/api/v1/users/user-{rng.randrange(users)}/facts",
            {"content": content, "source": "user_stated"},
            None,
            (200, 201),
        )

    def write_batch_request(rng):
        facts = [
            {"content": sentence(rng, vocab) + f" ({rng0.getrandbits(40):x})", "source": "user_stated"}
            for _ in range(args.batch_size)
        ]
        return ("POST", f"/api/v1/users/user-{rng.randrange(users)}/facts/batch", {"facts": facts}, None, (200,))

    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    makers = {
        "search": search_request,
        "search_entity": search_entity_request,
        "entity_lookup": entity_lookup_request,
        "entity_detail": entity_detail_request,
        "entity_graph": entity_graph_request,
        "context": context_request,
        "write": write_request,
        "write_batch": write_batch_request,
    }
    with Server(url, workers=args.workers, threads=args.threads) as server:
        # Warm-up: loads the model and tokenizer in every worker, opens connections.
        # (Other seeds than the measured phases: the server's LRU of query embeddings must not serve them.)
        drive("warmup", server.port, key, args.clients, 4 * args.clients, search_request, seed=1)
        drive("warmup", server.port, key, args.clients, 2 * args.clients, context_request, seed=2)
        print(
            f"{args.clients} concurrent clients, gunicorn {args.workers} workers × {args.threads} threads, "
            f"{users:,} users",
            flush=True,
        )
        run_seed = time.time_ns() % 1_000_000  # writes: fresh sentences on every run, not near-copies of the last
        for number, name in enumerate(phases, start=3):
            maker = makers[name]
            # A batch carries --batch-size facts: fewer requests for a comparable amount of work.
            requests = max(args.clients, args.requests // 10) if name == "write_batch" else args.requests
            # Each phase its own seeds: search and context must not ask the same (cached) queries.
            seed = run_seed if name.startswith("write") else number
            stats = drive(name, server.port, key, args.clients, requests, maker, seed=seed)
            print_stats(stats)
            if name == "write_batch":
                facts = sum(len(p["results"]) for _, _, p in stats["results"])
                outcomes = {}
                for _, _, payload in stats["results"]:
                    for r in payload["results"]:
                        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
                print(
                    f"         {facts} facts in batches of {args.batch_size}: "
                    f"{facts / stats['n'] * stats['rps']:.1f} facts/s; outcomes {outcomes}",
                    flush=True,
                )
            if name == "write":
                outcomes: dict[str, int] = {}
                for _, _, payload in stats["results"]:
                    outcomes[payload["outcome"]] = outcomes.get(payload["outcome"], 0) + 1
                print(f"         write outcomes: {outcomes}", flush=True)
            if name in ("search", "search_entity"):
                candidates = sorted(p["candidates"] for _, _, p in stats["results"])
                print(f"         candidates scored per search: median {candidates[len(candidates) // 2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
