"""Cross-checks an exported rulka model outside Rust.

usage: check_onnx.py MODEL.onnx CASE.json

CASE.json: {"batch": B, "image_shape": [B,1,H,W], "floats_shape": [B,F],
            "image": "file of uint8", "floats": "file of float32 LE",
            "logits": "file of float32 LE (tch)", "value": "file of float32 LE (tch)"}

Runs onnx.checker (full check) and strict shape inference, then Python
onnxruntime on the inputs, and prints max |Δ| against the tch outputs.
Exit 0 when both are <= 1e-4, 1 otherwise.
"""
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort

model_path, case_path = sys.argv[1], sys.argv[2]
model = onnx.load(model_path)
onnx.checker.check_model(model, full_check=True)
onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
assert [i.name for i in model.graph.input] == ["image", "floats"], model.graph.input
assert [o.name for o in model.graph.output] == ["logits", "value"], model.graph.output

case = json.load(open(case_path))
image = np.fromfile(case["image"], dtype=np.uint8).reshape(case["image_shape"])
floats = np.fromfile(case["floats"], dtype="<f4").reshape(case["floats_shape"])
want_logits = np.fromfile(case["logits"], dtype="<f4").reshape(case["batch"], -1)
want_value = np.fromfile(case["value"], dtype="<f4").reshape(case["batch"], 1)

sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
logits, value = sess.run(["logits", "value"], {"image": image, "floats": floats})
dl = float(np.max(np.abs(logits - want_logits)))
dv = float(np.max(np.abs(value - want_value)))
print(f"onnx.checker ok; python onnxruntime {ort.__version__}: max|dlogits| {dl:.3e} max|dvalue| {dv:.3e}")
sys.exit(0 if dl <= 1e-4 and dv <= 1e-4 else 1)
