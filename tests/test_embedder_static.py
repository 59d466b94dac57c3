"""The static engine (EMBEDDER=static): distilled offline from the wheel, checked by hash, and measured
against the ONNX engine's vectors on a fixed set of sentences."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from memory_admin import static_model
from memory_admin.embeddings import OnnxEmbedder, StaticEmbedder, make_embedder
from tests.offline_build import build_offline
from tests.test_embedder_onnx import SENTENCES


@pytest.fixture(scope="session")
def static_offline(tmp_path_factory) -> Path:
    """Distil the table once for the session in a subprocess that cannot reach any network."""
    directory = tmp_path_factory.mktemp("static-embedder")
    build_offline("static_model", "ensure_table", directory, timeout=600)
    return directory


@pytest.fixture(scope="session")
def static_engine(static_offline) -> StaticEmbedder:
    return StaticEmbedder(table_path=static_offline / static_model.TABLE_FILE)


@pytest.fixture(scope="session")
def vectors(static_engine) -> tuple[np.ndarray, np.ndarray]:
    return np.array(OnnxEmbedder().embed(SENTENCES)), np.array(static_engine.embed(SENTENCES))


def test_build_is_offline_and_recorded_by_hash(static_offline):
    manifest = json.loads((static_offline / static_model.MANIFEST_FILE).read_text())
    table = static_offline / static_model.TABLE_FILE
    assert manifest["sha256"] == static_model.onnx_model.sha256_file(table)
    assert manifest["recipe"] == static_model.RECIPE
    assert manifest["shape"] == [30522, 384]  # every vocabulary token, MiniLM's 384 dimensions
    assert static_model.verified_table(static_offline) == table


def test_static_vectors_against_the_onnx_engine(vectors):
    """Figures on this fixed set (25 sentences; measured: cosine to the ONNX vector 0.65 mean, 0.40 min;
    each sentence's nearest other the same under both engines for 0.72 of them, top-5 overlap 0.50): the
    static vectors live in MiniLM's space but are a weaker model of it. The bounds are the measured
    figures less a margin, so a broken table (random rows, rows out of order, a lost weighting) fails."""
    onnx_vectors, static_vectors = vectors
    assert static_vectors.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(static_vectors, axis=1), 1.0, rtol=1e-5)
    cosines = (onnx_vectors * static_vectors).sum(axis=1)
    assert cosines.mean() >= 0.58, cosines
    assert cosines.min() >= 0.3, cosines

    def neighbours(v: np.ndarray, k: int) -> list[set[int]]:
        sims = v @ v.T
        np.fill_diagonal(sims, -np.inf)
        return [set(np.argsort(-row)[:k]) for row in sims]

    top1 = np.mean([a == b for a, b in zip(neighbours(onnx_vectors, 1), neighbours(static_vectors, 1), strict=True)])
    top5 = np.mean(
        [len(a & b) / 5 for a, b in zip(neighbours(onnx_vectors, 5), neighbours(static_vectors, 5), strict=True)]
    )
    assert top1 >= 0.64, top1
    assert top5 >= 0.42, top5
    # the pairs a reader would call paraphrases are each other's nearest neighbour under static too
    sims = static_vectors @ static_vectors.T
    for a, b in ((0, 1), (17, 18), (12, 13)):
        others = [sims[a, j] for j in range(len(SENTENCES)) if j not in (a, b)]
        assert sims[a, b] > max(others), (SENTENCES[a], SENTENCES[b])


def test_distinct_sentences_stay_below_the_write_paths_thresholds(vectors):
    """The common direction is removed, so different statements are not near-duplicates (the tenant's
    default dedup threshold 0.95; before the removal "Bob lives in Berlin" / "... in Paris" scored 0.92
    and LoCoMo's distinct turns a median 0.93) and unrelated ones are far apart (median 0.19 here)."""
    _, static_vectors = vectors
    sims = static_vectors @ static_vectors.T
    pairs = sims[np.triu_indices(len(SENTENCES), 1)]
    assert pairs.max() < 0.95, pairs.max()
    assert np.median(pairs) < 0.3, np.median(pairs)


def test_same_text_same_vector_and_empty_text_gets_a_unit_vector(static_engine):
    alone = static_engine.embed(["Dana cannot eat nuts"])[0]
    assert static_engine.embed(["x", "Dana cannot eat nuts", SENTENCES[-1]])[1] == alone
    for blank in ("", "   ", "\u200b"):
        vector = np.array(static_engine.embed([blank])[0])
        assert vector.shape == (384,) and abs(np.linalg.norm(vector) - 1) < 1e-5


def test_engine_is_offered_by_name(static_offline, monkeypatch):
    monkeypatch.setenv("EMBEDDER_CACHE_DIR", str(static_offline))
    engine = make_embedder("static")
    assert engine.name.startswith("static:") and len(engine.embed(["tea"])[0]) == 384


def test_corrupt_or_stale_table_is_detected_and_rebuilt(static_offline, static_engine, tmp_path):
    directory = tmp_path / "embedder"
    shutil.copytree(static_offline, directory)
    table = directory / static_model.TABLE_FILE
    damaged = bytearray(table.read_bytes())
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = b"\x00" * 64  # same size, zeroed rows
    table.write_bytes(bytes(damaged))
    assert static_model.verified_table(directory) is None
    assert static_model.ensure_table(directory) == table
    assert static_model.verified_table(directory) == table
    rebuilt = StaticEmbedder(table_path=table)
    np.testing.assert_allclose(rebuilt.embed(SENTENCES[:5]), static_engine.embed(SENTENCES[:5]), atol=1e-5)

    manifest = directory / static_model.MANIFEST_FILE
    manifest.write_text(manifest.read_text().replace(static_model.RECIPE, "an older recipe"))
    assert static_model.verified_table(directory) is None  # another recipe's table is not used
