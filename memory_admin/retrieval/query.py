"""The query's vectors (SPEC §6): the whole query's embedding, and the one the vector component compares
(a query that holds a name: mixed with its meaning without the names)."""

from __future__ import annotations

import math
import time

import numpy as np

from memory_admin.embedding import embed_query, embed_query_topic
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


def vectors_for(query: str) -> tuple[list[float], list[float], dict[str, float]]:
    """`search_vectors(query)` and the time it took in ms (`embed_ms`)."""
    started = time.perf_counter()
    vector, whole = search_vectors(query)
    return vector, whole, {"embed_ms": (time.perf_counter() - started) * 1000}
