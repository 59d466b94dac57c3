"""The Python client's `knowledge` methods against the real API under gunicorn: an upload (a path, bytes, an
open file; sync and async) becomes a source whose document's chunks the client reads back; crawl now, pause,
resume, delete; the kill switch; and every refusal raised as its own exception with the server's code.

No worker consumes the test database's queue, so the crawl the server sends at commit is run here, in
process, as the worker's chain of tasks would (`crawl_all`); everything else goes through the client."""

from __future__ import annotations

import asyncio

import pytest
from memory_admin_client import (
    AddressNotAllowed,
    AsyncMemoryAdmin,
    CrawlInProgress,
    FolderNotAllowed,
    Forbidden,
    IngestionDisabled,
    Invalid,
    InvalidUrl,
    KnowledgeChunkPage,
    KnowledgeSourceDetail,
    LimitTooHigh,
    MemoryAdmin,
    NotFound,
    SourcePaused,
    UnsupportedFileType,
)

from memory_admin.models import KnowledgeSource
from tests.knowledge.conftest import crawl_all

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GUIDE = b"# Runbook\n\n## Backups\n\nBackups run nightly at 02:00 UTC and are kept for thirty days.\n"


@pytest.fixture
def mem(gunicorn_server, tenant, make_key):
    with MemoryAdmin(gunicorn_server, make_key(tenant)) as client:
        yield client


@pytest.fixture
def admin(gunicorn_server, tenant, make_key):
    with MemoryAdmin(gunicorn_server, make_key(tenant, admin=True, agent="admin-agent")) as client:
        yield client


def _crawled(source_id: str) -> None:
    crawl_all(KnowledgeSource.objects.get(pk=source_id))


def test_an_uploaded_file_becomes_chunks_the_client_reads_back(mem, tmp_path):
    path = tmp_path / "runbook.md"
    path.write_bytes(GUIDE)
    source = mem.knowledge.upload(path, user_id="dana", name="Ops runbook")
    assert isinstance(source, KnowledgeSourceDetail)
    assert (source.kind, source.name, source.location, source.user_id) == ("file", "Ops runbook", "runbook.md", "dana")
    assert source.state == "running" and source.created_at is not None and source.created_at.tzinfo is not None
    with pytest.raises(CrawlInProgress) as running:  # the first crawl was sent at once
        mem.knowledge.crawl(source.id)
    assert (running.value.status, running.value.code) == (409, "crawl_in_progress")

    _crawled(source.id)
    shown = mem.knowledge.get(source.id)
    assert shown.state == "idle" and shown.documents == 1 and shown.chunks.get("active", 0) >= 1
    (document,) = shown.document_list
    assert document.locator == "runbook.md" and document.version == 1 and document.fetched_at is not None
    page = mem.knowledge.chunks(document.id)
    assert isinstance(page, KnowledgeChunkPage) and page.document.id == document.id
    assert any("nightly at 02:00 UTC" in chunk.content for chunk in page.items)
    assert all(chunk.status == "active" and chunk.tokens > 0 for chunk in page.items)
    assert mem.knowledge.chunks(document.id, status="quarantined").items == []

    # Bytes with a name, and an open file, go the same way; the list is newest first.
    from_bytes = mem.knowledge.upload(
        b"The staging cluster lives in eu-west-1.\n", filename="notes.txt", user_id="dana"
    )
    with path.open("rb") as handle:
        from_handle = mem.knowledge.upload(handle, user_id="dana")
    assert (from_bytes.location, from_handle.location) == ("notes.txt", "runbook.md")
    listed = [s.id for s in mem.knowledge.list(user_id="dana").items]
    assert listed == [from_handle.id, from_bytes.id, source.id]


