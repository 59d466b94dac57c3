"""`EMBEDDER=openai`: the OpenAI (or a compatible) embeddings API, through the one module that talks to the
model server (extraction.llm)."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings

from extraction.llm import embed_texts
from memory_admin.embedding.base import Embedder


class OpenAIEmbedder(Embedder):
    """`OPENAI_EMBEDDING_MODEL`, asked for 384 dimensions to fit the same column."""

    def __init__(self) -> None:
        self.name = f"openai:{settings.OPENAI_EMBEDDING_MODEL}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return embed_texts(list(texts), dimensions=self.dim)
