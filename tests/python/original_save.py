"""The original's save folder, written with the real PyTorch, for the tests
of `rulka import` / `rulka export --torch` (cli/tests/original.rs).

The networks are rebuilt here as PyTorch modules from the original's
semantics (`PpoActorCritic`; `HfActorCritic` around a real `transformers`
ViTModel; `TorchMultimodalActorCritic` in vision_transformer mode with a
CNN vision branch and a native transformer fusion trunk), with its module
names and registration order, so the parameter order a RAdam state dict is
indexed by is PyTorch's (and transformers') own, not rulka's.

    original_save.py make SPEC   writes SPEC["out"]/save/ (weights1.torch,
        optimizer1.torch after SPEC["steps"] real RAdam steps, scaler.torch,
        accumulated_stats.joblib) and, beside it, the network's outputs on
        random inputs and one more RAdam step (its gradients and the
        parameters after it), as raw little-endian arrays listed in io.json.
    original_save.py check SPEC BACK   loads rulka's export in BACK with
        torch.load(weights_only=True) and compares it with the save folder
        tensor for tensor; then the exported optimizer takes the same
        further step as the original did.
    original_save.py bad KIND PATH   writes a file the import must refuse.
"""
import json
import os
import sys

import joblib
import torch
from torch import nn
from torch.nn import functional as F


def cnn(h, w):
    # The original's vanilla img_head (agents/iqn.py): LeakyReLU 0.01, no padding.
    head = nn.Sequential(
        nn.Conv2d(1, 16, 4, 2), nn.LeakyReLU(),
        nn.Conv2d(16, 32, 4, 2), nn.LeakyReLU(),
        nn.Conv2d(32, 64, 3, 2), nn.LeakyReLU(),
        nn.Conv2d(64, 32, 3, 1), nn.LeakyReLU(),
        nn.Flatten(),
    )
    with torch.no_grad():
        out = head(torch.zeros(1, 1, h, w)).shape[1]
    return head, out


def float_mlp(f, fh):
    return nn.Sequential(nn.Linear(f, fh), nn.ReLU(), nn.Linear(fh, fh), nn.ReLU())


def heads(m, dh, n_out):
    m.trunk = nn.Sequential(nn.Linear(dh, dh), nn.ReLU(), nn.Linear(dh, dh), nn.ReLU())
    m.policy_head = nn.Linear(dh, n_out)
    m.value_head = nn.Linear(dh, 1)


class VariantA(nn.Module):
    """PpoActorCritic: img_head ‖ float MLP → trunk → heads."""

    def __init__(self, d):
        super().__init__()
        f = d["float_dim"]
        self.register_buffer("float_inputs_mean", torch.randn(f))
        self.register_buffer("float_inputs_std", torch.rand(f) + 0.5)
        self.img_head, conv = cnn(d["height"], d["width"])
        self.float_feature_extractor = float_mlp(f, d["float_hidden"])
        self.trunk = nn.Sequential(
            nn.Linear(conv + d["float_hidden"], d["dense_hidden"]), nn.ReLU(),
            nn.Linear(d["dense_hidden"], d["dense_hidden"]), nn.ReLU(),
        )
        self.policy_head = nn.Linear(d["dense_hidden"], d["n_logits"])
        self.value_head = nn.Linear(d["dense_hidden"], 1)

    def forward(self, img, z):
        h = torch.cat([self.img_head(img), self.float_feature_extractor(z)], 1)
        h = self.trunk(h)
        return self.policy_head(h), self.value_head(h)


