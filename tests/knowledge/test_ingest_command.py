"""`manage.py ingest`: a folder, a site and a file ingested in-process with a progress bar and a summary."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from memory_admin.models import ChunkEntity, KnowledgeChunk, KnowledgeSource

pytestmark = pytest.mark.django_db


def _run(*args) -> tuple[dict, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest", *args, stdout=out, stderr=err)
    return json.loads(out.getvalue()), err.getvalue()


def test_ingest_a_folder_with_a_progress_bar(tenant, tmp_path):
    (tmp_path / "a.md").write_text("# Alpha\n\nThe alpha service restarts at midnight.\n")
    (tmp_path / "b.txt").write_text("Beta invoices go to the finance mailbox.\n")
    summary, err = _run(tenant.slug, "--folder", str(tmp_path), "--user", "alice")
    assert summary["state"] == "idle" and summary["documents"] == 2 and summary["chunks"] == {"active": 2}
    assert "page" in err and "2/2" in err  # the tqdm bar
    source = KnowledgeSource.objects.get(pk=summary["id"])
    assert source.memory_user.external_id == "alice"

    (tmp_path / "b.txt").write_text("Beta invoices now go to the controller.\n")
    summary, _ = _run(tenant.slug, "--source", str(source.pk))
    assert summary["chunks"] == {"active": 2, "superseded": 1}


def test_ingest_a_site_and_a_file(tenant, site, tmp_path):
    site.page("/robots.txt", "", "text/plain")
    site.page("/", '<h1>Home</h1><p>Welcome.</p><a href="/faq">FAQ</a>')
    site.page("/faq", "<h1>FAQ</h1><p>Refunds take five working days.</p>")
    summary, _ = _run(tenant.slug, "--site", site.base + "/", "--no-progress")
    assert summary["pages_done"] == 2 and summary["errors"] == {}
    assert KnowledgeChunk.objects.filter(content__contains="five working days", status="active").exists()
    handbook = tmp_path / "handbook.md"
    handbook.write_text("# Handbook\n\nDesks are booked through the front office in Lisbon.\n")
    summary, _ = _run(tenant.slug, "--file", str(handbook), "--no-progress")
    assert summary["kind"] == "file" and summary["chunks"] == {"active": 1}
    assert summary["chunks_drawn"] == 1  # its entities drawn in-process, as the worker would
    assert ChunkEntity.objects.filter(chunk__source_id=summary["id"], entity__name="Lisbon").exists()


def test_ingest_refusals_name_their_code(tenant):
    with pytest.raises(CommandError, match="address_not_allowed"):
        _run(tenant.slug, "--url", "http://192.168.1.10/wiki")
    with pytest.raises(CommandError, match="No tenant"):
        _run("no-such-tenant", "--url", "https://example.com/")
