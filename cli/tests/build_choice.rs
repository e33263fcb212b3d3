//! `scripts/build-choice`, which decides the build `scripts/rulka` makes:
//! a GPU build, once chosen or found, is kept (a later call never builds
//! the CPU binary over it); a flag switches and is kept; a bad flag or a
//! bad kept file is an error naming the value. Run on checkouts made in
//! temporary folders (`RULKA_ROOT`), with the marker files
//! `scripts/setup.sh --gpu` leaves and a stand-in for an existing binary.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-choice")
}

/// (exit code, stdout, stderr) of `scripts/build-choice ARGS` on `root`.
fn choose(root: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(script()).args(args).env("RULKA_ROOT", root).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).trim().to_string(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn kept(root: &Path) -> Option<String> {
    std::fs::read_to_string(root.join(".rulka-build")).ok().map(|s| s.trim().to_string())
}

fn touch(root: &Path, rel: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, b"").unwrap();
}

fn gpu_pieces(root: &Path) {
    touch(root, ".onnxruntime-gpu/.rulka-ort-gpu-1.31.1");
    touch(root, ".libtorch/.rulka-cuda-libs-2.11.0");
}

/// A stand-in `target/release/rulka` whose `--version` reports `build`.
fn binary_reporting(root: &Path, build: &str) {
    let p = root.join("target/release/rulka");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, format!("#!/bin/sh\necho 'rulka 0.1.0 (build: {build})'\n")).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_fresh_checkout_builds_for_the_cpu_and_keeps_nothing() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(choose(d.path(), &[]).1, "cpu");
    assert_eq!(kept(d.path()), None, "a CPU choice by default is not kept");
    // Half the GPU pieces is not the GPU build.
    touch(d.path(), ".onnxruntime-gpu/.rulka-ort-gpu-1.31.1");
    assert_eq!(choose(d.path(), &[]).1, "cpu");
    // A CPU binary already there is no reason to keep the CPU build.
    binary_reporting(d.path(), "cpu");
    assert_eq!(choose(d.path(), &[]).1, "cpu");
    assert_eq!(kept(d.path()), None);
}

#[test]
fn installed_gpu_pieces_choose_cuda_and_the_choice_outlives_them() {
    let d = tempfile::tempdir().unwrap();
    gpu_pieces(d.path());
    assert_eq!(choose(d.path(), &[]), (0, "cuda".into(), String::new()));
    assert_eq!(kept(d.path()).as_deref(), Some("cuda"));
    // The pieces gone (a moved checkout, a cleaned cache): still cuda.
    std::fs::remove_dir_all(d.path().join(".onnxruntime-gpu")).unwrap();
    assert_eq!(choose(d.path(), &[]).1, "cuda");

    let t = tempfile::tempdir().unwrap();
    gpu_pieces(t.path());
    touch(t.path(), ".tensorrt/lib/libnvinfer.so.10");
    assert_eq!(choose(t.path(), &[]).1, "cuda,tensorrt");
    assert_eq!(kept(t.path()).as_deref(), Some("cuda,tensorrt"));
}

#[test]
fn a_gpu_binary_built_by_hand_is_kept_and_a_flag_switches_for_good() {
    for (reported, want) in
        [("cuda", "cuda"), ("cuda,tensorrt", "cuda,tensorrt"), ("tensorrt", "cuda,tensorrt")]
    {
        let d = tempfile::tempdir().unwrap();
        binary_reporting(d.path(), reported);
        assert_eq!(choose(d.path(), &[]).1, want, "a binary built {reported}");
        assert_eq!(kept(d.path()).as_deref(), Some(want));
    }
    let d = tempfile::tempdir().unwrap();
    gpu_pieces(d.path());
    binary_reporting(d.path(), "cuda");
    assert_eq!(choose(d.path(), &["--build=cpu"]).1, "cpu");
    // Kept: neither the pieces nor the binary bring cuda back ...
    assert_eq!(choose(d.path(), &[]).1, "cpu");
    assert_eq!(kept(d.path()).as_deref(), Some("cpu"));
    // ... until a flag does.
    assert_eq!(choose(d.path(), &["--build=tensorrt"]).1, "cuda,tensorrt");
    assert_eq!(choose(d.path(), &[]).1, "cuda,tensorrt");
    assert_eq!(choose(d.path(), &["--build=cuda"]).1, "cuda");
    assert_eq!(choose(d.path(), &[]).1, "cuda");
    // auto forgets and chooses again from what is there.
    std::fs::remove_dir_all(d.path().join("target")).unwrap();
    std::fs::remove_dir_all(d.path().join(".libtorch")).unwrap();
    assert_eq!(choose(d.path(), &["--build=auto"]).1, "cpu");
    assert_eq!(kept(d.path()), None);
}

#[test]
fn a_bad_flag_or_a_bad_kept_file_is_an_error_naming_the_value() {
    let d = tempfile::tempdir().unwrap();
    let (code, out, err) = choose(d.path(), &["--build=gpu"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("--build=gpu") && err.contains("cpu, cuda, tensorrt or auto"), "{err}");
    assert_eq!(kept(d.path()), None, "a refused flag keeps nothing");
    std::fs::write(d.path().join(".rulka-build"), "cuda,rocm\n").unwrap();
    let (code, _, err) = choose(d.path(), &[]);
    assert_eq!(code, 2);
    assert!(err.contains("cuda,rocm") && err.contains(".rulka-build"), "{err}");
    let (code, _, err) = choose(d.path(), &["--frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("--frobnicate"), "{err}");
}
