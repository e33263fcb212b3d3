//! `rulka bench learner`: PPO update throughput (samples/s: rollout steps ×
//! epochs per second) of rulka's learner on the CPU or on CUDA (fp32 or fp16
//! autocast) against the same update in PyTorch eager (Python) on the same
//! device, measured in the same run; and the peak memory of a
//! K-trajectory GRPO update with and without micro-batching (each in a fresh
//! child process, peak RSS from the kernel).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context as _};
use rulka_config::{float_inputs_mean_std, Config};
use rulka_learner::{Learner, TrajBatch};
use rulka_network::{Architecture, Stem};
use tch::{Device, Kind, Tensor};

use rulka_trainer::load_config;

/// Arguments of `rulka bench learner`.
#[derive(Debug)]
pub struct LearnerArgs {
    /// Config shaping the network.
    pub config: std::path::PathBuf,
    /// Seconds of timed updates per side.
    pub seconds: f64,
    /// Intra-op threads on both sides.
    pub threads: usize,
    /// Trajectories in the GRPO memory measurement (0: skip it).
    pub grpo_k: usize,
    /// Steps per trajectory in the GRPO memory measurement.
    pub grpo_len: usize,
    /// Where both sides train: `cpu`, `cuda` or `auto`.
    pub device: rulka_config::LearnerDevice,
    /// fp16 autocast with loss scaling on both sides (CUDA only).
    pub amp: bool,
}

/// `n_rollouts` random rollouts of `len` steps for `cfg`'s network (seeded):
/// frames, floats around the inputs' mean, uniform actions, fixed rewards of
/// a shaped reward's size (±0.1 per step, as 1 m of progress is worth 0.1).
pub fn random_rollouts(cfg: &Config, n_rollouts: usize, len: usize, seed: u64) -> Vec<TrajBatch> {
    tch::manual_seed(seed as i64);
    let arch = Architecture::from_config(cfg);
    let (h, w) = arch.image.as_ref().map_or((1, 1), |i| (i.height as i64, i.width as i64));
    let (mean, std) = float_inputs_mean_std(cfg);
    let (mean, std) = (Tensor::from_slice(&mean), Tensor::from_slice(&std));
    let t = len as i64;
    (0..n_rollouts)
        .map(|i| TrajBatch {
            image: Tensor::randint(256, [t, 1, h, w], (Kind::Uint8, Device::Cpu)),
            floats: &mean
                + &std * Tensor::randn([t, arch.float_dim as i64], (Kind::Float, Device::Cpu)),
            actions: Tensor::randint(
                arch.n_actions as i64,
                [t, arch.n_heads as i64],
                (Kind::Int64, Device::Cpu),
            ),
            old_logp: Tensor::full(
                [t],
                -(arch.n_actions as f64).ln() * arch.n_heads as f64,
                (Kind::Float, Device::Cpu),
            ),
            old_value: Tensor::zeros([t], (Kind::Float, Device::Cpu)),
            rewards: (0..len).map(|k| (((k * 7 + i * 13) % 11) as f32 - 5.0) / 50.0).collect(),
            group: 0,
        })
        .collect()
}

/// Runs the benchmark and prints the table.
pub fn run_learner(args: &LearnerArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut cfg = load_config(&args.config)?;
    let device = rulka_trainer::learner_device(args.device).map_err(anyhow::Error::msg)?;
    let amp = args.amp && device.is_cuda();
    cfg.training.mixed_precision = amp;
    let arch = Architecture::from_config(&cfg);
    tch::set_num_threads(args.threads as i32);
    // As in `rulka train`; the Python baseline gets the same settings.
    let tuned = rulka_learner::tune_allocator();
    let steps = cfg.ppo.rollout_steps_per_update.max(1) as usize;
    let roll_len = 256.min(steps);
    let n_rollouts = steps.div_ceil(roll_len);
    let epochs = cfg.ppo.update_epochs as usize;
    writeln!(
        out,
        "learner benchmark: {}; PPO update of {} steps × {epochs} epochs × {} minibatches, {} thread(s), on {}{}",
        arch.summary(),
        n_rollouts * roll_len,
        cfg.ppo.num_minibatches,
        args.threads,
        rulka_trainer::device_name(device),
        if amp { " with fp16 autocast" } else { "" }
    )?;
    let mut learner = Learner::new(&cfg, device, 0);
    let data = random_rollouts(&cfg, n_rollouts, roll_len, 1);
    learner.ppo_update(&data)?; // warm-up
    let (mut done, t0) = (0usize, Instant::now());
    while t0.elapsed().as_secs_f64() < args.seconds || done == 0 {
        learner.ppo_update(&data)?;
        done += n_rollouts * roll_len * epochs;
    }
    let ours = done as f64 / t0.elapsed().as_secs_f64();
    writeln!(
        out,
        "  rulka (tch)        {ours:>9.0} samples/s  ({:.2} updates/s){}",
        ours / (n_rollouts * roll_len * epochs) as f64,
        if tuned { "" } else { " (glibc refused the allocator settings)" }
    )?;
    match torch_baseline(&cfg, &arch, args, device, n_rollouts * roll_len, roll_len) {
        Ok(theirs) => writeln!(
            out,
            "  PyTorch eager      {theirs:>9.0} samples/s    rulka / PyTorch = {:.2}×",
            ours / theirs
        )?,
        Err(e) => writeln!(out, "  PyTorch eager      skipped: {e:#}")?,
    }
    if args.grpo_k > 0 {
        grpo_memory(args, out)?;
    }
    Ok(())
}

