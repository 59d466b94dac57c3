"""The query's vectors (SPEC §6): the whole query's embedding, and the one the vector component compares
(a query that holds a name: mixed with its meaning without the names)."""

from __future__ import annotations

import math
import threading
import time

import numpy as np

from memory_admin.embeddings import embed_query, embed_query_topic, search_ahead_submit
from memory_admin.retrieval.names import WORD, cut_out, name_spans

# A query that holds a name ("What kind of art does Caroline make?") is compared, for the vector
# component, by the normalised mix of its embedding and that of its text without the names ("What kind of
# art does make?"), TOPIC_SHARE of the latter: the whole query's embedding is pulled towards the named
# person's every statement, whichever its topic, while the entity component and the keywords count the
# name already (bench/README.md: LoCoMo dev multi-hop R@10 0.486 -> 0.522, pooled 0.770 -> 0.789). On
# onnx the topic comes from the question's own run (`embed_query_topic`: its tokens outside the names, one
# run instead of two; bench/README.md "Search over HTTP, round 7": multi-hop 0.561 -> 0.550, pooled 0.794
# -> 0.788); the other engines embed the text without the names.
TOPIC_SHARE = 0.6


def search_vectors(query: str) -> tuple[list[float], list[float]]:
    """(the vector component's query embedding, the whole query's embedding). A query that holds a
    name is compared by TOPIC_SHARE of its meaning without the names (the entity component and the
    keywords count the names): the normalised mix of the whole query's embedding and its topic's
    (`embed_query_topic`: on onnx the same run's tokens outside the names, else the text without them)."""
    head = query[:2000]
    spans = name_spans(head)
    topic = cut_out(head, spans)
    if not spans or not WORD.search(topic):
        whole = embed_query(query)
        return whole, whole
    whole, rest = embed_query_topic(query, spans, topic)
    mixed = (1.0 - TOPIC_SHARE) * np.asarray(whole) + TOPIC_SHARE * np.asarray(rest)  # numpy: ~0.2 ms less
    return (mixed / (math.sqrt(mixed @ mixed) or 1.0)).tolist(), whole


# How long a request waits for an idle helper thread to start its query's embedding (VectorsAhead): a
# bound, not the usual wait (tens of microseconds); past it the request goes on and the helper starts
# whenever it gets the GIL.
HANDOFF_WAIT_S = 0.002


class VectorsAhead:
    """`search_vectors(text)` started on a helper thread (`search_ahead_executor`) while the request's
    API key is checked: the key statement waits for Postgres and onnxruntime lets go of the GIL, so the
    embedding and the key check overlap instead of following each other. The API starts one only for a
    key that authenticated in this process before (services.keys.key_seen), so a request without a
    valid key never costs an embedding. `take` hands the vectors to a search of the same text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._started = threading.Event()
        self.future, idle = search_ahead_submit(self._run)
        if idle:
            # Hand the GIL to the helper now. Its Python before the model (spotting names, tokenizing)
            # holds the GIL; left to itself it would start only when this thread next waits, for the key
            # statement, ~0.2-0.3 ms later, and the vectors would come that much later. This thread
            # gets the GIL back as soon as the model runs (onnxruntime lets go of it).
            self._started.wait(HANDOFF_WAIT_S)

    def _run(self) -> tuple[tuple[list[float], list[float]], float]:
        self._started.set()
        started = time.perf_counter()
        vectors = search_vectors(self.text)
        return vectors, (time.perf_counter() - started) * 1000

    def take(self, text: str) -> tuple[tuple[list[float], list[float]], float] | None:
        """(`search_vectors(text)`, the helper's ms) once the helper is done; None for another text, or
        when the helper has not started it yet (cancelled: the caller embeds it itself, at once)."""
        if text != self.text or self.future.cancel():
            return None
        return self.future.result()


def vectors_for(query: str, ahead: VectorsAhead | None) -> tuple[list[float], list[float], dict[str, float]]:
    """`search_vectors(query)`, taken from `ahead` when it embedded this text, and timings in ms: `embed_ms`,
    what this thread spent getting them (the run, or the wait for the helper's); `embed_ahead_ms`, the
    helper's run, when they came from it."""
    started = time.perf_counter()
    taken = ahead.take(query) if ahead is not None else None
    timings: dict[str, float] = {}
    if taken is None:
        vector, whole = search_vectors(query)
    else:
        (vector, whole), timings["embed_ahead_ms"] = taken
    timings["embed_ms"] = (time.perf_counter() - started) * 1000
    return vector, whole, timings
