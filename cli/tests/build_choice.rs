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

#[test]
fn a_kept_file_is_taken_only_when_it_names_a_build_scripts_rulka_makes() {
    let taken = ["cpu", "cuda", "cuda,tensorrt"];
    let refused = [
        "tensorrt",
        "gpu",
        "CUDA",
        "cuda,",
        "tensorrt,cuda",
        "cpu,cuda",
        "cuda tensorrt",
        "cud",
        "cudaa",
        "x",
    ];
    for (value, ok) in taken.iter().map(|v| (*v, true)).chain(refused.iter().map(|v| (*v, false))) {
        let d = tempfile::tempdir().unwrap();
        // Written as scripts/build-choice writes it, and with spaces around.
        for text in [format!("{value}\n"), format!("  {value} \n")] {
            std::fs::write(d.path().join(".rulka-build"), &text).unwrap();
            let (code, out, err) = choose(d.path(), &[]);
            if ok {
                assert_eq!((code, out.as_str()), (0, value), "{text:?}: {err}");
            } else {
                assert_eq!(code, 2, "{text:?} was taken as {out:?}");
                assert!(err.contains(value), "{text:?}: {err}");
            }
        }
    }
}

/// The GPU build scripts/test keeps, if this run has one.
fn gpu_build() -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_BIN_EXE_rulka")).with_file_name("gpu-build").join("rulka");
    bin.is_file().then_some(bin)
}

#[test]
fn the_real_binaries_versions_are_read_as_the_builds_they_are() {
    // The plain binary of this test build says cpu: nothing kept.
    let d = tempfile::tempdir().unwrap();
    let release = d.path().join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rulka"), release.join("rulka")).unwrap();
    assert_eq!(choose(d.path(), &[]).1, "cpu");
    assert_eq!(kept(d.path()), None);
    let Some(gpu) = gpu_build() else {
        assert!(
            std::env::var("RULKA_REQUIRE_GPU_BUILD").is_err(),
            "scripts/test keeps the GPU build"
        );
        return;
    };
    // The cuda,tensorrt build's own --version keeps that build.
    let d = tempfile::tempdir().unwrap();
    let release = d.path().join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(&gpu, release.join("rulka")).unwrap();
    assert_eq!(choose(d.path(), &[]).1, "cuda,tensorrt");
    assert_eq!(kept(d.path()).as_deref(), Some("cuda,tensorrt"));
}

/// A checkout in a temporary folder with scripts/rulka and
/// scripts/build-choice, a stand-in scripts/setup.sh that logs how it was
/// run, and a stand-in `cargo` on PATH that logs its arguments and leaves
/// stand-in binaries reporting the features they were asked for.
fn stand_in_checkout() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let scripts = d.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    for s in ["rulka", "build-choice"] {
        std::fs::copy(here.join(s), scripts.join(s)).unwrap();
    }
    let exe = |p: &Path, text: &str| {
        std::fs::write(p, text).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    exe(
        &scripts.join("setup.sh"),
        "#!/bin/sh\necho \"setup $*\" >> \"$(dirname \"$0\")/../log\"\n",
    );
    let bin = d.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    exe(
        &bin.join("cargo"),
        r#"#!/bin/sh
root="$(pwd)"
echo "cargo $*" >> "$root/log"
build=cpu
case "$*" in
  *rulka/tensorrt*) build=cuda,tensorrt ;;
  *rulka/cuda*) build=cuda ;;
esac
mkdir -p "$root/target/release"
for b in rulka rulka-torch; do
  printf '#!/bin/sh
echo "rulka 0.1.0 (build: %s)"
' "$build" > "$root/target/release/$b"
  chmod +x "$root/target/release/$b"
done
"#,
    );
    d
}

fn run_scripts_rulka(d: &Path, args: &[&str]) -> (i32, String) {
    let path = format!("{}:{}", d.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let o = Command::new(d.join("scripts/rulka"))
        .args(args)
        .current_dir(d)
        .env("PATH", path)
        .output()
        .unwrap();
    let log = std::fs::read_to_string(d.join("log")).unwrap_or_default();
    std::fs::remove_file(d.join("log")).ok();
    (o.status.code().unwrap_or(-1), log)
}

#[test]
fn scripts_rulka_builds_the_kept_build_with_its_features_and_its_pieces() {
    let d = stand_in_checkout();
    for (flag, features, gpu_setup) in [
        ("--build=cpu", None, false),
        ("--build=cuda", Some("--features rulka/cuda,rulka-torch/cuda"), true),
        (
            "--build=tensorrt",
            Some("--features rulka/cuda,rulka/tensorrt,rulka-torch/cuda,rulka-torch/tensorrt"),
            true,
        ),
    ] {
        // The flag, then a call without it: the same build both times.
        for args in [vec![flag, "--version"], vec!["--version"]] {
            let (code, log) = run_scripts_rulka(d.path(), &args);
            assert_eq!(code, 0, "{args:?}: {log}");
            let cargo = log.lines().find(|l| l.starts_with("cargo build")).unwrap_or_default();
            match features {
                Some(f) => assert!(cargo.ends_with(f), "{args:?}: {cargo}"),
                None => assert!(!cargo.contains("--features"), "{args:?}: {cargo}"),
            }
            assert_eq!(log.contains("setup --gpu"), gpu_setup, "{args:?}: the GPU pieces: {log}");
            assert!(
                log.lines().next().is_some_and(|l| l == "setup "),
                "the plain setup runs first: {log}"
            );
        }
    }
}