fn torch_baseline(
    cfg: &Config,
    arch: &Architecture,
    args: &LearnerArgs,
    device: Device,
    steps: usize,
    roll_len: usize,
) -> anyhow::Result<f64> {
    let Some(img) = arch.variant_a_cnn(cfg) else {
        bail!("the Python baseline models Variant A with an image only")
    };
    if img.stem != Stem::Vanilla
        || img.spectral_norm
        || img.adaptive_maxpool.is_some()
        || arch.n_heads != 1
    {
        bail!("the Python baseline models the vanilla CNN stem with one head only");
    }
    let python = std::env::var_os("RULKA_TORCH_PYTHON").unwrap_or_else(|| "python3".into());
    let (mean, std) = float_inputs_mean_std(cfg);
    let convs: Vec<_> = img
        .convs()
        .iter()
        .map(|c| serde_json::json!({"c_in": c.c_in, "c_out": c.c_out, "kernel": c.kernel, "stride": c.stride, "padding": c.padding}))
        .collect();
    let linears: Vec<_> = [
        "float_feature_extractor.0",
        "float_feature_extractor.2",
        "trunk.0",
        "trunk.2",
        "policy_head",
        "value_head",
    ]
    .iter()
    .filter_map(|name| {
        let w = arch.net.tensor(&format!("{name}.weight"))?;
        Some(serde_json::json!({"name": name, "d_in": w.shape[1], "d_out": w.shape[0]}))
    })
    .collect();
    let spec = serde_json::json!({
        "threads": args.threads, "seconds": args.seconds, "convs": convs, "linears": linears,
        "float_mean": mean, "float_std": std, "steps": steps, "rollout_len": roll_len,
        "height": img.height, "width": img.width, "float_dim": arch.float_dim, "n_actions": arch.n_actions,
        "epochs": cfg.ppo.update_epochs, "minibatches": cfg.ppo.num_minibatches,
        "device": if device.is_cuda() { "cuda" } else { "cpu" }, "amp": cfg.training.mixed_precision,
    });
    let script = baseline_script("bench_torch_learner.py");
    let out = Command::new(&python)
        .envs(rulka_learner::TUNED_ALLOCATOR_ENV)
        .arg(&script)
        .arg(spec.to_string())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "{} failed ({}); set RULKA_TORCH_PYTHON to a Python with PyTorch",
            python.to_string_lossy(),
            err.lines().last().unwrap_or("")
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing the baseline's output")?;
    v["samples_per_s"].as_f64().context("no samples_per_s in the baseline's output")
}

/// A Python baseline beside the sources this rulka was built from, else under
/// `scripts/` in the working directory (a binary carried to another machine
/// with a copy of the repository).
fn baseline_script(name: &str) -> std::path::PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts").join(name);
    if built.exists() {
        built
    } else {
        Path::new("scripts").join(name)
    }
}

fn grpo_memory(args: &LearnerArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    writeln!(
        out,
        "  GRPO update, K = {} trajectories × {} steps (peak RSS of a fresh process):",
        args.grpo_k, args.grpo_len
    )?;
    let mut rows = Vec::new();
    let all = (args.grpo_k * args.grpo_len) as u32;
    for micro in [all, 256] {
        let child = Command::new(&exe)
            .env("RULKA_BENCH_GRPO_CHILD", format!("{}:{}:{}", args.grpo_k, args.grpo_len, micro))
            .args(["bench", "learner", "--config"])
            .arg(&args.config)
            .output()?;
        let text = String::from_utf8_lossy(&child.stdout).into_owned();
        let rss: f64 = text.trim().parse().with_context(|| {
            format!("child said {text:?}: {}", String::from_utf8_lossy(&child.stderr))
        })?;
        let label = if micro == all {
            "one graph (the original)".to_string()
        } else {
            format!("micro-batches of {micro} steps")
        };
        writeln!(out, "    {label:<28} {:>8.0} MiB", rss / 1024.0)?;
        rows.push(rss);
    }
    writeln!(out, "    micro-batching needs {:.2}× the memory", rows[1] / rows[0])?;
    Ok(())
}

/// Child side of the GRPO memory measurement: `K:len:micro` → prints peak RSS in KiB.
pub fn learner_grpo_child(spec: &str, config: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let p: Vec<usize> = spec
        .split(':')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("RULKA_BENCH_GRPO_CHILD")?;
    let mut cfg = load_config(config)?;
    cfg.training.algorithm = rulka_config::Algorithm::Grpo;
    cfg.grpo.group_size = p[0] as u32;
    cfg.grpo.micro_batch_steps = p[2] as u32;
    cfg.grpo.update_epochs = 1;
    tch::set_num_threads(1);
    let mut learner = Learner::new(&cfg, Device::Cpu, 0);
    let data = random_rollouts(&cfg, p[0], p[1], 2);
    learner.grpo_update(&data)?;
    let status = std::fs::read_to_string("/proc/self/status")?;
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .context("no VmHWM in /proc/self/status")?;
    writeln!(out, "{hwm}")?;
    Ok(())
}
