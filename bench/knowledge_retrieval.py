"""Retrieval of trained knowledge (issue 34): questions whose answers are in ingested documents, asked
through `/search` (real HTTP, gunicorn) beside a user's facts, and through the context block.

The corpus is one nobody here wrote: the long descriptions (READMEs) the installed packages carry in their
metadata, as bench/knowledge_ingest.py reads them. The questions were written BEFORE any retrieval was run
or tuned, by reading those descriptions: each names the package whose description answers it and a phrase
the answering chunk contains (the expected chunk: a chunk of that document holding the phrase). They are
paraphrases, not copies: most share few words with the answer.

    .venv/bin/python bench/knowledge_retrieval.py              # every description (~180 documents)
    .venv/bin/python bench/knowledge_retrieval.py --limit 60   # the 60 longest, plus the questions' own

Prints recall@5 of the expected chunk among `/search`'s hits (all kinds, beside FACTS facts of the user),
recall@5 with kinds=chunk, and the citing rate: the share of questions whose context block (2,000 tokens,
task = the question) includes the expected chunk in its documents section, with its citation line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Client, Server, database_url, migrate, setup_django  # noqa: E402

# (package, phrase the answering chunk holds, question), written from the descriptions before any run.
QUESTIONS = [
    ("fasteners", "InterProcessLock", "How can I get a lock that works across processes rather than threads?"),
    ("fasteners", "InterProcessReaderWriterLock", "Is there a reader-writer lock that several processes can share?"),
    ("zstandard", "indygreg/python-zstandard", "Where is the canonical home of the Python bindings for Zstandard?"),
    ("cloudpickle", "long-term object storage", "Can I use cloudpickle to keep objects on disk for years?"),
    ("cloudpickle", "lambda", "How do I serialize a lambda so that another Python process can run it?"),
    ("nh3", "20 times faster", "How much faster is nh3 than bleach at sanitizing HTML?"),
    ("gunicorn", "pre-fork", "Which WSGI server uses a pre-fork worker model taken from Ruby's Unicorn?"),
    ("gunicorn", "HTTP/2", "Can gunicorn serve HTTP/2 or ASGI apps like FastAPI?"),
    ("python-dateutil", "relative deltas", "How do I compute dates like next month or the last week of a month?"),
    ("sqlparse", "End of Maintenance", "Is sqlparse still maintained, and which was its last release?"),
    ("uvicorn", "uvloop", "What do the optional extras of uvicorn install, such as a faster event loop?"),
    ("tiktoken", "3-6x faster", "How fast is OpenAI's BPE tokeniser compared to other open source ones?"),
    ("certifi", "does not support any addition/removal", "Can I add my own certificate authority to certifi?"),
    ("threadpoolctl", "limit the number of threads", "How do I cap how many threads BLAS and OpenMP use?"),
    ("tzlocal", "get_localzone_name", "How do I get just the name of the local time zone, not a tz object?"),
    ("wcwidth", "incorrectly", "Why does str.ljust misalign text with wide characters in a terminal?"),
    ("sniffio", "detect which", "How can a library find out whether it runs under trio or asyncio?"),
    ("sortedcontainers", "fast as C-extensions", "Is there a pure-Python sorted list that is as fast as C code?"),
    ("platformdirs", "user_cache_dir", "Where should my app keep its cache and config files on each OS?"),
    ("python-dotenv", "key-value pairs", "How do I load settings from a .env file into environment variables?"),
    ("pypdf", "AES", "What extra dependencies does pypdf need to encrypt or decrypt with AES?"),
    ("idna", "2003 specification", "Why use the idna package rather than the standard library's encodings.idna?"),
    ("whitenoise", "serve its", "How can a Python web app serve its own static files without nginx or S3?"),
    ("websockets", "asyncio", "What is the websockets library built on, and does it have a threading version?"),
    ("pyjwt", "jwt.encode", "How do I encode a JSON Web Token signed with HS256 in Python?"),
    ("orjson", "CPython 3.10", "Which CPython versions does orjson support?"),
    ("h11", "bring-your-own-I/O", "Which HTTP/1.1 library has no networking code of its own?"),
    ("xxhash", "XXHASH_LINK_SO", "How do I make python-xxhash link the system xxHash library instead of its own?"),
    ("distro", "recommended replacement", "What replaces platform.linux_distribution, removed in Python 3.8?"),
    ("pgvector", "Reciprocal Rank Fusion", "Is there an example of hybrid search with rank fusion for pgvector?"),
]
# Facts of the user the questions are asked for (searched beside the chunks): ordinary memory, some of it
# about the same tools.
FACTS = [
    "Dana deploys the API with gunicorn behind nginx",
    "Dana prefers orjson over the standard json module",
    "Dana's team stores embeddings in Postgres with pgvector",
    "Dana lives in Lyon and cycles to work",
    "Dana is learning the violin",
    "Dana's laptop runs Debian",
    "Dana uses neovim as her editor",
    "Dana reviews pull requests every morning",
    "Dana's cat is called Pixel",
    "Dana is allergic to peanuts",
    "Dana plans a trip to Lisbon in May",
    "Dana wrote the billing service in 2023",
    "Dana reads about distributed systems",
    "Dana's on-call week starts on Mondays",
    "Dana likes her coffee black",
    "Dana uses celery for background jobs",
    "Dana's favourite database is Postgres",
    "Dana keeps her dotfiles on GitHub",
    "Dana runs the tests with pytest",
    "Dana mentors two junior engineers",
]
K = 5


def expected(chunks: list[dict], package: str, phrase: str) -> bool:
    return any(c["locator"] == f"pypi:{package}" and phrase.lower() in c["text"].lower() for c in chunks)


def ingest(corpus, tenant, principal) -> None:
    from memory_admin.knowledge.digest import digest_document
    from memory_admin.knowledge.parsing import parse
    from memory_admin.models import KnowledgeDocument, KnowledgeSource

    source = KnowledgeSource.objects.create(tenant=tenant, kind="file", name="package descriptions", state="idle")
    started = time.perf_counter()
    for name, kind, text in corpus:
        parsed = parse(text.encode(), kind)
        document = KnowledgeDocument.objects.create(
            source=source, tenant=tenant, locator=f"pypi:{name}", title=parsed.title
        )
        digest_document(principal, document, parsed.text, title=parsed.title or name)
    print(f"ingested {len(corpus)} descriptions in {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--db", default="bench_knowledge_retrieval")
    parser.add_argument("--reuse", action="store_true", help="ask again on the last run's database (no ingest)")
    args = parser.parse_args()

    url = database_url(args.db, fresh=not args.reuse)
    if not args.reuse:
        migrate(url)
    setup_django(url)
    from knowledge_ingest import corpus as read_corpus

    from memory_admin.models import KnowledgeChunk
    from memory_admin.selectors.access import Principal, memory_user_for
    from memory_admin.services.facts import fact_write
    from memory_admin.services.keys import api_key_create
    from memory_admin.services.tenants import tenant_create

    everything = read_corpus(None)
    wanted = {package for package, _, _ in QUESTIONS}
    chosen = everything[: args.limit] if args.limit else everything
    chosen += [doc for doc in everything if doc[0] in wanted and doc not in chosen]
    missing = wanted - {name for name, _, _ in chosen}
    if missing:
        print(f"not installed here, their questions are skipped: {sorted(missing)}")
    if args.reuse:
        from memory_admin.models import Tenant

        tenant = Tenant.objects.get(slug="bench-knowledge-retrieval")
    else:
        tenant = tenant_create(slug="bench-knowledge-retrieval")
        principal = Principal.system(tenant.pk, actor="bench")
        ingest(chosen, tenant, principal)
        dana = memory_user_for(principal, "dana", create=True)
        for content in FACTS:
            fact_write(principal=principal, memory_user=dana, content=content, source="user_stated")
    print(
        f"chunks: {KnowledgeChunk.objects.filter(tenant=tenant, status='active').count()} active; facts: {len(FACTS)}"
    )
    _, key = api_key_create(tenant_id=tenant.pk, agent_name="bench")

    questions = [q for q in QUESTIONS if q[0] not in missing]
    found_all = found_chunks = cited = 0
    ranks, server_ms = [], []
    with Server(url, workers=1, threads=2) as server:
        client = Client(server.port, key)
        for package, phrase, question in questions:
            params = {"q": question, "k": K}
            status, body, headers = client.request("GET", "/api/v1/users/dana/search", params=params)
            assert status == 200, body
            hits = body["hits"]
            chunk_hits = [
                {"locator": h["chunk"]["file"], "text": h["chunk"]["text"]} for h in hits if h["kind"] == "chunk"
            ]
            hit = expected(chunk_hits, package, phrase)
            found_all += hit
            positions = [
                i for i, h in enumerate(hits) if h["kind"] == "chunk" and phrase.lower() in h["chunk"]["text"].lower()
            ]
            ranks.append(positions[0] + 1 if positions else None)
            timing = dict(
                part.split(";dur=") for part in headers.get("Server-Timing", "").split(", ") if ";dur=" in part
            )
            server_ms.append(float(timing.get("server_ms_excluding_embed", "nan")))

            status, body, _ = client.request("GET", "/api/v1/users/dana/search", params={**params, "kinds": "chunk"})
            only = [{"locator": h["chunk"]["file"], "text": h["chunk"]["text"]} for h in body["hits"]]
            found_chunks += expected(only, package, phrase)

            status, block, _ = client.request(
                "GET", "/api/v1/users/dana/context", params={"task": question, "budget_tokens": 2000}
            )
            assert status == 200, block
            documents = next((s for s in block["sections"] if s["name"] == "documents"), None)
            wanted_ids = {
                str(pk)
                for pk in KnowledgeChunk.objects.filter(
                    tenant=tenant, status="active", document__locator=f"pypi:{package}", content__icontains=phrase
                ).values_list("pk", flat=True)
            }
            is_cited = bool(documents) and any(cid in documents["included"] for cid in wanted_ids)
            is_cited = is_cited and f"; pypi:{package};" in block["text"]
            cited += is_cited
            mark = "ok " if hit else "MISS"
            print(f"  {mark} rank {ranks[-1] or '-':>2} cited {'yes' if is_cited else 'no ':3}  {package}: {question}")
    n = len(questions)
    print(f"recall@{K} through /search (facts beside): {found_all / n:.3f} ({found_all} of {n})")
    print(f"recall@{K} with kinds=chunk: {found_chunks / n:.3f} ({found_chunks} of {n})")
    print(f"context block cites the expected chunk: {cited / n:.3f} ({cited} of {n})")
    print(f"search server ms excluding embedding, median: {statistics.median(server_ms):.1f}")


if __name__ == "__main__":
    main()
