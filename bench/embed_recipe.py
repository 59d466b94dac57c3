"""The onnx engine's recipe and session options (issue 9 §1): CPU per text and distance to the float graph.

    python bench/embed_recipe.py [--texts 300] [--rounds 5]

Builds, in a temporary directory and offline, the float32 graph (the torch model's vectors: cosine 1.0000),
the previous recipe (dynamic int8, the six FFN output MatMuls float32) and the shipped one
(`onnx_model.build`: every MatMul int8 after the outlier channels of each MatMul's input are moved into its
weights), and runs each at onnxruntime's ALL (its default, what the engine ran before), BASIC, and ALL-SLN
(ALL without SkipLayerNormFusion, what the engine runs now) graph optimisation, on one intra-op thread
as the engine does. Texts: LoCoMo dev turns (the write benchmark's) and questions (the search
benchmark's), each run alone. Rounds alternate the variants; CPU is the calling
thread's (`thread_time`), the median of the rounds is printed. Quality: cosine of each vector to the float
graph's, and how far the cosine between two texts moves (all pairs of the first 200 turns), which is what
the write path's thresholds (dedup, contradiction) compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speed import texts  # noqa: E402


def session(path: Path, level: str):
    """`level`: ALL, BASIC, or ALL-SLN (ALL without SkipLayerNormFusion: what the engine runs)."""
    import onnxruntime as ort

    disabled = ["SkipLayerNormFusion"] if level.endswith("-SLN") else []
    level = level.removesuffix("-SLN")

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, f"ORT_ENABLE_{level}")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)


def run(sess, encodings) -> np.ndarray:
    return np.stack(
        [
            sess.run(
                ["sentence_embedding"],
                {"input_ids": np.array([e.ids], np.int64), "attention_mask": np.array([e.attention_mask], np.int64)},
            )[0][0]
            for e in encodings
        ]
    )


def build_models(tmp: Path) -> dict[str, Path]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from memory_admin import onnx_model

    src = onnx_model.source_dir()
    fp32, previous = tmp / "fp32.onnx", tmp / "previous.onnx"
    onnx_model._write_fp32_graph(src, fp32)
    quantize_dynamic(  # the recipe before this round: FFN output MatMuls float32, no smoothing
        str(fp32),
        str(previous),
        per_channel=True,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul", "Gather"],
        nodes_to_exclude=[f"l{i}_ff2_mm" for i in range(onnx_model._layers(src))],
    )
    shipped = onnx_model.build(tmp / "shipped")
    return {"fp32": fp32, "previous": previous, "shipped": shipped}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import logging

    logging.disable(logging.WARNING)  # the quantiser's advice on pre-processing
    from tokenizers import Tokenizer

    from memory_admin import onnx_model

    tokenizer = Tokenizer.from_file(str(onnx_model.source_dir() / "tokenizer.json"))
    tokenizer.enable_truncation(onnx_model.MAX_TOKENS)
    tokenizer.no_padding()
    facts, questions = texts()
    turns = [tokenizer.encode(t) for t in facts[: args.texts]]
    asks = [tokenizer.encode(t) for t in questions[:100]]
    with tempfile.TemporaryDirectory() as tmp:
        paths = build_models(Path(tmp))
        reference = session(paths["fp32"], "BASIC")
        ref_turns, ref_asks = run(reference, turns), run(reference, asks)
        variants = {
            f"{model} @ {level}": session(paths[model], level)
            for model in ("previous", "shipped", "fp32")
            for level in ("ALL", "BASIC", "ALL-SLN")
        }
        cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        quality = {}
        for round_ in range(args.rounds):
            for name, sess in variants.items():
                t0 = time.thread_time()
                v_turns = run(sess, turns)
                t1 = time.thread_time()
                v_asks = run(sess, asks)
                t2 = time.thread_time()
                cpu[name].append(((t1 - t0) / len(turns) * 1000, (t2 - t1) / len(asks) * 1000))
                if round_ == 0:
                    cos = np.concatenate([(v_turns * ref_turns).sum(1), (v_asks * ref_asks).sum(1)])
                    n = min(200, len(turns))
                    drift = np.abs(v_turns[:n] @ v_turns[:n].T - ref_turns[:n] @ ref_turns[:n].T)
                    quality[name] = (cos.mean(), cos.min(), drift.mean(), drift.max())
    mean_tokens = sum(len(e.ids) for e in turns) / len(turns)
    print(f"{len(turns)} LoCoMo turns ({mean_tokens:.0f} tokens on average), {len(asks)} questions", end="")
    print(f"; median of {args.rounds} rounds")
    print(
        f"{'model @ graph optimisation':<26}{'CPU ms: turn / question':>26}"
        f"{'cos to fp32: mean / min':>26}{'|Δ pair cosine|: mean / max':>30}"
    )
    for name in variants:
        turn = statistics.median(c[0] for c in cpu[name])
        ask = statistics.median(c[1] for c in cpu[name])
        mean, low, dmean, dmax = quality[name]
        print(
            f"{name:<26}{f'{turn:.2f} / {ask:.2f}':>26}{f'{mean:.4f} / {low:.4f}':>26}{f'{dmean:.4f} / {dmax:.4f}':>30}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
