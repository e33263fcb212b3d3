"""An independent NumPy (float64) reference for the original's transformer
networks, written from the upstream semantics rather than from rulka's code:

- Hugging Face `ViTModel` (patch conv, CLS, positions, pre-norm layers,
  final LayerNorm) and `BertModel` fed `inputs_embeds` (token type 0,
  absolute positions, post-norm layers);
- PyTorch `nn.TransformerEncoderLayer` (batch_first, norm_first=False, GELU);
- the original's `prepare_hf_pixels`, `HfActorCritic` (Variant B) and
  `TorchMultimodalActorCritic._forward_bridge_out` (Variant C).

Input: a case JSON (paths of the state dict as safetensors, the raw uint8
frames and f32 floats, the network settings). Output: writes the logits and
the value as raw little-endian f32 next to the given output paths.
"""
import json
import math
import struct
import sys

import numpy as np

ERF = np.vectorize(math.erf)


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        s, e = info["data_offsets"]
        out[name] = np.frombuffer(data[base + s : base + e], dtype="<f4").astype(np.float64).reshape(info["shape"])
    return out


def linear(sd, p, x, bias=True):
    y = x @ sd[p + ".weight"].T
    return y + sd[p + ".bias"] if bias else y


def gelu(x):
    return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)))


def layer_norm(sd, p, x, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * sd[p + ".weight"] + sd[p + ".bias"]


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def mha(q, k, v, heads):
    b, l, d = q.shape
    dh = d // heads
    split = lambda t: t.reshape(b, l, heads, dh).transpose(0, 2, 1, 3)
    a = softmax(split(q) @ split(k).transpose(0, 1, 3, 2) / math.sqrt(dh))
    return (a @ split(v)).transpose(0, 2, 1, 3).reshape(b, l, d)


def torch_encoder(sd, p, x, layers, heads):
    """nn.TransformerEncoder of post-norm GELU layers (eps 1e-5)."""
    d = x.shape[-1]
    for i in range(layers):
        lp = f"{p}.layers.{i}"
        w, bias = sd[lp + ".self_attn.in_proj_weight"], sd[lp + ".self_attn.in_proj_bias"]
        q, k, v = (x @ w[j * d : (j + 1) * d].T + bias[j * d : (j + 1) * d] for j in range(3))
        a = linear(sd, lp + ".self_attn.out_proj", mha(q, k, v, heads))
        x = layer_norm(sd, lp + ".norm1", x + a, 1e-5)
        f = linear(sd, lp + ".linear2", gelu(linear(sd, lp + ".linear1", x)))
        x = layer_norm(sd, lp + ".norm2", x + f, 1e-5)
    return x


def conv2d(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    o, _, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    cols = np.empty((n, c, k, k, oh, ow))
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
    return np.einsum("ncijhw,ocij->nohw", cols, w) + b[None, :, None, None]


def vanilla_cnn(sd, img):
    x = img
    for i, (s) in zip((0, 2, 4, 6), (2, 2, 2, 1)):
        x = conv2d(x, sd[f"img_head.{i}.weight"], sd[f"img_head.{i}.bias"], s, 0)
        x = np.where(x > 0, x, 0.01 * x)
    return x.reshape(x.shape[0], -1)


def bilinear(x, oh, ow):
    """F.interpolate(mode='bilinear', align_corners=False), no antialias."""
    def axis(n_in, n_out):
        scale = n_in / n_out
        src = np.maximum((np.arange(n_out) + 0.5) * scale - 0.5, 0.0)
        i0 = np.floor(src).astype(int)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, src - i0

    y0, y1, ly = axis(x.shape[2], oh)
    x0, x1, lx = axis(x.shape[3], ow)
    top = x[:, :, y0][:, :, :, x0] * (1 - lx) + x[:, :, y0][:, :, :, x1] * lx
    bot = x[:, :, y1][:, :, :, x0] * (1 - lx) + x[:, :, y1][:, :, :, x1] * lx
    return top * (1 - ly)[None, None, :, None] + bot * ly[None, None, :, None]


def prepare_hf_pixels(img, vit):
    x = np.repeat(img, 3, axis=1)
    x = bilinear(x, vit["pixel_size"][0], vit["pixel_size"][1])
    x01 = (np.clip(x, -1, 1) + 1.0) * 0.5
    if vit.get("pixel_mean") is not None:
        m = np.array(vit["pixel_mean"])[None, :, None, None]
        s = np.array(vit["pixel_std"])[None, :, None, None]
        return (x01 - m) / s
    return x01


def vit_model(sd, p, pix, vit):
    ps = vit["patch_size"]
    x = conv2d(pix, sd[p + "embeddings.patch_embeddings.projection.weight"], sd[p + "embeddings.patch_embeddings.projection.bias"], ps, 0)
    b, d = x.shape[0], x.shape[1]
    x = x.reshape(b, d, -1).transpose(0, 2, 1)
    cls = np.broadcast_to(sd[p + "embeddings.cls_token"], (b, 1, d))
    x = np.concatenate([cls, x], 1) + sd[p + "embeddings.position_embeddings"]
    eps, heads = vit["layer_norm_eps"], vit["num_attention_heads"]
    for i in range(vit["num_hidden_layers"]):
        lp = f"{p}encoder.layer.{i}"
        h = layer_norm(sd, lp + ".layernorm_before", x, eps)
        qkv = [linear(sd, f"{lp}.attention.attention.{n}", h, vit["qkv_bias"]) for n in ("query", "key", "value")]
        x = linear(sd, lp + ".attention.output.dense", mha(*qkv, heads)) + x
        h = layer_norm(sd, lp + ".layernorm_after", x, eps)
        x = linear(sd, lp + ".output.dense", gelu(linear(sd, lp + ".intermediate.dense", h))) + x
    return layer_norm(sd, p + "layernorm", x, eps)


def bert_model(sd, p, emb, bert):
    l = emb.shape[1]
    e = p + "embeddings"
    x = emb + sd[e + ".token_type_embeddings.weight"][0] + sd[e + ".position_embeddings.weight"][:l]
    eps, heads = bert["layer_norm_eps"], bert["num_attention_heads"]
    x = layer_norm(sd, e + ".LayerNorm", x, eps)
    for i in range(bert["num_hidden_layers"]):
        lp = f"{p}encoder.layer.{i}"
        qkv = [linear(sd, f"{lp}.attention.self.{n}", x) for n in ("query", "key", "value")]
        a = linear(sd, lp + ".attention.output.dense", mha(*qkv, heads))
        x = layer_norm(sd, lp + ".attention.output.LayerNorm", a + x, eps)
        h = linear(sd, lp + ".output.dense", gelu(linear(sd, lp + ".intermediate.dense", x)))
        x = layer_norm(sd, lp + ".output.LayerNorm", h + x, eps)
    return x


def float_mlp(sd, z):
    relu = lambda t: np.maximum(t, 0)
    return relu(linear(sd, "float_feature_extractor.2", relu(linear(sd, "float_feature_extractor.0", z))))


def maybe(sd, p, x):
    """nn.Linear when the checkpoint has it, nn.Identity otherwise."""
    return linear(sd, p, x) if p + ".weight" in sd else x


def variant_b(sd, img, z, c):
    zf = linear(sd, "float_to_hidden", float_mlp(sd, z))
    toks = vit_model(sd, "backbone.", prepare_hf_pixels(img, c["vit"]), c["vit"])
    pool = maybe(sd, "vis_proj", toks[:, 0])
    if c["vis_layers"] > 0:
        pool = torch_encoder(sd, "vis_refine", pool[:, None], c["vis_layers"], c["vis_heads"])[:, 0]
    return np.concatenate([pool, zf], 1)


def fusion_trunk(sd, toks, c):
    fe = c["fusion_encoder"]
    if fe == "linear":
        return toks.mean(1)
    if fe == "native_transformer":
        if c["fuse_layers"] > 0:
            toks = torch_encoder(sd, "enc_fusion_native", toks, c["fuse_layers"], c["fuse_heads"])
        return toks.mean(1)
    if fe == "mlp":
        # nn.Sequential of Linear(+ReLU [+Dropout]) … Linear: the Linear indices in order.
        idx = sorted(int(k.split(".")[1]) for k in sd if k.startswith("fusion_mlp_mod.") and k.endswith(".weight"))
        x = toks.reshape(toks.shape[0], -1)
        for n, i in enumerate(idx):
            x = linear(sd, f"fusion_mlp_mod.{i}", x)
            if n + 1 < len(idx):
                x = np.maximum(x, 0)
        return x
    if fe == "cnn":
        x = toks.transpose(0, 2, 1)
        idx = sorted(int(k.split(".")[2]) for k in sd if k.startswith("fusion_cnn_mod.0.") and k.endswith(".weight"))
        for i in idx:
            w, bias = sd[f"fusion_cnn_mod.0.{i}.weight"], sd[f"fusion_cnn_mod.0.{i}.bias"]
            k = w.shape[2]
            xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2)))
            n_out = xp.shape[2] - k + 1
            cols = np.stack([xp[:, :, j : j + n_out] for j in range(k)], axis=2)  # [B, C, k, L]
            x = np.maximum(np.einsum("bckl,ock->bol", cols, w) + bias[None, :, None], 0)
        return maybe(sd, "fusion_cnn_mod.1.2", x.mean(2))
    if fe == "hf_embedding":
        emb = linear(sd, "hf_fusion_proj_in", toks)
        return maybe(sd, "hf_fusion_proj_out", bert_model(sd, "_hf_fusion_bb.", emb, c["bert"]).mean(1))
    raise ValueError(fe)


