"""Trained knowledge on a real corpus nobody here wrote: the long descriptions (READMEs) that the packages
installed in the project's virtualenv carry in their metadata (`importlib.metadata`'s `Description`).

    .venv/bin/python bench/knowledge_ingest.py                 # all of them
    .venv/bin/python bench/knowledge_ingest.py --limit 100     # the 100 longest
    .venv/bin/python bench/knowledge_ingest.py --quarantined   # also list the chunks the guard held

Prints:
- chunks per second ingested end to end (parse, chunk, secret/PII scan, guard, embed in batches, insert)
  into a database of its own on the embedded Postgres, and where the time went;
- the guard's quarantine rate on that ordinary prose (goal: under 1 %);
- the share of chunks holding a planted secret (seven kinds, planted in real chunks) that were blocked or
  redacted: a planted chunk counts as caught when no stored chunk holds the secret.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import database_url, migrate, setup_django  # noqa: E402


def corpus(limit: int | None) -> list[tuple[str, str, str]]:
    """(package, kind, text) of every installed distribution with a long description, longest first."""
    seen, out = set(), []
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        if not name or name in seen or name.startswith("memory-admin"):
            continue  # this project's own README and client: written here
        seen.add(name)
        text = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        if len(text) < 500:
            continue
        content_type = (dist.metadata.get("Description-Content-Type") or "").lower()
        kind = "markdown" if "markdown" in content_type else "text"
        out.append((name, kind, text))
    out.sort(key=lambda item: -len(item[2]))
    return out[:limit] if limit else out


def _luhn_card(rng: random.Random) -> str:
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    total = 0
    for i, d in enumerate(reversed(digits)):
        d = d * 2 if i % 2 == 0 else d
        total += d - 9 if d > 9 else d
    return "".join(map(str, digits)) + str((10 - total % 10) % 10)


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def planted_secret(rng: random.Random, kind: str) -> str:
    if kind == "openai":
        return "sk-proj-" + _rand(rng, ALNUM, 40)
    if kind == "github":
        return "ghp_" + _rand(rng, ALNUM, 36)
    if kind == "aws":
        return "AKIA" + _rand(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    if kind == "slack":
        return "xoxb-" + _rand(rng, "0123456789", 12) + "-" + _rand(rng, "0123456789", 12) + "-" + _rand(rng, ALNUM, 24)
    if kind == "jwt":
        return "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ" + _rand(rng, ALNUM, 20) + "." + _rand(rng, ALNUM + "_-", 43)
    if kind == "private_key":
        return "-----BEGIN RSA PRIVATE KEY-----\n" + _rand(rng, ALNUM + "+/", 64) + "\n-----END RSA PRIVATE KEY-----"
    return _luhn_card(rng)


SECRET_KINDS = ("openai", "github", "aws", "slack", "jwt", "private_key", "card")
SENTENCES = {
    "openai": "For the examples, set OPENAI_API_KEY={} in your shell.",
    "github": "The CI job authenticates with the token {} to push tags.",
    "aws": "Our deploy user has the access key id {} in the prod account.",
    "slack": "Notifications post with the bot token {} to #releases.",
    "jwt": "A sample session header is Authorization: Bearer {}.",
    "private_key": "The signing key used by the test fixture:\n\n{}\n",
    "card": "The billing test used the card {} last month.",
}


def plant(text: str, secret_kind: str, secret: str, rng: random.Random) -> str:
    sentence = SENTENCES[secret_kind].format(secret)
    cuts = [m.end() for m in re.finditer(r"[.!?]\s", text)] or [len(text)]
    at = rng.choice(cuts)
    return text[:at] + sentence + " " + text[at:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--planted", type=int, default=350, help="chunks that get a planted secret")
    parser.add_argument("--db", default="bench_knowledge")
    parser.add_argument("--quarantined", action="store_true")
    args = parser.parse_args()

    url = database_url(args.db, fresh=True)
    migrate(url)
    setup_django(url)

    from django.conf import settings
    from django.db import connection

    from memory_admin.knowledge import digest as digest_module
    from memory_admin.knowledge.chunking import chunk_text
    from memory_admin.knowledge.parsing import parse
    from memory_admin.models import KnowledgeChunk, KnowledgeDocument, KnowledgeSource, PiiBlock
    from memory_admin.selectors.access import Principal
    from memory_admin.services.tenants import tenant_create

    docs = corpus(args.limit)
    total_bytes = sum(len(text.encode()) for _, _, text in docs)
    print(f"corpus: {len(docs)} package descriptions, {total_bytes / 1e6:.2f} MB (installed distributions)")

    tenant = tenant_create(slug="bench-knowledge")
    principal = Principal.system(tenant.pk, actor="bench")
    source = KnowledgeSource.objects.create(tenant=tenant, kind="file", name="package descriptions", state="idle")

    # Where the time goes: each stage timed around the real functions the digest calls.
    spent = {"screen": 0.0, "embed": 0.0}
    screen, embed = digest_module.screen_chunk, digest_module.embed_batched

    def timed_screen(*a, **k):
        t = time.perf_counter()
        try:
            return screen(*a, **k)
        finally:
            spent["screen"] += time.perf_counter() - t

    def timed_embed(*a, **k):
        t = time.perf_counter()
        try:
            return embed(*a, **k)
        finally:
            spent["embed"] += time.perf_counter() - t

    digest_module.screen_chunk, digest_module.embed_batched = timed_screen, timed_embed
    digest_module.embed_batched(["warm the embedder"])
    spent["embed"] = 0.0

    per_doc: list[float] = []
    chunk_seconds = 0.0
    started, cpu_started = time.perf_counter(), time.process_time()
    for name, kind, text in docs:
        t0 = time.perf_counter()
        parsed = parse(text.encode(), kind)
        document = KnowledgeDocument.objects.create(
            source=source, tenant=tenant, locator=f"pypi:{name}", title=parsed.title
        )
        t1 = time.perf_counter()
        chunk_text(parsed.text)  # timed apart: the digest chunks again inside
        chunk_seconds += time.perf_counter() - t1
        digest_module.digest_document(principal, document, parsed.text, title=parsed.title or name)
        per_doc.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started - chunk_seconds
    cpu = time.process_time() - cpu_started - chunk_seconds  # this process only (Postgres apart)

    stored = KnowledgeChunk.objects.filter(source=source)
    n_active = stored.filter(status="active").count()
    n_quarantined = stored.filter(status="quarantined").count()
    n_blocked = sum(KnowledgeDocument.objects.filter(source=source).values_list("chunks_blocked", flat=True))
    n_total = n_active + n_quarantined + n_blocked
    print(f"chunks: {n_total} ({n_active} active, {n_quarantined} quarantined, {n_blocked} blocked by the scan)")
    median_ms = statistics.median(per_doc) * 1000
    print(f"ingest: {n_total / elapsed:.1f} chunks/s end to end, wall ({elapsed:.1f} s; {median_ms:.0f} ms a document)")
    print(f"        {n_total / cpu:.1f} chunks/s of this process's CPU time ({cpu:.1f} s; the machine is shared)")
    other = elapsed - spent["screen"] - spent["embed"]
    print(
        f"  time: screening {spent['screen']:.1f} s, embedding {spent['embed']:.1f} s ({settings.EMBEDDER}), "
        f"parse+insert+rest {other:.1f} s; chunking (timed apart) {chunk_seconds:.1f} s"
    )
    kinds = Counter(k for row in PiiBlock.objects.filter(tenant=tenant).values_list("kinds", flat=True) for k in row)
    print(f"  scan findings in the corpus by kind: {dict(kinds)} (tenant policy: {tenant.settings.pii_policy})")
    rate = n_quarantined / max(1, n_quarantined + n_active)
    held = f"{n_quarantined} of {n_quarantined + n_active}"
    print(f"guard: quarantine rate on ordinary prose {rate * 100:.2f} % ({held}; goal under 1 %)")
    if args.quarantined:
        for chunk in stored.filter(status="quarantined").select_related("document")[:50]:
            print(f"  - {chunk.document.locator} {' > '.join(chunk.heading_path)}: {chunk.status_reason}")
            print("    " + chunk.content[:200].replace("\n", " "))

    # Planted secrets: real chunks of the corpus, each with one secret sentence, digested as documents.
    rng = random.Random(34)
    sample = list(stored.filter(status="active").values_list("content", flat=True))
    rng.shuffle(sample)
    planted_source = KnowledgeSource.objects.create(tenant=tenant, kind="file", name="planted", state="idle")
    secrets: list[tuple[str, str]] = []
    for i, text in enumerate(sample[: args.planted]):
        kind = SECRET_KINDS[i % len(SECRET_KINDS)]
        secret = planted_secret(rng, kind)
        document = KnowledgeDocument.objects.create(source=planted_source, tenant=tenant, locator=f"planted:{i}")
        digest_module.digest_document(principal, document, plant(text, kind, secret, rng))
        secrets.append((kind, secret))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT string_agg(content, E'\\n') FROM memory_admin_knowledgechunk WHERE source_id = %s",
            [planted_source.pk],
        )
        everything = cursor.fetchone()[0] or ""
    leaked = [(kind, s) for kind, s in secrets if s in everything or s.replace("\n", " ") in everything]
    caught = len(secrets) - len(leaked)
    share = caught / max(1, len(secrets)) * 100
    print(f"secrets: {caught} of {len(secrets)} planted chunks blocked or redacted ({share:.1f} %)")
    by_kind: dict[str, int] = {}
    for kind, _ in leaked:
        by_kind[kind] = by_kind.get(kind, 0) + 1
    if by_kind:
        print(f"  leaked by kind: {by_kind}")


if __name__ == "__main__":
    main()
