"""What every embedding engine is: a name (stored vectors and cached queries are keyed by it), 384
dimensions (the vector columns' width), and `embed`, L2-normalised vectors for a list of texts."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

DIM = 384  # the width of every vector column (facts, notebook statements, entities)


class Embedder(ABC):
    name: str
    dim: int = DIM
    # Whether the engine embeds each text in its own run (onnx): a batch write then hands it the texts one
    # by one so the first vectors are ready while later ones are queued (`ahead.EmbedAhead`).
    runs_alone: bool = False

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector of `dim` floats per text, in order (cosine similarity is a dot product)."""