def test_crawl_now_pause_resume_and_delete(mem, tmp_path):
    source = mem.knowledge.upload(GUIDE, filename="runbook.md", user_id="erin")
    _crawled(source.id)
    paused = mem.knowledge.pause(source.id)
    assert paused.status == "paused"
    with pytest.raises(SourcePaused) as refused:
        mem.knowledge.crawl(source.id)
    assert (refused.value.status, refused.value.code) == (409, "source_paused")
    resumed = mem.knowledge.resume(source.id)
    assert resumed.status == "active" and resumed.state == "running"
    _crawled(source.id)
    assert mem.knowledge.crawl(source.id).state == "running"  # crawl now: 202, the source as it is
    _crawled(source.id)

    deleted = mem.knowledge.delete(source.id)
    assert deleted.status == "deleted" and deleted.chunks_retired >= 1 and deleted.id == source.id
    assert mem.knowledge.get(source.id).status == "deleted"
    assert source.id not in {s.id for s in mem.knowledge.list(user_id="erin").items}
    assert source.id in {s.id for s in mem.knowledge.list(user_id="erin", include_deleted=True).items}
    with pytest.raises(NotFound):
        mem.knowledge.delete(source.id)


def test_every_knowledge_refusal_is_its_own_exception_with_the_servers_code(mem, admin):
    with pytest.raises(UnsupportedFileType) as exe:
        mem.knowledge.upload(b"MZ\x00\x00", filename="tool.exe", user_id="fay")
    assert (exe.value.status, exe.value.code, exe.value.field) == (422, "unsupported_file_type", "file")
    assert isinstance(exe.value, Invalid)  # a catch of Invalid still catches it
    with pytest.raises(InvalidUrl):
        mem.knowledge.add("url", "ftp://example.com/handbook", user_id="fay")
    with pytest.raises(AddressNotAllowed) as private:
        mem.knowledge.add("url", "http://10.1.2.3/wiki", user_id="fay")
    assert private.value.code == "address_not_allowed"
    with pytest.raises(LimitTooHigh) as deep:
        admin.knowledge.add("site", "https://example.com/", max_depth=8)
    assert (deep.value.field, deep.value.limit) == ("max_depth", 5)
    with pytest.raises(FolderNotAllowed):
        admin.knowledge.add("folder", "/etc")
    with pytest.raises(Invalid) as declared:  # past the declared range: refused, not clamped
        admin.knowledge.add("site", "https://example.com/", max_depth=11)
    assert declared.value.code == "invalid" and declared.value.field

    # The kill switch: an admin's; off refuses new sources until it is on again.
    assert mem.knowledge.settings().ingestion_enabled is True
    with pytest.raises(Forbidden):
        mem.knowledge.update_settings(ingestion_enabled=False)
    assert admin.knowledge.update_settings(ingestion_enabled=False).ingestion_enabled is False
    with pytest.raises(IngestionDisabled) as off:
        mem.knowledge.upload(GUIDE, filename="runbook.md", user_id="fay")
    assert (off.value.status, off.value.code) == (409, "ingestion_disabled")
    assert admin.knowledge.update_settings(ingestion_enabled=True).ingestion_enabled is True
    assert mem.knowledge.list(user_id="fay").items == []  # nothing refused was stored


def test_the_async_client_uploads_and_reads_knowledge(gunicorn_server, tenant, make_key, tmp_path):
    key = make_key(tenant)
    path = tmp_path / "runbook.md"
    path.write_bytes(GUIDE)

    async def upload():
        async with AsyncMemoryAdmin(gunicorn_server, key) as amem:
            return await amem.knowledge.upload(path, user_id="gus")

    source = asyncio.run(upload())
    assert source.kind == "file" and source.user_id == "gus"
    _crawled(source.id)

    async def read():
        async with AsyncMemoryAdmin(gunicorn_server, key) as amem:
            shown = await amem.knowledge.get(source.id)
            page = await amem.knowledge.chunks(shown.document_list[0].id)
            with pytest.raises(UnsupportedFileType):
                await amem.knowledge.upload(b"\x89PNG", filename="logo.png", user_id="gus")
            return page, await amem.knowledge.list(user_id="gus")

    page, listed = asyncio.run(read())
    assert any("thirty days" in chunk.content for chunk in page.items)
    assert [s.id for s in listed.items] == [source.id]
