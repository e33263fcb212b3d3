"""Measures the ways ONNX Runtime CPU can run weight-quantized matrix multiplications
(the options behind `rulka export --weights`), on an fp32 rulka export.

usage: .venv/bin/python scripts/quant_options.py MODEL.onnx

For each option: model size, p50 latency at batch 1/8/32 (one thread) and
KL / greedy agreement / max |dV| against the fp32 model on 2000 random inputs.
The dynamic MatMulInteger rows use onnxruntime.quantization.quantize_dynamic as
the reference implementation of that option.
"""
import copy, sys, tempfile, time
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper, helper, TensorProto

src = sys.argv[1]
base = onnx.load(src)
MIN = 60000

def big_gemms(m):
    inits = {i.name: i for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == 'Gemm' and n.input[1] in inits:
            w = numpy_helper.to_array(inits[n.input[1]])
            if w.size >= MIN:
                yield n, w, inits

def nbits(bits, block, acc):
    m = copy.deepcopy(base)
    new_nodes = []
    targets = {id(n): (n, w) for n, w, _ in big_gemms(m)}
    drop = set()
    for n in list(m.graph.node):
        if id(n) not in targets:
            new_nodes.append(n); continue
        n, w = targets[id(n)]
        N, K = w.shape
        kb = (K + block - 1) // block
        wp = np.zeros((N, kb * block), np.float32); wp[:, :K] = w
        wb = wp.reshape(N, kb, block)
        amax = np.abs(wb).max(-1)
        qmax = 2 ** (bits - 1) - 1
        scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
        zp = 2 ** (bits - 1)
        q = np.clip(np.round(wb / scale[..., None]) + zp, 0, 2 ** bits - 1).astype(np.uint8)
        if bits == 4:
            q = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
        name = n.input[1]
        drop.add(name)
        m.graph.initializer.extend([
            numpy_helper.from_array(q, name + '.q'),
            numpy_helper.from_array(scale.reshape(-1), name + '.scale'),
        ])
        inputs = [n.input[0], name + '.q', name + '.scale', '', '', n.input[2]]
        new_nodes.append(helper.make_node('MatMulNBits', inputs, list(n.output), domain='com.microsoft',
                                          K=K, N=N, bits=bits, block_size=block, accuracy_level=acc))
    del m.graph.node[:]
    m.graph.node.extend(new_nodes)
    keep = [i for i in m.graph.initializer if i.name not in drop]
    del m.graph.initializer[:]; m.graph.initializer.extend(keep)
    m.opset_import.append(helper.make_opsetid('com.microsoft', 1))
    return m

def qdq(m0=None):
    m = copy.deepcopy(base)
    new_nodes = []
    targets = {id(n): (n, w) for n, w, _ in big_gemms(m)}
    drop = set()
    for n in list(m.graph.node):
        if id(n) in targets:
            n, w = targets[id(n)]
            s = (np.abs(w).max(1) / 127).astype(np.float32)
            q = np.clip(np.round(w / s[:, None]), -127, 127).astype(np.int8)
            name = n.input[1]; drop.add(name)
            m.graph.initializer.extend([numpy_helper.from_array(q, name + '.q'), numpy_helper.from_array(s, name + '.s')])
            new_nodes.append(helper.make_node('DequantizeLinear', [name + '.q', name + '.s'], [name + '.dq'], axis=0))
            n.input[1] = name + '.dq'
        new_nodes.append(n)
    del m.graph.node[:]; m.graph.node.extend(new_nodes)
    keep = [i for i in m.graph.initializer if i.name not in drop]
    del m.graph.initializer[:]; m.graph.initializer.extend(keep)
    return m

def dynamic(per_channel):
    from onnxruntime.quantization import quantize_dynamic, QuantType
    out = f'{tempfile.gettempdir()}/rulka-dyn{int(per_channel)}.onnx'
    quantize_dynamic(src, out, weight_type=QuantType.QInt8, per_channel=per_channel, op_types_to_quantize=['Gemm', 'MatMul'])
    return onnx.load(out)

def session(m, threads=1):
    so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider'])

def inputs(b, rng):
    ii = base.graph.input
    h, w = ii[0].type.tensor_type.shape.dim[2].dim_value, ii[0].type.tensor_type.shape.dim[3].dim_value
    f = ii[1].type.tensor_type.shape.dim[1].dim_value
    return {'image': rng.integers(0, 256, (b, 1, h, w), dtype=np.uint8), 'floats': (rng.standard_normal((b, f)) * 5).astype(np.float32)}

def p50(s, feed, n):
    for _ in range(20): s.run(None, feed)
    t = []
    for _ in range(n):
        a = time.perf_counter(); s.run(None, feed); t.append(time.perf_counter() - a)
    return np.median(t) * 1e6

def logsm(x):
    x = x - x.max(-1, keepdims=True); return x - np.log(np.exp(x).sum(-1, keepdims=True))

variants = [('fp32', base), ('qdq int8 per-ch', qdq()), ('dynamic MatMulInteger per-tensor', dynamic(False)), ('dynamic MatMulInteger per-ch', dynamic(True))]
for bits in (8, 4):
    for block in (32, 128):
        for acc in (0, 4):
            variants.append((f'MatMulNBits {bits}b blk{block} acc{acc}', nbits(bits, block, acc)))
rng = np.random.default_rng(0)
ref = session(base)
evalfeed = inputs(2000, rng)
lr, vr = ref.run(None, evalfeed)
for name, m in variants:
    try:
        s = session(m)
    except Exception as e:
        print(f'{name:40s} FAILED {str(e)[:200]}'); continue
    l, v = s.run(None, evalfeed)
    a, b = logsm(lr), logsm(l)
    kl = (np.exp(a) * (a - b)).sum(-1)
    agree = (lr.argmax(-1) == l.argmax(-1)).mean()
    size = len(m.SerializeToString()) / 1e6
    lat = [p50(s, inputs(bb, rng), 1500 if bb == 1 else 400) for bb in (1, 8, 32)]
    print(f'{name:40s} {size:6.2f} MB  b1 {lat[0]:7.1f} us  b8 {lat[1]:7.1f}  b32 {lat[2]:8.1f}  meanKL {kl.mean():.2e} maxKL {kl.max():.2e} agree {agree:.4f} max|dV| {np.abs(v-vr).max():.2e}', flush=True)
