"""Embedding beside other work: a batch write's texts embedded on helper threads while the caller screens
and stores (`EmbedAhead`), a second query text beside the first (`cache.embed_query_aside`). Each kind has
this process's own pool, made after a fork, never inherited."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings

from memory_admin import config
from memory_admin.embedding.engine import embed, embed_one, get_embedder

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
            self._alone = get_embedder().runs_alone
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
