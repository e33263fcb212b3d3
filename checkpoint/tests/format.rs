//! Weight-file round trips and every way a weight file can be wrong.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::collections::HashMap;

use rulka_checkpoint::{write_atomic, CheckpointError, Meta, Weights};
use rulka_config::Config;
use rulka_network::Architecture;
use safetensors::tensor::TensorView;
use safetensors::Dtype;

fn small() -> (Config, Architecture) {
    let cfg = Config::from_yaml_str(
        "nn: {image_width: 36, image_height: 40, float_hidden_dim: 8, dense_hidden_dim: 16}\nenvironment: {n_zone_centers_in_inputs: 2, n_prev_actions_in_inputs: 1}",
        "c",
    )
    .unwrap();
    let arch = Architecture::from_config(&cfg);
    (cfg, arch)
}

fn filled(arch: &Architecture) -> Weights {
    let mut w = Weights::zeros(arch);
    let mut k = 0u32;
    for t in w.tensors.values_mut() {
        for x in t.data.iter_mut() {
            k = k.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            *x = (k >> 8) as f32 / (1 << 24) as f32 - 0.5;
        }
    }
    w
}

#[test]
fn round_trip_is_bit_identical_and_keeps_metadata() {
    let (cfg, arch) = small();
    let w = filled(&arch);
    let mut meta = Meta::new(&cfg, 1234);
    meta.extra.insert("note".into(), "hello".into());
    let bytes = w.to_safetensors(&meta).unwrap();
    let back = Weights::from_safetensors(&bytes, "x").unwrap();
    assert_eq!(back.tensors.len(), w.tensors.len());
    for (name, t) in &w.tensors {
        let b = &back.tensors[name];
        assert_eq!(b.shape, t.shape);
        let same_bits = t.data.iter().zip(&b.data).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same_bits, "{name} changed");
    }
    let m = back.meta.unwrap();
    assert_eq!(m.step, 1234);
    assert_eq!(m.network_hash, cfg.network_hash());
    assert_eq!(m.extra.get("note").map(String::as_str), Some("hello"));
    back_check(&w, &arch, &cfg);
}

fn back_check(w: &Weights, arch: &Architecture, cfg: &Config) {
    w.check(arch, &cfg.network_hash(), false).unwrap();
}

#[test]
fn truncated_file_is_corrupt() {
    let (cfg, arch) = small();
    let bytes = filled(&arch).to_safetensors(&Meta::new(&cfg, 0)).unwrap();
    for cut in [3, 8, 100, bytes.len() - 1] {
        let e = Weights::from_safetensors(&bytes[..cut], "ckpt.safetensors").unwrap_err();
        assert!(matches!(e, CheckpointError::Corrupt { .. }), "cut {cut}: {e}");
        assert!(e.to_string().starts_with("ckpt.safetensors: not a valid safetensors file"), "{e}");
    }
}

#[test]
fn a_flipped_bit_in_tensor_data_fails_the_checksum() {
    let (cfg, arch) = small();
    let mut bytes = filled(&arch).to_safetensors(&Meta::new(&cfg, 0)).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x10;
    let e = Weights::from_safetensors(&bytes, "x").unwrap_err();
    assert!(matches!(e, CheckpointError::Checksum { .. }), "{e}");
}

#[test]
fn mismatch_report_names_every_tensor() {
    let (cfg, arch) = small();
    let mut w = filled(&arch);
    w.tensors.remove("trunk.0.weight");
    w.tensors.remove("img_head.6.bias");
    w.tensors.insert(
        "extra.weight".into(),
        rulka_checkpoint::Tensor { shape: vec![1], data: vec![0.0] },
    );
    w.tensors.get_mut("value_head.bias").unwrap().shape = vec![2];
    let e = w.check(&arch, &cfg.network_hash(), false).unwrap_err();
    let CheckpointError::Tensors { mismatch, .. } = &e else { panic!("{e}") };
    assert_eq!(mismatch.missing, ["img_head.6.bias", "trunk.0.weight"]);
    assert_eq!(mismatch.unexpected, ["extra.weight"]);
    assert_eq!(mismatch.wrong_shape, [("value_head.bias".to_string(), vec![1], vec![2])]);
    let text = e.to_string();
    assert!(text.contains("missing img_head.6.bias, trunk.0.weight"), "{text}");
    assert!(text.contains("unexpected extra.weight"), "{text}");
    assert!(text.contains("value_head.bias has shape [2] but the network needs [1]"), "{text}");
    // partial loads tolerate missing/unexpected, never wrong shapes
    let e = w.check(&arch, &cfg.network_hash(), true).unwrap_err();
    let CheckpointError::Tensors { mismatch, .. } = &e else { panic!("{e}") };
    assert!(mismatch.missing.is_empty() && mismatch.unexpected.is_empty());
    assert_eq!(mismatch.wrong_shape.len(), 1);
}

#[test]
fn another_architecture_is_refused_by_hash() {
    let (cfg, arch) = small();
    let bytes = filled(&arch).to_safetensors(&Meta::new(&cfg, 0)).unwrap();
    let mut other = cfg.clone();
    other.nn.dense_hidden_dim = 32;
    let w = Weights::from_safetensors(&bytes, "ck").unwrap();
    let e = w.check(&Architecture::from_config(&other), &other.network_hash(), false).unwrap_err();
    assert!(matches!(e, CheckpointError::Architecture { .. }), "{e}");
}

