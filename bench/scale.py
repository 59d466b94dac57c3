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
    parser.add_argument(
        "--phases",
        default="search,context,write,write_batch",
        help="comma-separated subset of search,context,write,write_batch",
    )
    args = parser.parse_args()

    vocab = vocabulary(random.Random(3))
    url = database_url(args.db, fresh=not args.reuse)
    if not args.reuse:
        migrate(url)
        load(url, args, vocab)
    setup_django(url)
    from memory_admin.models import MemoryUser, Tenant
    from memory_admin.services.keys import api_key_create

    tenant = Tenant.objects.get(slug="scale")
    users = MemoryUser.objects.filter(tenant=tenant).count()
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="scale-bench")
    from memory_admin.selectors.search import hnsw_ef_search

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
        return "GET", f"/api/v1/users/user-{rng.randrange(users)}/search", None, {"q": q, "k": 10}, (200,)

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
            if name == "search":
                candidates = sorted(p["candidates"] for _, _, p in stats["results"])
                print(f"         candidates scored per search: median {candidates[len(candidates) // 2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