class VariantC(nn.Module):
    """TorchMultimodalActorCritic, mode vision_transformer, vis_branch cnn,
    fusion_encoder native_transformer: the attributes in the order the
    original assigns them (pos_vf is the module's own parameter, so it
    comes first in parameters() and in the state dict)."""

    def __init__(self, d):
        super().__init__()
        f, fh, dh = d["float_dim"], d["float_hidden"], d["dense_hidden"]
        vd, fd, sl = d["vis_d"], d["fuse_d"], d["seq_len"]
        self.register_buffer("float_inputs_mean", torch.randn(f))
        self.register_buffer("float_inputs_std", torch.rand(f) + 0.5)
        self.float_feature_extractor = float_mlp(f, fh)
        self.img_head, conv = cnn(d["height"], d["width"])
        self.cnn_to_vis = nn.Linear(conv, vd) if conv != vd else nn.Identity()
        self.visfloat_to_seq = nn.Linear(vd + fh, sl * fd)
        self.pos_vf = nn.Parameter(torch.zeros(1, sl, fd))
        self.bridge = nn.Linear(fd, dh)
        layer = nn.TransformerEncoderLayer(
            d_model=fd, nhead=d["fuse_heads"], dim_feedforward=max(64, fd * d["fuse_ff_mult"]),
            dropout=0.0, batch_first=True, norm_first=False, activation="gelu",
        )
        self.enc_fusion_native = nn.TransformerEncoder(layer, num_layers=d["fuse_layers"])
        heads(self, dh, d["n_logits"])
        self.sl, self.fd = sl, fd

    def forward(self, img, z):
        vis = self.cnn_to_vis(self.img_head(img))
        cat = torch.cat([vis, self.float_feature_extractor(z)], 1)
        toks = self.visfloat_to_seq(cat).reshape(-1, self.sl, self.fd) + self.pos_vf
        h = self.trunk(self.bridge(self.enc_fusion_native(toks).mean(1)))
        return self.policy_head(h), self.value_head(h)


class VariantB(nn.Module):
    """HfActorCritic around a transformers ViTModel (`backbone`, with the
    pooler AutoModel gives it, which no forward reads: no gradient, so no
    RAdam state, but a place in the optimizer's list); vis_proj is an
    Identity (d_model = the ViT's width) and there are no refine layers.
    Its forward feeds the ViT a plain 3-channel resize, not the original's
    processor normalisation: only which parameters train, and their order,
    matter here (rulka's ViT forward is checked elsewhere), so the outputs
    are not compared."""

    def __init__(self, d):
        super().__init__()
        import transformers

        f, fh, dh, vd = d["float_dim"], d["float_hidden"], d["dense_hidden"], d["vis_d"]
        self.register_buffer("float_inputs_mean", torch.randn(f))
        self.register_buffer("float_inputs_std", torch.rand(f) + 0.5)
        self.vit_config = transformers.ViTConfig(
            hidden_size=vd, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            image_size=d["vit_pixels"], patch_size=8, qkv_bias=True,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )
        self.backbone = transformers.ViTModel(self.vit_config)
        self.float_feature_extractor = float_mlp(f, fh)
        self.float_to_hidden = nn.Linear(fh, vd)
        self.trunk = nn.Sequential(nn.Linear(2 * vd, dh), nn.ReLU(), nn.Linear(dh, dh), nn.ReLU())
        self.policy_head = nn.Linear(dh, d["n_logits"])
        self.value_head = nn.Linear(dh, 1)
        self.pixels = d["vit_pixels"]

    def forward(self, img, z):
        pix = F.interpolate(img, size=(self.pixels, self.pixels), mode="bilinear").repeat(1, 3, 1, 1)
        cls = self.backbone(pixel_values=pix).last_hidden_state[:, 0]
        h = torch.cat([cls, self.float_to_hidden(self.float_feature_extractor(z))], 1)
        h = self.trunk(h)
        return self.policy_head(h), self.value_head(h)


def network(spec):
    return {"A": VariantA, "B": VariantB, "C": VariantC}[spec["variant"]](spec["dims"])


def run(m, img_u8, floats):
    img = (img_u8.float() - 128.0) / 128.0
    z = (floats - m.float_inputs_mean) / m.float_inputs_std
    return m(img, z)


def raw(path, t):
    with open(path, "wb") as f:
        f.write(t.detach().contiguous().numpy().astype("<f4").tobytes())


