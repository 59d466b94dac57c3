"""Questions answered by ingested documents (issue 34), a small version of bench/knowledge_retrieval.py: the
descriptions of a dozen installed packages (a corpus nobody here wrote) ingested, the bench's questions about
them (written before any tuning) asked through `/search` beside the user's facts, and through the context
block, which must cite the answering chunk."""

from __future__ import annotations

import pytest

from bench.knowledge_ingest import corpus
from bench.knowledge_retrieval import FACTS, QUESTIONS
from memory_admin.knowledge.digest import digest_document
from memory_admin.knowledge.parsing import parse
from memory_admin.models import KnowledgeChunk, KnowledgeDocument, KnowledgeSource
from memory_admin.selectors.access import Principal

pytestmark = pytest.mark.django_db

PACKAGES = ("fasteners", "cloudpickle", "gunicorn", "tzlocal", "certifi", "sniffio", "platformdirs", "idna")
PACKAGES += ("whitenoise", "h11", "xxhash", "distro")


def test_the_answering_chunk_is_in_the_top_five_and_the_block_cites_it(api, tenant):
    docs = {name: (kind, text) for name, kind, text in corpus(None) if name in PACKAGES}
    assert len(docs) >= 10, sorted(docs)  # the virtualenv carries them (the project's own dependencies)
    source = KnowledgeSource.objects.create(tenant=tenant, kind="file", name="package descriptions", state="idle")
    for name, (kind, text) in docs.items():
        parsed = parse(text.encode(), kind)
        document = KnowledgeDocument.objects.create(source=source, tenant=tenant, locator=f"pypi:{name}")
        digest_document(Principal.system(tenant.pk), document, parsed.text, title=parsed.title or name)
    for content in FACTS[:8]:
        assert api.post("users/dana/facts", {"content": content, "source": "user_stated"}).status_code in (200, 201)

    questions = [q for q in QUESTIONS if q[0] in docs]
    found, cited, misses = 0, 0, []
    for package, phrase, question in questions:
        r = api.get("users/dana/search", q=question, k=5)
        assert r.status_code == 200, r.content
        chunks = [h["chunk"] for h in r.json()["hits"] if h["kind"] == "chunk"]
        hit = any(c["file"] == f"pypi:{package}" and phrase.lower() in c["text"].lower() for c in chunks)
        found += hit
        answering = {
            str(pk)
            for pk in KnowledgeChunk.objects.filter(
                status="active", document__locator=f"pypi:{package}", content__icontains=phrase
            ).values_list("pk", flat=True)
        }
        block = api.get("users/dana/context", task=question, budget_tokens=2000).json()
        documents = next((s for s in block["sections"] if s["name"] == "documents"), {"included": []})
        is_cited = bool(answering & set(documents["included"])) and f"; pypi:{package};" in block["text"]
        cited += is_cited
        if not (hit and is_cited):
            misses.append((package, question, hit, is_cited))
    n = len(questions)
    # Measured on this corpus: see the report of bench/knowledge_retrieval.py (README "Trained knowledge").
    assert found / n >= 0.8, misses
    assert cited / n >= 0.8, misses
