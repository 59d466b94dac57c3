"""The engines behind one interface: chosen by name, the removed `static` refused with what to do instead,
only the chosen engine's packages loaded, and one query cache keyed by the engine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from memory_admin.embedding import (
    DIM,
    Embedder,
    UnknownEngine,
    embed_query,
    get_embedder,
    make_embedder,
    query_cache,
)
from memory_admin.embedding.onnx import OnnxEmbedder
from memory_admin.embedding.openai import OpenAIEmbedder
from memory_admin.embedding.torch import TorchEmbedder


def test_each_engine_is_chosen_by_its_name(settings):
    settings.OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"
    assert type(make_embedder("onnx")) is OnnxEmbedder
    assert type(make_embedder("openai")) is OpenAIEmbedder
    assert make_embedder("openai").name == "openai:text-embedding-3-small"
    for engine in (OnnxEmbedder, OpenAIEmbedder, TorchEmbedder):
        assert issubclass(engine, Embedder) and engine.dim == DIM == 384
    assert OnnxEmbedder.runs_alone and not OpenAIEmbedder.runs_alone and not TorchEmbedder.runs_alone


def test_the_torch_engine_answers_to_its_old_name_too():
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    torch, local = make_embedder("torch"), make_embedder("local")
    assert type(torch) is type(local) is TorchEmbedder
    assert torch.embed(["tea"]) == local.embed(["tea"]) and len(torch.embed(["tea"])[0]) == 384


def test_the_removed_static_engine_is_refused_with_what_to_do_instead():
    with pytest.raises(UnknownEngine, match=r"EMBEDDER=static was removed.*reembed --engine onnx"):
        make_embedder("static")
    with pytest.raises(UnknownEngine, match="unknown EMBEDDER 'onnnx': onnx, torch or openai"):
        make_embedder("onnnx")


def test_build_embedder_refuses_the_static_engine_before_anything_starts(settings):
    """`up` and `serve prepare` run build_embedder before any process starts: a deployment still set to
    EMBEDDER=static stops there with the reason, not at its first write."""
    settings.EMBEDDER = "static"
    with pytest.raises(CommandError, match="EMBEDDER=static was removed"):
        call_command("build_embedder")
    with pytest.raises(CommandError, match="only onnx"):
        call_command("build_embedder", "--engine", "openai")


@pytest.mark.django_db
def test_serve_migrate_stops_at_the_static_engine_and_builds_a_model_for_onnx_only(settings, tmp_path, capsys):
    """`serve migrate` (like `up`) builds (or verifies) the onnx model before any process starts, builds
    nothing for an engine without a local model (openai), and stops a deployment still set to
    EMBEDDER=static with the reason."""
    settings.STATIC_ROOT = tmp_path / "static"
    settings.EMBEDDER = "openai"
    call_command("serve", "migrate")
    assert "all-MiniLM-L6-v2" not in capsys.readouterr().out
    settings.EMBEDDER = "onnx"
    call_command("serve", "migrate")
    assert "sha256" in capsys.readouterr().out  # build_embedder's line: the model built or verified
    settings.EMBEDDER = "static"
    with pytest.raises(CommandError, match="EMBEDDER=static was removed"):
        call_command("serve", "migrate")


def test_the_default_engine_never_loads_torch_or_the_openai_sdk():
    script = (
        "import django, sys; django.setup(); "
        "from memory_admin.embedding import embed_one, embed_query; "
        "assert len(embed_one('tea')) == 384 and embed_query('tea'); "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'openai') if m in sys.modules))"
    )
    env = {**os.environ, "EMBEDDER": "onnx", "DJANGO_SETTINGS_MODULE": "memory_admin.settings"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_a_repeated_query_is_embedded_once_and_served_as_a_fresh_list(settings, monkeypatch):
    settings.EMBEDDER = "onnx"
    get_embedder.cache_clear()
    query_cache.clear()
    engine, runs = get_embedder(), []
    real = engine.embed
    monkeypatch.setattr(engine, "embed", lambda texts: runs.append(list(texts)) or real(texts))
    first = embed_query("what does Dana eat?")
    first.append(1.0)  # a caller changing its list changes nothing cached
    again = embed_query("what does Dana eat?")
    assert runs == [["what does Dana eat?"]]
    assert again == real(["what does Dana eat?"])[0] and len(again) == 384
    assert query_cache.get(("local:all-MiniLM-L6-v2", "what does Dana eat?")) is None  # keyed by engine
    get_embedder.cache_clear()