def vision(sd, img, c):
    """The vision part of each mode, as _forward_bridge_out computes it."""
    vb = c["vis_branch"]
    if vb == "cnn":
        return vanilla_cnn(sd, img)
    if vb == "native_transformer":
        ps = c["patch_size"]
        x = conv2d(img, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], ps, 0)
        b, d = x.shape[0], x.shape[1]
        return x.reshape(b, d, -1).transpose(0, 2, 1)
    if vb == "hf_transformer":
        toks = vit_model(sd, "_hf_vis_backbone.", prepare_hf_pixels(img, c["vit"]), c["vit"])
        return maybe(sd, "hf_vis_proj", toks)
    raise ValueError(vb)


def native_vis(sd, toks, c):
    toks = toks + sd["pos_vis"]
    if c["vis_layers"] > 0:
        toks = torch_encoder(sd, "enc_vis", toks, c["vis_layers"], c["vis_heads"])
    return toks


def variant_c(sd, img, z, c):
    mode, vb, fd = c["fusion_mode"], c["vis_branch"], c["fuse_d"]
    b = z.shape[0]
    if mode == "vision_transformer":
        fh = float_mlp(sd, z)
        if vb == "cnn":
            vis = maybe(sd, "cnn_to_vis", vision(sd, img, c))
        elif vb == "native_transformer":
            vis = native_vis(sd, vision(sd, img, c), c).mean(1)
        elif vb == "hf_transformer":
            vis = vision(sd, img, c)[:, 0]
            if c["vis_layers"] > 0:
                vis = torch_encoder(sd, "vis_refine", vis[:, None], c["vis_layers"], c["vis_heads"])[:, 0]
        else:
            vis = np.zeros((b, c["vis_d"]))
        cat = np.concatenate([vis, fh], 1)
        if c["fusion_encoder"] == "linear":
            return linear(sd, "bridge", cat)
        sl = c["seq_len"]
        toks = linear(sd, "visfloat_to_seq", cat).reshape(b, sl, fd) + sd["pos_vf"]
        return linear(sd, "bridge", fusion_trunk(sd, toks, c))
    if mode == "post_concat" and c["layout"] == "token_sequence":
        fh = z if c["float_token_input"] == "raw" else float_mlp(sd, z)
        if c["float_token_layout"] == "per_feature":
            ftoks = linear(sd, "float_scalar_to_tok", fh[:, :, None]) + sd["float_per_feat_slot_emb"]
        else:
            ftoks = linear(sd, "float_to_tokens", fh).reshape(b, -1, fd)
        if vb == "cnn":
            vis = maybe(sd, "postconcat_cnn_to_fuse", vision(sd, img, c))[:, None]
        elif vb == "native_transformer":
            toks = native_vis(sd, vision(sd, img, c), c)
            vis = maybe(sd, "vis_to_fuse", toks if c["fusion_tokens"] == "patch_tokens" else toks.mean(1, keepdims=True))
        elif vb == "hf_transformer":
            toks = vision(sd, img, c)
            if c["fusion_tokens"] != "patch_tokens":
                toks = toks[:, 0:1]
            if c["vis_layers"] > 0:
                toks = torch_encoder(sd, "vis_refine", toks, c["vis_layers"], c["vis_heads"])
            vis = maybe(sd, "vis_to_fuse", toks)
        else:
            vis = np.zeros((b, 0, fd))
        seq = np.concatenate([vis, ftoks], 1) + sd["pos_pc"]
        return linear(sd, "bridge", fusion_trunk(sd, seq, c))
    if mode == "post_concat":
        fh = float_mlp(sd, z)
        if vb == "cnn":
            iv = vision(sd, img, c)
        elif vb == "native_transformer":
            iv = native_vis(sd, vision(sd, img, c), c).mean(1)
        elif vb == "hf_transformer":
            iv = vision(sd, img, c)[:, 0]
            if c["vis_layers"] > 0:
                iv = torch_encoder(sd, "vis_refine", iv[:, None], c["vis_layers"], c["vis_heads"])[:, 0]
        else:
            iv = np.zeros((b, 0))
        sl = c["seq_len"]
        toks = linear(sd, "fused_to_seq", np.concatenate([iv, fh], 1)).reshape(b, sl, fd) + sd["pos_pc"]
        return linear(sd, "bridge", fusion_trunk(sd, toks, c))
    # unified
    uf = linear(sd, "float_to_tokens", z).reshape(b, -1, fd)
    if vb == "cnn":
        seq = np.concatenate([maybe(sd, "cnn_to_fuse", vision(sd, img, c))[:, None], uf], 1)
    elif vb in ("native_transformer", "hf_transformer"):
        seq = np.concatenate([vision(sd, img, c), uf], 1)
    else:
        seq = uf
    return linear(sd, "bridge", fusion_trunk(sd, seq + sd["pos_uni"], c))


def main(path):
    c = json.load(open(path))
    sd = read_safetensors(c["weights"])
    b, f = c["floats_shape"]
    img = np.frombuffer(open(c["image"], "rb").read(), dtype=np.uint8).reshape(c["image_shape"]).astype(np.float64)
    img = (img - 128.0) / 128.0
    floats = np.frombuffer(open(c["floats"], "rb").read(), dtype="<f4").reshape(b, f).astype(np.float64)
    z = (floats - sd["float_inputs_mean"]) / sd["float_inputs_std"]
    relu = lambda t: np.maximum(t, 0)
    h = variant_b(sd, img, z, c) if c["variant"] == "B" else variant_c(sd, img, z, c)
    h = relu(linear(sd, "trunk.2", relu(linear(sd, "trunk.0", h))))
    open(c["out_logits"], "wb").write(linear(sd, "policy_head", h).astype("<f4").tobytes())
    open(c["out_value"], "wb").write(linear(sd, "value_head", h).astype("<f4").tobytes())


if __name__ == "__main__":
    main(sys.argv[1])