#[test]
fn plain_safetensors_without_rulka_metadata_loads() {
    // What a converted PyTorch state dict looks like: tensors only.
    let (cfg, arch) = small();
    let w = filled(&arch);
    let raw: Vec<(String, Vec<u8>, Vec<usize>)> = w
        .tensors
        .iter()
        .map(|(n, t)| {
            (n.clone(), t.data.iter().flat_map(|x| x.to_le_bytes()).collect(), t.shape.clone())
        })
        .collect();
    let views: Vec<(&str, TensorView)> = raw
        .iter()
        .map(|(n, d, s)| (n.as_str(), TensorView::new(Dtype::F32, s.clone(), d).unwrap()))
        .collect();
    let bytes = safetensors::serialize(views, None::<HashMap<String, String>>).unwrap();
    let back = Weights::from_safetensors(&bytes, "converted").unwrap();
    assert!(back.meta.is_none());
    back.check(&arch, &cfg.network_hash(), false).unwrap();
    assert_eq!(back.tensors, w.tensors);
}

#[test]
fn non_f32_tensors_are_refused_by_name() {
    let data = [0u8; 8];
    let views = vec![("float_inputs_mean", TensorView::new(Dtype::F64, vec![1], &data).unwrap())];
    let bytes = safetensors::serialize(views, None::<HashMap<String, String>>).unwrap();
    let e = Weights::from_safetensors(&bytes, "f64").unwrap_err();
    assert!(e.to_string().contains("float_inputs_mean is F64"), "{e}");
}

#[test]
fn unknown_format_version_is_refused() {
    let (cfg, arch) = small();
    let mut meta = Meta::new(&cfg, 0);
    meta.format_version = 99;
    let bytes = filled(&arch).to_safetensors(&meta).unwrap();
    let e = Weights::from_safetensors(&bytes, "v").unwrap_err();
    assert!(matches!(e, CheckpointError::Version { ref found, .. } if found == "99"), "{e}");
}

#[test]
fn atomic_write_replaces_whole_files_and_leaves_no_temp() {
    let (cfg, arch) = small();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let a = filled(&arch);
    a.write(&path, &Meta::new(&cfg, 1)).unwrap();
    let b = Weights::zeros(&arch);
    b.write(&path, &Meta::new(&cfg, 2)).unwrap();
    let back = Weights::read(&path).unwrap();
    assert_eq!(back.meta.unwrap().step, 2);
    assert_eq!(back.tensors, b.tensors);
    let names: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["w.safetensors"]);
}

#[test]
fn failed_write_keeps_the_previous_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.bin");
    write_atomic(&path, b"old").unwrap();
    // Renaming onto a non-empty directory fails: the old file must be untouched.
    let blocked = dir.path().join("blocked");
    std::fs::create_dir(&blocked).unwrap();
    std::fs::write(blocked.join("x"), b"x").unwrap();
    let e = write_atomic(&blocked, b"new").unwrap_err();
    assert!(e.to_string().contains("blocked"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
    let stray = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".tmp."));
    assert_eq!(stray.count(), 0, "temp file left behind");
}

#[test]
fn stale_temp_files_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".w.safetensors.tmp.123.456"), b"partial").unwrap();
    std::fs::write(dir.path().join(".w.safetensors.tmp.123.789"), b"partial").unwrap();
    // Not temps of write_atomic: kept.
    for keep in ["w.safetensors", ".hidden", "notes.tmp.1", ".x.tmp.1/"] {
        let p = dir.path().join(keep.trim_end_matches('/'));
        if keep.ends_with('/') {
            std::fs::create_dir(&p).unwrap();
        } else {
            std::fs::write(&p, b"keep").unwrap();
        }
    }
    assert_eq!(rulka_checkpoint::remove_stale_temps(dir.path()).unwrap(), 2);
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [".hidden", ".x.tmp.1", "notes.tmp.1", "w.safetensors"]);
}

/// A bare file name is written in the working directory; any other path in
/// its own directory (the temp file too: a temp elsewhere, on another file
/// system, could not be renamed into place). Process-wide working directory:
/// nextest runs each test in a process of its own.
#[test]
fn atomic_writes_put_their_temp_file_beside_the_target() {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let target = tempfile::tempdir().unwrap();
    std::env::set_current_dir(work.path()).unwrap();
    write_atomic(std::path::Path::new("bare.bin"), b"here").unwrap();
    assert_eq!(std::fs::read(work.path().join("bare.bin")).unwrap(), b"here");
    // The working directory is on /dev/shm (tmpfs), the target is not.
    write_atomic(&target.path().join("w.bin"), b"there").unwrap();
    assert_eq!(std::fs::read(target.path().join("w.bin")).unwrap(), b"there");
}

#[test]
fn weights_are_looked_up_by_name_and_checked_for_non_finite_values() {
    let (_, arch) = small();
    let mut w = filled(&arch);
    assert_eq!(w.get("value_head.bias").map(|t| t.shape.clone()), Some(vec![1]));
    assert!(w.get("no.such.tensor").is_none());
    assert!(w.all_finite());
    w.tensors.get_mut("value_head.bias").unwrap().data[0] = f32::NAN;
    assert!(!w.all_finite());
}
