"""Cross-checks a weight-quantized rulka export against its f32 export.

usage: check_quantized.py FP32.onnx QUANT.onnx int8|int4 BLOCK

1. Re-quantizes every layer the quantized model lists (metadata
   `rulka.quantized_layers`) from the f32 model's weight with NumPy, as
   documented (int8: symmetric per output row, max|w|/127, codes stored [K, N];
   int4: blocks of BLOCK along K, max|w|/7, codes + 8, low nibble first), and
   compares codes and scales with the file's.
2. Runs, in Python onnxruntime, the quantized model and the f32 model with the
   NumPy-dequantized weights substituted, on random inputs: the two differ only
   by the runtime's activation rounding (relative error < 5 %), while the same
   codes read in another layout (nibbles swapped, or int8 codes transposed)
   differ by far more: the layout the runtime reads is the one written.
3. onnx.checker (full check) passes.
Exit 0 on success.
"""
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

fp32_path, q_path, fmt, block = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fp32 = onnx.load(fp32_path)
quant = onnx.load(q_path)
onnx.checker.check_model(quant, full_check=True)
meta = {p.key: p.value for p in quant.metadata_props}
assert meta["rulka.weights"] == fmt, meta
layers = [x for x in meta["rulka.quantized_layers"].split(",") if x]
assert layers, "no layer was quantized"
w32 = {i.name: numpy_helper.to_array(i) for i in fp32.graph.initializer}
wq = {i.name: numpy_helper.to_array(i) for i in quant.graph.initializer}


def requant_int8(w):
    s = np.abs(w).max(1) / 127.0
    s = np.where(s > 0, s, 1.0).astype(np.float32)
    q = np.clip(np.round(w / s[:, None]), -127, 127).astype(np.int8)
    return q, s


def requant_int4(w):
    n, k = w.shape
    kb = -(-k // block)
    wp = np.zeros((n, kb * block), np.float32)
    wp[:, :k] = w
    wb = wp.reshape(n, kb, block)
    s = np.abs(wb).max(-1) / 7.0
    s = np.where(s > 0, s, 1.0).astype(np.float32)
    q = (np.clip(np.round(wb / s[..., None]), -7, 7) + 8).astype(np.uint8)
    return q, s


def unpack4(codes):
    lo, hi = codes & 0x0F, codes >> 4
    return np.stack([lo, hi], -1).reshape(codes.shape[0], codes.shape[1], -1)


dequant = {}
for p in layers:
    w = w32[p + ".weight"]
    if fmt == "int8":
        q, s = requant_int8(w)
        got_q, got_s = wq[p + ".weight.T.i8"], wq[p + ".weight.scales"]
        assert got_q.shape == q.T.shape, (p, got_q.shape)
        diff = np.abs(got_q.astype(np.int32) - q.T.astype(np.int32))
        assert diff.max() <= 1 and (diff > 0).mean() < 1e-4, (p, diff.max(), (diff > 0).mean())
        np.testing.assert_allclose(got_s, s, rtol=1e-6)
        dequant[p] = (got_q.T.astype(np.float32) * got_s[:, None], got_q)
    else:
        q, s = requant_int4(w)
        got = wq[p + ".weight.q4"]
        got_s = wq[p + ".weight.scales"].reshape(s.shape)
        codes = unpack4(got)
        diff = np.abs(codes.astype(np.int32) - q.astype(np.int32))
        assert diff.max() <= 1 and (diff > 0).mean() < 1e-4, (p, diff.max(), (diff > 0).mean())
        np.testing.assert_allclose(got_s, s, rtol=1e-6)
        deq = ((codes.astype(np.float32) - 8) * got_s[..., None]).reshape(w.shape[0], -1)
        dequant[p] = (deq[:, : w.shape[1]], got)
    print(f"{p}: codes and scales as NumPy re-quantizes them ({fmt})")


def with_weights(model, subst):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for init in m.graph.initializer:
        if init.name in subst:
            init.CopyFrom(numpy_helper.from_array(subst[init.name].astype(np.float32), init.name))
    return m


def run(model, feed):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(["logits", "value"], feed)


rng = np.random.default_rng(0)
shape = [d.dim_value or 16 for d in fp32.graph.input[0].type.tensor_type.shape.dim]
f = fp32.graph.input[1].type.tensor_type.shape.dim[1].dim_value
mean = w32["float_inputs_mean"]
std = w32["float_inputs_std"]
feed = {
    "image": rng.integers(0, 256, shape, dtype=np.uint8),
    "floats": (mean + std * rng.standard_normal((shape[0], f))).astype(np.float32),
}
want, _ = run(with_weights(fp32, {p + ".weight": d for p, (d, _) in dequant.items()}), feed)
got, _ = run(quant, feed)
rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
print(f"quantized model vs f32 model with NumPy-dequantized weights: relative error {rel:.2e}")
assert rel < 0.05, rel

# The same codes in another layout must not pass: the check above has teeth.
wrong = onnx.ModelProto()
wrong.CopyFrom(quant)
for init in wrong.graph.initializer:
    name = init.name
    if any(name == p + ".weight.q4" for p in layers):
        a = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(((a << 4) | (a >> 4)).astype(np.uint8), name))
    if any(name == p + ".weight.T.i8" for p in layers):
        a = numpy_helper.to_array(init)
        k, n = a.shape
        init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(a.reshape(n, k).T), name))
bad, _ = run(wrong, feed)
rel_bad = float(np.linalg.norm(bad - want) / np.linalg.norm(want))
print(f"same codes in the wrong layout: relative error {rel_bad:.2e}")
assert rel_bad > 4 * max(rel, 0.05), rel_bad
print("onnx.checker ok; quantized layout ok")
