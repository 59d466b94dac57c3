"""The query cache: a search's query and a context block's task, embedded once per process while they
repeat (agents ask a context block per turn of one task), keyed by the engine's name."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future

from memory_admin import config, metrics
from memory_admin.embedding.ahead import _pool
from memory_admin.embedding.base import Embedder
from memory_admin.embedding.engine import embed_one, get_embedder


class _QueryCache:
    """A small LRU of query embeddings: agents repeat tasks and questions (a context block per turn of
    one task), and a query costs 10-15 ms to embed here. Keyed by the embedder's name, so switching
    embedders never serves a vector of the other model. Vectors are returned as fresh lists."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, str], tuple[float, ...]] = OrderedDict()

    def get(self, key: tuple[str, str]) -> list[float] | None:
        with self._lock:
            vector = self._items.get(key)
            if vector is None:
                return None
            self._items.move_to_end(key)
            return list(vector)

    def put(self, key: tuple[str, str], vector: list[float]) -> None:
        with self._lock:
            self._items[key] = tuple(vector)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


query_cache = _QueryCache(config.get("QUERY_EMBED_CACHE"))


def embed_query(text: str) -> list[float]:
    """embed_one for search queries and context tasks, through the LRU above."""
    if query_cache.size <= 0:
        return embed_one(text)
    key = (get_embedder().name, text)
    vector = query_cache.get(key)
    if vector is None:
        vector = embed_one(text)
        query_cache.put(key, vector)
    return vector


@metrics.timed(metrics.EMBEDDING_SECONDS.labels("one"))
def _embed_pair(embedder: Embedder, text: str, spans: Sequence[tuple[int, int]]) -> tuple[list[float], list[float]]:
    return embedder.embed_pair(text, spans)


def embed_query_topic(text: str, spans: Sequence[tuple[int, int]], topic: str) -> tuple[list[float], list[float]]:
    """(`embed_query(text)`, the vector of the text's topic without the character `spans`, e.g. a search
    question without its names), through the LRU. An engine that pools a run's tokens (onnx:
    `embed_pair`) gets both from one run of the model, the second as the mean of the tokens outside the
    spans (contextual: the left-out words were in the input); any other embeds `topic`, the text with the
    spans left out, on the helper thread while the caller's thread embeds the text."""
    embedder = get_embedder()
    if not hasattr(embedder, "embed_pair"):
        aside = embed_query_aside(topic)
        whole = embed_query(text)
        return whole, aside.result()
    key = (embedder.name, text)
    topic_key = (f"{embedder.name}#topic{tuple(spans)}", text)
    whole, pooled = query_cache.get(key), query_cache.get(topic_key)
    if whole is None or pooled is None:
        whole, pooled = _embed_pair(embedder, text, spans)
        if query_cache.size > 0:
            query_cache.put(key, whole)
            query_cache.put(topic_key, pooled)
    return whole, pooled


def embed_query_aside(text: str) -> Future:
    """`embed_query` on a helper thread of its own (a second query text, e.g. the search's topic without
    its names), so that it runs while the caller embeds the first: `.result()` gives the vector."""
    return _pool("embed-aside", 1).submit(embed_query, text)  # its own thread: never queued behind a batch
