"""`manage.py reembed`: another engine's vectors fill a shadow column while search keeps serving the old
ones, rows written meanwhile are caught up, then one transaction swaps them in."""

from __future__ import annotations

from io import StringIO

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from memory_admin.embeddings import make_embedder
from memory_admin.management.commands.reembed import fill, swap
from memory_admin.models import Fact, NotebookChunk

pytestmark = pytest.mark.django_db


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

    facts, chunks = swap()
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
    assert swap() == (0, 0)  # a stale shadow vector is never swapped in
    assert fill(torch_engine, progress=False) == 1
    assert swap() == (1, 0)
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
