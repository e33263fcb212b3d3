"""PyTorch-eager baseline for `rulka bench inference` (Variant A, vanilla CNN).

usage: bench_torch_eager.py WEIGHTS.safetensors '{"height":64,"width":64,"float_dim":264,
        "batches":[1,8],"seconds":1.0,"threads":1}'

Builds the Python original's PpoActorCritic structure (img_head, float MLP, trunk,
heads) in plain torch.nn, loads rulka's safetensors (same state-dict names),
and prints JSON rows {batch, iterations, p50_us, p90_us, p99_us} of forward + sample
latency under torch.no_grad(). Needs a Python with PyTorch (CPU is enough).
"""
import json
import struct
import sys
import time

import torch
from torch import nn


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(info["shape"])
        out[name] = t
    return out


class PpoActorCritic(nn.Module):
    def __init__(self, h, w, f, sd):
        super().__init__()
        self.register_buffer("float_inputs_mean", torch.zeros(f))
        self.register_buffer("float_inputs_std", torch.ones(f))
        self.img_head = None
        conv_dim = 0
        if h > 0:
            a = nn.LeakyReLU
            self.img_head = nn.Sequential(
                nn.Conv2d(1, 16, 4, 2), a(), nn.Conv2d(16, 32, 4, 2), a(),
                nn.Conv2d(32, 64, 3, 2), a(), nn.Conv2d(64, 32, 3, 1), a(), nn.Flatten())
            with torch.no_grad():
                conv_dim = self.img_head(torch.zeros(1, 1, h, w)).shape[1]
        hid = sd["float_feature_extractor.0.weight"].shape[0]
        dense = sd["trunk.0.weight"].shape[0]
        self.float_feature_extractor = nn.Sequential(nn.Linear(f, hid), nn.ReLU(), nn.Linear(hid, hid), nn.ReLU())
        self.trunk = nn.Sequential(nn.Linear(conv_dim + hid, dense), nn.ReLU(), nn.Linear(dense, dense), nn.ReLU())
        self.policy_head = nn.Linear(dense, sd["policy_head.weight"].shape[0])
        self.value_head = nn.Linear(dense, 1)

    def forward(self, img, floats):
        z = self.float_feature_extractor((floats - self.float_inputs_mean) / self.float_inputs_std)
        if self.img_head is not None:
            z = torch.cat([self.img_head((img.float() - 128.0) / 128.0), z], 1)
        h = self.trunk(z)
        return self.policy_head(h), self.value_head(h)


def main():
    sd = load_safetensors(sys.argv[1])
    p = json.loads(sys.argv[2])
    torch.set_num_threads(int(p["threads"]))
    net = PpoActorCritic(p["height"], p["width"], p["float_dim"], sd).eval()
    net.load_state_dict(sd, strict=True)
    rows = []
    for b in p["batches"]:
        img = torch.randint(0, 256, (b, 1, max(p["height"], 1), max(p["width"], 1)), dtype=torch.uint8)
        fl = net.float_inputs_mean.repeat(b, 1)
        n_logits = sd["policy_head.weight"].shape[0]

        def step():
            with torch.no_grad():
                logits, v = net(img, fl)
                d = torch.distributions.Categorical(logits=logits.reshape(b, -1, 12))
                a = d.sample()
                return d.log_prob(a).sum(-1), v

        end = time.perf_counter() + p["seconds"] / 5
        while time.perf_counter() < end:
            step()
        samples = []
        end = time.perf_counter() + p["seconds"]
        while time.perf_counter() < end or len(samples) < 30:
            t = time.perf_counter()
            step()
            samples.append((time.perf_counter() - t) * 1e6)
        samples.sort()
        q = lambda x: samples[round((len(samples) - 1) * x)]
        rows.append({"batch": b, "iterations": len(samples), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99), "n_logits": n_logits})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
