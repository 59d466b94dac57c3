"""Would a batch-invariant int8 engine pay? (issue 9 §3): CPU per text alone and batched, and whether a
text's vector depends on its batch, for the shipped dynamic int8 model, a statically calibrated int8
model, and the fp32 graph they are both quantised from (the reference: the torch model's graph).

    python bench/embed_batching.py --texts 400 --batch 16

LoCoMo dev turns (the write benchmark's texts). "alone" runs each text by itself (what the product does);
"same length" batches texts of equal token count (no padding); "padded" batches consecutive texts padded
to the longest. CPU is the calling thread's (onnxruntime on one intra-op thread runs there).
Static calibration: `quantize_static` (QDQ, per-channel weights, MinMax) over 200 other turns.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speed import texts  # noqa: E402


def session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run(sess, encodings) -> np.ndarray:
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)], mask[row, : len(e.ids)] = e.ids, e.attention_mask
    return sess.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})[0]


def measure(sess, encodings, batch: int) -> dict:
    t0 = time.thread_time()
    alone = np.stack([run(sess, [e])[0] for e in encodings])
    cpu_alone = (time.thread_time() - t0) / len(encodings) * 1000
    by_length: dict[int, list[int]] = {}
    for i, e in enumerate(encodings):
        by_length.setdefault(len(e.ids), []).append(i)
    same = np.zeros_like(alone)
    t0 = time.thread_time()
    for members in by_length.values():
        for k in range(0, len(members), batch):
            part = members[k : k + batch]
            same[part] = run(sess, [encodings[i] for i in part])
    cpu_same = (time.thread_time() - t0) / len(encodings) * 1000
    padded = np.zeros_like(alone)
    t0 = time.thread_time()
    for k in range(0, len(encodings), batch):
        padded[k : k + batch] = run(sess, encodings[k : k + batch])
    cpu_padded = (time.thread_time() - t0) / len(encodings) * 1000
    return {
        "alone": alone,
        "cpu": (cpu_alone, cpu_same, cpu_padded),
        "identical": (float(np.mean(np.all(same == alone, axis=1))), float(np.mean(np.all(padded == alone, axis=1)))),
        "worst_cos": (float(np.min(np.sum(same * alone, 1))), float(np.min(np.sum(padded * alone, 1)))),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from tokenizers import Tokenizer

    from memory_admin import onnx_model

    tokenizer = Tokenizer.from_file(str(onnx_model.source_dir() / "tokenizer.json"))
    tokenizer.enable_truncation(onnx_model.MAX_TOKENS)
    tokenizer.no_padding()
    facts, _ = texts()
    sample = [tokenizer.encode(t) for t in facts[: args.texts]]
    calibration = [tokenizer.encode(t) for t in facts[args.texts : args.texts + 200]]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(calibration)

        def get_next(self):
            e = next(self.items, None)
            if e is None:
                return None
            return {"input_ids": np.array([e.ids], np.int64), "attention_mask": np.array([e.attention_mask], np.int64)}

    with tempfile.TemporaryDirectory() as tmp:
        fp32, static = Path(tmp) / "fp32.onnx", Path(tmp) / "static.onnx"
        onnx_model._write_fp32_graph(onnx_model.source_dir(), fp32)
        t0 = time.perf_counter()
        quantize_static(
            str(fp32),
            str(static),
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            # as the shipped recipe: the FFN output MatMuls (GELU outliers) stay float32
            nodes_to_exclude=[f"l{i}_ff2_mm" for i in range(onnx_model._layers(onnx_model.source_dir()))],
        )
        print(f"static calibration: {time.perf_counter() - t0:.1f} s over {len(calibration)} turns")
        models = {
            "dynamic int8 (shipped)": session(onnx_model.ensure_model()),
            "static int8 (calibrated)": session(static),
            "fp32 graph (reference)": session(fp32),
        }
        results = {name: measure(sess, sample, args.batch) for name, sess in models.items()}
    reference = results["fp32 graph (reference)"]["alone"]
    mean_tokens = sum(len(e.ids) for e in sample) / len(sample)
    print(f"{len(sample)} LoCoMo turns, {mean_tokens:.0f} tokens on average, batches of {args.batch}\n")
    head = "CPU ms/text: alone / same-length / padded"
    print(f"{'model':<26}{head:>44}{'identical to alone: same / padded':>36}{'cos to fp32: mean / min':>26}")
    for name, r in results.items():
        cos = np.sum(r["alone"] * reference, axis=1)
        cpu = " / ".join(f"{c:.2f}" for c in r["cpu"])
        same = " / ".join(f"{x:.0%}" for x in r["identical"])
        print(f"{name:<26}{cpu:>44}{same:>36}{f'{cos.mean():.4f} / {cos.min():.4f}':>26}")
        print(
            f"{'':<26}{'worst cosine batched vs alone: same / padded':>44}"
            + "".join(f"{w:>12.6f}" for w in r["worst_cos"])
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
