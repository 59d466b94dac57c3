"""The configured engine (settings.EMBEDDER) and the two calls every caller makes: `embed` for a list of
texts, `embed_one` for one. Only the selected engine's module is imported, so a process on the default
engine never loads torch, and one on `openai` never loads onnxruntime."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import lru_cache

from django.conf import settings

from memory_admin import metrics
from memory_admin.embedding.base import Embedder

# Engine name -> (module, class). `local` is the torch engine's older name.
ENGINES = {
    "onnx": ("memory_admin.embedding.onnx", "OnnxEmbedder"),
    "torch": ("memory_admin.embedding.torch", "TorchEmbedder"),
    "local": ("memory_admin.embedding.torch", "TorchEmbedder"),
    "openai": ("memory_admin.embedding.openai", "OpenAIEmbedder"),
}
# Engines that run the model in this process (their model is built or loaded at start).
LOCAL_ENGINES = ("onnx", "torch", "local")

# `static` (a distilled token table) was removed: its cosines are not MiniLM's, so it needed its own tenant
# thresholds (contradiction_similarity ~0.88 instead of 0.70) that nothing set, and the onnx engine now
# meets every speed target it was offered for (bench/README.md).
_REMOVED = {
    "static": "EMBEDDER=static was removed (its similarities needed other tenant thresholds, silently); use "
    "EMBEDDER=onnx and run `manage.py reembed --engine onnx` to re-embed what a static engine stored"
}


class UnknownEngine(ValueError):
    """An EMBEDDER (or `--engine`) that names no engine."""


def engine_class(engine: str) -> type[Embedder]:
    """The class of the named engine; UnknownEngine with what to do instead for an unknown or removed one."""
    if engine in _REMOVED:
        raise UnknownEngine(_REMOVED[engine])
    if engine not in ENGINES:
        raise UnknownEngine(f"unknown EMBEDDER {engine!r}: onnx, torch or openai")
    module, name = ENGINES[engine]
    return getattr(importlib.import_module(module), name)


def make_embedder(engine: str) -> Embedder:
    """A new embedder of the named engine (`onnx`, `torch`/`local`, `openai`)."""
    return engine_class(engine)()


@lru_cache(maxsize=1)
def get_embedder() -> Embedder:
    """This process's embedder (settings.EMBEDDER), made at first use."""
    return make_embedder(settings.EMBEDDER)


@metrics.timed(metrics.EMBEDDING_SECONDS.labels("batch"))
def embed(texts: Sequence[str]) -> list[list[float]]:
    return get_embedder().embed(texts)


@metrics.timed(metrics.EMBEDDING_SECONDS.labels("one"))
def embed_one(text: str) -> list[float]:
    return get_embedder().embed([text])[0]
