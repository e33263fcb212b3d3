"""PyTorch (eager) baseline for `rulka bench learner`: the same PPO update as
rulka's learner — the same network (Variant A, vanilla CNN stem), input
normalisation, GAE (on the CPU, as rulka's), advantage normalisation, clipped
surrogate, clipped value loss, entropy bonus, global grad-norm clipping,
RAdam — on random rollouts of the same size, kept on the CPU and moved to the
device once per update as rulka moves them. On CUDA (spec "device": "cuda")
with spec "amp": fp16 autocast and a GradScaler. Prints one JSON line:
{"samples_per_s": ...}.

Usage (called by rulka): python bench_torch_learner.py '<json spec>'
"""
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
torch.manual_seed(0)

layers = []
for c in spec["convs"]:
    layers += [nn.Conv2d(c["c_in"], c["c_out"], c["kernel"], c["stride"], c["padding"]), nn.LeakyReLU(0.01)]
img_head = nn.Sequential(*layers, nn.Flatten())
L = {l["name"]: nn.Linear(l["d_in"], l["d_out"]) for l in spec["linears"]}
float_fe = nn.Sequential(L["float_feature_extractor.0"], nn.ReLU(), L["float_feature_extractor.2"], nn.ReLU())
trunk = nn.Sequential(L["trunk.0"], nn.ReLU(), L["trunk.2"], nn.ReLU())
policy, value = L["policy_head"], L["value_head"]
mean = torch.tensor(spec["float_mean"])
std = torch.tensor(spec["float_std"])
dev = torch.device(spec.get("device", "cpu"))
amp = bool(spec.get("amp", False)) and dev.type == "cuda"
for m in (img_head, float_fe, trunk, policy, value):
    m.to(dev)
mean_d, std_d = mean.to(dev), std.to(dev)
scaler = torch.amp.GradScaler("cuda") if amp else None
params = [p for m in (img_head, float_fe, trunk, policy, value) for p in m.parameters()]
opt = torch.optim.RAdam(params, lr=3e-4, eps=1e-4)

n, h, w, f, k = spec["steps"], spec["height"], spec["width"], spec["float_dim"], spec["n_actions"]
image = torch.randint(0, 256, (n, 1, h, w), dtype=torch.uint8)
floats = mean + std * torch.randn(n, f)
actions = torch.randint(0, k, (n,))
old_logp = torch.full((n,), -torch.log(torch.tensor(float(k))).item())
old_value = torch.zeros(n)
rewards = torch.randn(n)
roll = spec["rollout_len"]
dones = torch.zeros(n)
dones[roll - 1 :: roll] = 1.0
gamma, lam = 0.99, 0.95
clip, clip_vf, vf_coef, ent_coef, max_norm = 0.2, 0.2, 0.5, 0.01, 0.5


def forward(img, fl):
    x = img_head((img.float() - 128.0) / 128.0)
    y = float_fe((fl - mean_d) / std_d)
    z = trunk(torch.cat([x, y], 1))
    return policy(z), value(z).squeeze(1)


def update():
    adv = torch.zeros(n)
    last = 0.0
    for t in reversed(range(n)):
        nonterminal = 1.0 - dones[t]
        next_v = old_value[t + 1] if t + 1 < n else 0.0
        delta = rewards[t] + gamma * next_v * nonterminal - old_value[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    ret = (adv + old_value).to(dev)
    adv = adv.to(dev)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    img_d, fl_d, act_d = image.to(dev), floats.to(dev), actions.to(dev)
    old_logp_d, old_value_d = old_logp.to(dev), old_value.to(dev)
    mb = n // spec["minibatches"]
    for _ in range(spec["epochs"]):
        perm = torch.randperm(n).to(dev)
        for s in range(0, n, mb):
            idx = perm[s : s + mb]
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                logits, v = forward(img_d[idx], fl_d[idx])
            logp_all = F.log_softmax(logits.float(), 1)
            logp = logp_all.gather(1, act_d[idx, None]).squeeze(1)
            entropy = -(logp_all.exp() * logp_all).sum(1).mean()
            ratio = (logp - old_logp_d[idx]).exp()
            a = adv[idx]
            v = v.float()
            pg = torch.max(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip)).mean()
            v_clipped = old_value_d[idx] + (v - old_value_d[idx]).clamp(-clip_vf, clip_vf)
            vl = 0.5 * torch.max((v - ret[idx]) ** 2, (v_clipped - ret[idx]) ** 2).mean()
            loss = pg + vf_coef * vl - ent_coef * entropy
            opt.zero_grad()
            if scaler is None:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, max_norm)
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(params, max_norm)
                scaler.step(opt)
                scaler.update()


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


update()  # warm-up
sync()
done, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < spec["seconds"] or done == 0:
    update()
    sync()
    done += n * spec["epochs"]
print(json.dumps({"samples_per_s": done / (time.perf_counter() - t0), "torch": torch.__version__}))
