"""The tokenizer and the embedder load offline from installed packages and behave like the originals."""

from __future__ import annotations

import math

from memory_admin.embedding import embed
from memory_admin.tokens import count_tokens, encoding, truncate_to_tokens


def test_cl100k_matches_tiktokens_known_ids():
    # Known cl100k_base encodings: "hello world" -> [15339, 1917]; "tiktoken is great!" -> 6 tokens.
    assert encoding().encode("hello world") == [15339, 1917]
    assert count_tokens("tiktoken is great!") == 6
    assert count_tokens("<|endoftext|>") > 1  # special tokens in memory content are plain text


def test_truncate_never_exceeds_the_limit():
    text = "memory " * 500
    assert count_tokens(truncate_to_tokens(text, 37)) <= 37


def test_embeddings_are_normalised_and_semantic():
    a, b, c = embed(["Alice prefers tea in the morning", "Alice likes tea at breakfast", "Kubernetes rollout failed"])
    assert len(a) == 384
    assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-3)
    dot = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert dot(a, b) > dot(a, c) + 0.3