def make(spec):
    torch.manual_seed(spec["seed"])
    out = spec["out"]
    save = os.path.join(out, "save")
    os.makedirs(save, exist_ok=True)
    d = spec["dims"]
    m = network(spec)
    if spec["variant"] == "C":
        with torch.no_grad():
            m.pos_vf.normal_(0, 0.5)  # zeros would hide a misplaced position table
    params = [p for p in m.parameters()]
    opt = torch.optim.RAdam(params, lr=spec["lr"], betas=tuple(spec["betas"]), eps=spec["eps"])
    scaler = torch.amp.GradScaler("cpu", init_scale=spec["scale"])
    b = 5
    for _ in range(spec["steps"]):
        img = torch.randint(0, 256, (b, 1, d["height"], d["width"]), dtype=torch.uint8)
        floats = torch.randn(b, d["float_dim"]) * 2
        logits, value = run(m, img, floats)
        loss = (logits.log_softmax(-1)[:, 0]).mean() + ((value - 1.0) ** 2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    if spec["variant"] == "B":
        # The model folder rulka's config names (its config.json only: the
        # weights travel in weights1.torch).
        m.vit_config.save_pretrained(os.path.join(out, "vit"))
    sd = m.state_dict()
    if spec.get("bc_heads", 0):
        # A behaviour-cloning checkpoint (PpoPolicyBcMultiOffset): the policy
        # under base.*, its frozen base policy_head, and trained bc_heads.{i}.
        w, bias = sd["policy_head.weight"], sd["policy_head.bias"]
        bc = {}
        for i in range(spec["bc_heads"]):
            bc[f"bc_heads.{i}.weight"] = w + 0.05 * (i + 1) * torch.randn_like(w)
            bc[f"bc_heads.{i}.bias"] = bias + 0.05 * (i + 1) * torch.randn_like(bias)
        sd = {("base." + k): v for k, v in sd.items()}
        sd.update(bc)
        with torch.no_grad():
            k = spec["bc_heads"]
            m.policy_head.weight.copy_(torch.stack([bc[f"bc_heads.{i}.weight"] for i in range(k)]).mean(0))
            m.policy_head.bias.copy_(torch.stack([bc[f"bc_heads.{i}.bias"] for i in range(k)]).mean(0))
    if spec["prefix"]:
        sd = {"_orig_mod." + k: v for k, v in sd.items()}
    torch.save(sd, os.path.join(save, "weights1.torch"))
    torch.save(opt.state_dict(), os.path.join(save, "optimizer1.torch"))
    torch.save(scaler.state_dict(), os.path.join(save, "scaler.torch"))
    joblib.dump(
        {
            "cumul_number_frames_played": spec["frames"],
            "cumul_training_hours": 1.25,
            "alltime_min_ms": {"map5": 41230.0},
            "rolling_mean_ms": {"map5": 45000.5},
            "cumul_number_batches_done": 17,
        },
        os.path.join(save, "accumulated_stats.joblib"),
    )
    if spec.get("snapshot"):
        with open(spec["snapshot"]) as src, open(os.path.join(save, "config_snapshot.yaml"), "w") as dst:
            dst.write(src.read())

    # The network's outputs (eval mode) on inputs that rulka reads back.
    m.eval()
    img = torch.randint(0, 256, (3, 1, d["height"], d["width"]), dtype=torch.uint8)
    floats = torch.randn(3, d["float_dim"]) * 3
    with torch.no_grad():
        logits, value = run(m, img, floats)
    with open(os.path.join(out, "image.u8"), "wb") as f:
        f.write(img.numpy().tobytes())
    raw(os.path.join(out, "floats.f32"), floats)
    raw(os.path.join(out, "logits.f32"), logits)
    raw(os.path.join(out, "value.f32"), value)

    # One more RAdam step from the saved state, on given gradients, for the
    # parameters that train (a pooler never gets a gradient, so never a step).
    trained = [(n, p) for n, p in m.named_parameters() if p.grad is not None]
    grads = [torch.randn_like(p) * 0.1 for _, p in trained]
    for (_, p), g in zip(trained, grads):
        p.grad = g.clone()
    opt.step()
    raw(os.path.join(out, "grads.f32"), torch.cat([g.flatten() for g in grads]))
    raw(os.path.join(out, "after.f32"), torch.cat([p.detach().flatten() for _, p in trained]))
    names = [n for n, _ in trained]
    with open(os.path.join(out, "io.json"), "w") as f:
        json.dump({"params": names, "step": int(opt.state[params[0]]["step"].item()),
                   "lr": opt.param_groups[0]["lr"]}, f)


def check(spec, back):
    save = os.path.join(spec["out"], "save")
    strip = lambda sd: {k.removeprefix("_orig_mod."): v for k, v in sd.items()}
    orig = strip(torch.load(os.path.join(save, "weights1.torch"), weights_only=True))
    got = torch.load(os.path.join(back, "weights1.torch"), weights_only=True)
    torch.manual_seed(spec["seed"])
    m = network(spec)
    assert list(got.keys()) == list(m.state_dict().keys()), (list(got.keys()), list(m.state_dict().keys()))
    for k, v in orig.items():
        assert got[k].dtype == torch.float32 and torch.equal(got[k], v), k
    m.load_state_dict(got, strict=True)

    o_orig = torch.load(os.path.join(save, "optimizer1.torch"), weights_only=True)
    o_got = torch.load(os.path.join(back, "optimizer1.torch"), weights_only=True)
    assert o_got["param_groups"][0]["params"] == o_orig["param_groups"][0]["params"]
    assert set(o_got["state"]) == set(o_orig["state"]), (sorted(o_got["state"]), sorted(o_orig["state"]))
    for i, st in o_orig["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(o_got["state"][i][key], st[key]), (i, key)
    g = o_got["param_groups"][0]
    assert g["lr"] == spec["lr"] and tuple(g["betas"]) == tuple(spec["betas"]) and g["eps"] == spec["eps"], g
    params = list(m.parameters())
    opt = torch.optim.RAdam(params, lr=spec["lr"], betas=tuple(spec["betas"]), eps=spec["eps"])
    opt.load_state_dict(o_got)
    with open(os.path.join(spec["out"], "io.json")) as f:
        names = json.load(f)["params"]
    trained = [p for n, p in m.named_parameters() if n in names]
    assert len(trained) == len(names), (len(trained), len(names))
    n = 0
    flat = torch.frombuffer(bytearray(open(os.path.join(spec["out"], "grads.f32"), "rb").read()), dtype=torch.float32)
    for p in trained:
        p.grad = flat[n:n + p.numel()].reshape(p.shape).clone()
        n += p.numel()
    opt.step()
    after = torch.frombuffer(bytearray(open(os.path.join(spec["out"], "after.f32"), "rb").read()), dtype=torch.float32)
    now = torch.cat([p.detach().flatten() for p in trained])
    assert torch.equal(now, after), float((now - after).abs().max())

    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict(torch.load(os.path.join(back, "scaler.torch"), weights_only=True))
    assert scaler.get_scale() == spec["scale"], scaler.get_scale()
    stats = joblib.load(os.path.join(back, "accumulated_stats.joblib"))
    assert stats["cumul_number_frames_played"] == spec["frames"], stats
    assert stats["alltime_min_ms"] == spec.get("best_back", {"map5": 41230.0}), stats
    print(f"round trip: {len(got)} tensors and the optimizer state identical; the next RAdam step identical")


class Evil:
    """Unpickling this runs `touch PATH` — unless the reader never runs a global."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def bad(kind, path, spec):
    torch.manual_seed(0)
    sd = network(spec).state_dict()
    if kind == "global":
        sd["trunk.0.weight"] = Evil(path + ".pwned")
    elif kind == "shape":
        w = sd["trunk.0.weight"]
        sd["trunk.0.weight"] = torch.zeros(w.shape[0], w.shape[1] + 3)
    elif kind == "transposed":
        # The same element count in the other layout: only the shape tells.
        sd["trunk.0.weight"] = sd["trunk.0.weight"].t().contiguous()
    elif kind == "dtype":
        sd["value_head.weight"] = sd["value_head.weight"].double()
    elif kind == "missing":
        del sd["value_head.bias"]
    elif kind == "optimizer":
        # Sound weights beside the optimizer state of a wider network.
        wider = dict(spec, dims=dict(spec["dims"], dense_hidden=spec["dims"]["dense_hidden"] + 8))
        m = network(wider)
        opt = torch.optim.RAdam(m.parameters(), lr=spec["lr"])
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
        torch.save(opt.state_dict(), os.path.join(os.path.dirname(path), "optimizer1.torch"))
    elif kind == "step":
        # The network's own optimizer state, stepped a fractional number of times.
        m = network(spec)
        opt = torch.optim.RAdam(m.parameters(), lr=spec["lr"])
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
        for st in opt.state.values():
            st["step"] = torch.tensor(2.5)
        torch.save(opt.state_dict(), os.path.join(os.path.dirname(path), "optimizer1.torch"))
    torch.save(sd, path)


if __name__ == "__main__":
    cmd = sys.argv[1]
    spec = json.load(open(sys.argv[2]))
    if cmd == "make":
        make(spec)
    elif cmd == "check":
        check(spec, sys.argv[3])
    elif cmd == "bad":
        # bad SPEC KIND PATH [KIND PATH ...]: one process for every folder
        # (importing torch is most of its time).
        pairs = sys.argv[3:]
        for kind, path in zip(pairs[0::2], pairs[1::2], strict=True):
            bad(kind, path, spec)
    else:
        sys.exit(f"unknown command {cmd}")
