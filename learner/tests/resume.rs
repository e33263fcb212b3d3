//! A resumed learner continues bit for bit; missing or foreign state fails loudly.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::Config;
use rulka_learner::{Learner, TrajBatch};
use tch::{Device, Kind, Tensor};

fn cfg(dense: u32) -> Config {
    Config::from_yaml_str(
        &format!("nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: {dense}}}\nenvironment: {{n_zone_centers_in_inputs: 1, n_prev_actions_in_inputs: 0, n_contact_material_physics_behavior_types: 0}}\nppo: {{update_epochs: 2, num_minibatches: 3}}\ngrpo: {{grouping: any, ref_kl_coef: 0.1, update_epochs: 1}}"),
        "t",
    )
    .unwrap()
}

/// Deterministic rollouts (built from index arithmetic, not an RNG).
fn batch(cfg: &Config, k: i64) -> Vec<TrajBatch> {
    let f = cfg.float_input_dim() as i64;
    (0..6i64)
        .map(|i| {
            let n = 1 + (i + k) % 3;
            let x = Tensor::arange(n * f, (Kind::Float, Device::Cpu)).reshape([n, f]);
            TrajBatch {
                image: (Tensor::arange(n * 36 * 36, (Kind::Int64, Device::Cpu)) * (i + 3 * k + 1))
                    .remainder(256)
                    .to_kind(Kind::Uint8)
                    .reshape([n, 1, 36, 36]),
                floats: (x * 0.01 + (i + k) as f64).sin() * 40.0 + 70.0,
                actions: Tensor::arange(n, (Kind::Int64, Device::Cpu))
                    .remainder(12)
                    .reshape([n, 1])
                    + (i % 5),
                old_logp: Tensor::full([n], -2.4, (Kind::Float, Device::Cpu)),
                old_value: Tensor::zeros([n], (Kind::Float, Device::Cpu)),
                rewards: (0..n).map(|s| ((i * 7 + s + k) % 5) as f32 * 0.3 - 0.5).collect(),
                group: 0,
            }
        })
        .collect()
}

fn train(l: &mut Learner, cfg: &Config, ks: std::ops::Range<i64>) {
    for k in ks {
        l.ppo_update(&batch(cfg, k)).unwrap();
        l.grpo_update(&batch(cfg, k + 100)).unwrap();
        l.frames += 1000;
    }
}

#[test]
fn resume_continues_bit_for_bit() {
    let cfg = cfg(32);
    let dir = tempfile::tempdir().unwrap();
    let mut a = Learner::new(&cfg, Device::Cpu, 5);
    train(&mut a, &cfg, 0..3);
    a.save_state(dir.path()).unwrap();
    train(&mut a, &cfg, 3..5);

    let mut b = Learner::resume(&cfg, dir.path(), Device::Cpu).unwrap();
    assert_eq!((b.frames, b.updates), (3000, 6));
    train(&mut b, &cfg, 3..5);
    assert_eq!((a.frames, a.updates), (b.frames, b.updates));
    let (wa, wb) = (a.network().to_weights(), b.network().to_weights());
    for (name, t) in &wa.tensors {
        let same =
            t.data.iter().zip(&wb.tensors[name].data).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{name} differs after resume");
    }
    assert_eq!(a.optimizer().state(), b.optimizer().state());
}

#[test]
fn missing_corrupt_or_foreign_state_fails_loudly() {
    let c32 = cfg(32);
    let dir = tempfile::tempdir().unwrap();
    let e = Learner::resume(&c32, dir.path(), Device::Cpu).unwrap_err();
    assert!(format!("{e:#}").contains("no saved learner state"), "{e:#}");
    let mut l = Learner::new(&c32, Device::Cpu, 1);
    train(&mut l, &c32, 0..1);
    let sdir = l.save_state(dir.path()).unwrap();
    // Another architecture.
    let e = Learner::resume(&cfg(48), dir.path(), Device::Cpu).unwrap_err();
    assert!(format!("{e:#}").contains("saved for network"), "{e:#}");
    // A corrupted optimiser file (flipped bit) is caught by its checksum.
    let opt = sdir.join("optimizer.safetensors");
    let mut bytes = std::fs::read(&opt).unwrap();
    let n = bytes.len();
    bytes[n - 5] ^= 0x40;
    std::fs::write(&opt, bytes).unwrap();
    let e = Learner::resume(&c32, dir.path(), Device::Cpu).unwrap_err();
    assert!(format!("{e:#}").contains("checksum"), "{e:#}");
}

/// Moments are matched to parameters by name: a state written when the
/// network listed its tensors in another order (the index in `m.<i>.<name>`
/// reversed here) resumes with each moment on its own parameter.
#[test]
fn optimizer_moments_resume_by_parameter_name() {
    let cfg = cfg(32);
    let dir = tempfile::tempdir().unwrap();
    let mut l = Learner::new(&cfg, Device::Cpu, 3);
    train(&mut l, &cfg, 0..2);
    let sdir = l.save_state(dir.path()).unwrap();
    let path = sdir.join("optimizer.safetensors");
    let saved = rulka_checkpoint::Weights::read(&path).unwrap();
    let n = l.network().parameter_names().len();
    let mut renumbered = rulka_checkpoint::Weights::default();
    for (k, t) in &saved.tensors {
        let mut parts = k.splitn(3, '.');
        let (which, i, name) =
            (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        let i: usize = i.parse().unwrap();
        renumbered.tensors.insert(format!("{which}.{:03}.{name}", n - 1 - i), t.clone());
    }
    renumbered.write(&path, saved.meta.as_ref().unwrap()).unwrap();
    let r = Learner::resume(&cfg, dir.path(), Device::Cpu).unwrap();
    assert_eq!(r.optimizer().state(), l.optimizer().state());
}

/// Each save keeps the state `LATEST` named before it as a fallback and
/// removes the older ones: after every save the state directory holds the
/// new state and the previous one, nothing else, and the previous one still
/// resumes (to the frames it was saved at) when `LATEST` names it again.
#[test]
fn each_save_keeps_the_previous_state_as_a_fallback_and_drops_older_ones() {
    let cfg = cfg(32);
    let dir = tempfile::tempdir().unwrap();
    let mut l = Learner::new(&cfg, Device::Cpu, 5);
    let states = |d: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "LATEST")
            .collect();
        v.sort();
        v
    };
    let mut saved: Vec<(String, u64)> = Vec::new();
    for k in 0..4 {
        train(&mut l, &cfg, k..k + 1);
        let s = l.save_state(dir.path()).unwrap();
        saved.push((s.file_name().unwrap().to_string_lossy().into_owned(), l.frames));
        let latest = std::fs::read_to_string(dir.path().join("LATEST")).unwrap();
        assert_eq!(latest.trim(), saved[k as usize].0, "save {k}");
        let mut want: Vec<String> = saved.iter().rev().take(2).map(|(n, _)| n.clone()).collect();
        want.sort();
        assert_eq!(states(dir.path()), want, "after save {k}: the new state and the previous one");
    }
    // The fallback is complete: named by LATEST again, it resumes.
    let (previous, frames) = saved[saved.len() - 2].clone();
    std::fs::write(dir.path().join("LATEST"), &previous).unwrap();
    let r = Learner::resume(&cfg, dir.path(), Device::Cpu).unwrap();
    assert_eq!(r.frames, frames, "the fallback {previous} resumes where it was saved");
}
