//! `rulka gpu check` as a user runs it on a machine without a GPU: the
//! plain build names the feature it lacks; the GPU build (scripts/test
//! keeps a copy in target/debug/gpu-build/) finds the GPU build of ONNX
//! Runtime and the CUDA libraries `scripts/setup.sh --gpu` installed, and
//! names the driver and TensorRT as missing with their fixes; pointed at
//! the CPU build of ONNX Runtime it says so, in ONNX Runtime's own words
//! too. Every run is the real binary on the real libraries.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// (exit code, the JSON report) of `bin gpu check ARGS --json -`.
fn check(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, serde_json::Value) {
    let o = Command::new(bin)
        .args(["gpu", "check"])
        .args(args)
        .args(["--json", "-"])
        .envs(env.iter().copied())
        .env_remove("ORT_DYLIB_PATH")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code(), doc)
}

fn provider<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["providers"].as_array().unwrap().iter().find(|p| p["provider"] == name).unwrap()
}

/// Every (what, fix) of a provider's verdict, as one text each.
fn missing(p: &serde_json::Value) -> Vec<(String, String)> {
    p["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m[0].as_str().unwrap().to_string(), m[1].as_str().unwrap().to_string()))
        .collect()
}

fn has_gpu() -> bool {
    Command::new("nvidia-smi").arg("-L").output().is_ok_and(|o| o.status.success())
}

#[test]
fn the_plain_build_names_the_features_it_lacks_and_the_command_that_adds_them() {
    let (code, doc) = check(Path::new(env!("CARGO_BIN_EXE_rulka")), &["--provider", "all"], &[]);
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(doc["build"], "cpu");
    // (Which rulka-torch lies beside it depends on what was built last.)
    assert!(doc["learner"]["build"].is_string(), "rulka-torch gpu-info answered: {doc}");
    for (name, feature) in [("CUDA", "cuda"), ("TensorRT", "tensorrt")] {
        let p = provider(&doc, name);
        assert_eq!(p["works"], false);
        let m = missing(p);
        assert!(
            m[0].0.contains(&format!("without the `{feature}` cargo feature"))
                && m[0].1.starts_with(&format!("scripts/rulka --build={feature}")),
            "the build comes first: {m:?}"
        );
    }
    // A config that allows the CPU in place of the GPU does not make the
    // check pass: it judges the provider, never the fallback.
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("fb.yaml");
    std::fs::write(&cfg, "inference: {provider: cuda, fallback: cpu}\n").unwrap();
    let (code, doc) = check(
        Path::new(env!("CARGO_BIN_EXE_rulka")),
        &["--provider", "all", "--config", cfg.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, Some(1), "{doc}");
    for name in ["CUDA", "TensorRT"] {
        assert_eq!(provider(&doc, name)["works"], false, "{name} under fallback: cpu: {doc}");
    }
    // The human report says the same, with the fixes.
    let o = Command::new(env!("CARGO_BIN_EXE_rulka")).args(["gpu", "check"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("provider CUDA: does not work")
            && out.contains("fix: scripts/rulka --build=cuda"),
        "{out}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("CUDA cannot run here"));
}

/// The GPU build scripts/test keeps, if this run has one.
fn gpu_build() -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_BIN_EXE_rulka")).with_file_name("gpu-build").join("rulka");
    if bin.is_file() {
        return Some(bin);
    }
    assert!(
        std::env::var("RULKA_REQUIRE_GPU_BUILD").is_err(),
        "{} missing: scripts/test keeps the --features cuda,tensorrt build there",
        bin.display()
    );
    eprintln!("skipped: no {} (scripts/test makes it)", bin.display());
    None
}

#[test]
fn the_gpu_build_finds_the_installed_pieces_and_names_the_driver_and_tensorrt() {
    let Some(bin) = gpu_build() else { return };
    let gpu_ort = repo(".onnxruntime-gpu/libonnxruntime.so.1.31.1");
    if !gpu_ort.is_file() {
        assert!(
            std::env::var("RULKA_REQUIRE_GPU_BUILD").is_err(),
            "scripts/test installs {}",
            gpu_ort.display()
        );
        return;
    }
    let (code, doc) = check(&bin, &["--provider", "all"], &[]);
    assert_eq!(doc["build"], "cuda,tensorrt");
    assert_eq!(doc["learner"]["libtorch_cuda_linked"], true, "{doc}");
    assert_eq!(doc["onnxruntime_gpu_build"], true, "{doc}");
    assert!(
        doc["onnxruntime"].as_str().unwrap().ends_with(".onnxruntime-gpu/libonnxruntime.so.1.31.1"),
        "{doc}"
    );
    let found = |name: &str| {
        doc["pieces"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap()["found"]
            .clone()
    };
    for lib in [
        "libcublasLt.so.13",
        "libnvrtc.so.13",
        "libcudnn_cnn.so.9",
        "libonnxruntime_providers_cuda.so",
    ] {
        assert!(found(lib).as_str().is_some_and(|p| p.ends_with(lib)), "{lib}: {doc}");
    }
    if has_gpu() {
        return; // a machine with a driver: scripts/gpu-check's to judge
    }
    assert_eq!(code, Some(1));
    let cuda = provider(&doc, "CUDA");
    let m = missing(cuda);
    assert_eq!(m.len(), 1, "only the driver is missing for CUDA: {m:?}");
    assert!(m[0].0.contains("libcuda.so.1") && m[0].1.contains("NVIDIA driver"), "{m:?}");
    // ONNX Runtime's own words, read: the provider's library needs the driver's.
    let e = cuda["error"].as_str().unwrap();
    assert!(
        e.contains("libonnxruntime_providers_cuda.so")
            && e.contains("(NVIDIA driver) does not load"),
        "{e}"
    );
    let trt = missing(provider(&doc, "TensorRT"));
    assert!(
        trt.iter().any(|(what, fix)| what.contains("libnvinfer.so.10")
            && fix.contains("not on the package registries")),
        "{trt:?}"
    );
}

#[test]
fn the_gpu_build_on_the_cpu_build_of_onnx_runtime_says_which_it_got() {
    let Some(bin) = gpu_build() else { return };
    let cpu_ort = repo(".onnxruntime/libonnxruntime.so");
    let cpu_ort = cpu_ort.to_str().unwrap();
    let (code, doc) = check(&bin, &[], &[("ORT_DYLIB_PATH", cpu_ort)]);
    assert_eq!(code, Some(1));
    assert_eq!(doc["onnxruntime_gpu_build"], false);
    let cuda = provider(&doc, "CUDA");
    let m = missing(cuda);
    assert!(
        m.iter().any(|(what, fix)| what.starts_with(&format!("{cpu_ort} is the CPU build"))
            && fix == "scripts/setup.sh --gpu"),
        "{m:?}"
    );
    let e = cuda["error"].as_str().unwrap();
    assert!(e.contains("not enabled in this build") && e.contains("scripts/setup.sh --gpu"), "{e}");
}

/// `scripts/setup.sh ARGS` with every download pointed at a closed port:
/// (exit code, stderr).
fn setup_offline(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(repo("scripts/setup.sh"))
        .args(args)
        .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
        .env("PIP_RETRIES", "0")
        .env("PIP_TIMEOUT", "2")
        .env_remove("RULKA_NO_GPU")
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn a_second_gpu_install_finds_everything_and_downloads_nothing() {
    if !repo(".onnxruntime-gpu/.rulka-ort-gpu-1.31.1").is_file() {
        assert!(
            std::env::var("RULKA_REQUIRE_GPU_BUILD").is_err(),
            "scripts/test runs scripts/setup.sh --gpu"
        );
        return;
    }
    // No index can be reached: a run that tried to download would fail.
    let (code, err) = setup_offline(&["--gpu"]);
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "ONNX Runtime 1.31.1 GPU build present (CUDA and TensorRT providers)",
        "CUDA 13 and cuDNN 9 libraries present (.libtorch/nvidia/)",
    ] {
        assert!(err.contains(line), "{line}: {err}");
    }
    assert!(!err.contains("fetching"), "{err}");
}

#[test]
fn a_tensorrt_folder_without_tensorrt_10_is_refused_naming_the_library() {
    if !repo(".onnxruntime-gpu/.rulka-ort-gpu-1.31.1").is_file() {
        return; // the refusal comes after the GPU pieces, which would be fetched first
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("libnvinfer.so.11"), b"").unwrap();
    let (code, err) = setup_offline(&["--tensorrt", d.path().to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("no libnvinfer.so.10 there") && err.contains(d.path().to_str().unwrap()),
        "{err}"
    );
    assert!(!repo(".tensorrt.partial").exists());
    // The other spelling of the flag, on this machine without a GPU too.
    let (code, err) = setup_offline(&[&format!("--tensorrt={}", d.path().display())]);
    assert_eq!(code, Some(2), "--tensorrt=DIR: {err}");
    assert!(err.contains("no libnvinfer.so.10 there"), "{err}");
    let (code, err) = setup_offline(&["--tensorrt"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--tensorrt needs a directory"), "{err}");
}

#[test]
fn the_gpu_build_with_fallback_cpu_drives_every_provider_on_the_cpu_exactly() {
    let Some(bin) = gpu_build() else { return };
    if has_gpu() {
        return; // there the providers run: scripts/gpu-check compares them
    }
    let d = tempfile::tempdir().unwrap();
    let plain = Path::new(env!("CARGO_BIN_EXE_rulka"));
    let yaml = |inference: &str| {
        format!(
            "nn: {{image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}}\n\
             environment: {{n_zone_centers_in_inputs: 6, n_prev_actions_in_inputs: 2, \
               cutoff_rollout_if_race_not_finished_within_duration_ms: 20000, sim: {{track: easy, track_seeds: [0]}}}}\n\
             inference: {{intra_op_threads: 1{inference}}}\n"
        )
    };
    let cfg = d.path().join("cpu.yaml");
    std::fs::write(&cfg, yaml("")).unwrap();
    let (ck, model) = (d.path().join("w.safetensors"), d.path().join("m.onnx"));
    for args in [
        vec!["init", "--config", cfg.to_str().unwrap(), "--seed", "3", "-o", ck.to_str().unwrap()],
        vec![
            "export",
            "--config",
            cfg.to_str().unwrap(),
            "--checkpoint",
            ck.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
        ],
    ] {
        let o = Command::new(plain).args(&args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let episodes = |bin: &Path, name: &str, inference: &str| {
        let c = d.path().join(format!("{name}.yaml"));
        std::fs::write(&c, yaml(inference)).unwrap();
        let out = d.path().join(format!("{name}.json"));
        let o = Command::new(bin)
            .args(["eval", "--model", model.to_str().unwrap(), "--config", c.to_str().unwrap()])
            .args([
                "--seeds",
                "100..103",
                "--sample",
                "--workers",
                "1",
                "--json",
                out.to_str().unwrap(),
            ])
            .env_remove("ORT_DYLIB_PATH")
            .env("XDG_CACHE_HOME", d.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        (doc["models"][0]["episodes"].clone(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (on_cpu, _) = episodes(plain, "cpu", "");
    assert_eq!(on_cpu.as_array().map(Vec::len), Some(3));
    for provider in ["cuda", "tensorrt"] {
        let (got, err) =
            episodes(&bin, provider, &format!(", provider: {provider}, fallback: cpu"));
        assert_eq!(got, on_cpu, "{provider} with fallback: cpu drove otherwise than the CPU");
        assert!(
            err.contains("falling back to CPU as configured"),
            "{provider}: the fallback is said: {err}"
        );
        // And without the fallback, the same run is refused, naming why.
        let c = d.path().join("strict.yaml");
        std::fs::write(&c, yaml(&format!(", provider: {provider}"))).unwrap();
        let o = Command::new(&bin)
            .args([
                "eval",
                "--model",
                model.to_str().unwrap(),
                "--config",
                c.to_str().unwrap(),
                "--seeds",
                "100..101",
            ])
            .env_remove("ORT_DYLIB_PATH")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{provider} without a fallback");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("is unavailable") && e.contains("fix:"), "{provider}: {e}");
    }
    // A machine without TensorRT gets no engine cache folder from trying.
    assert!(
        !d.path().join("rulka").exists(),
        "an engine cache was made for a provider that never registered"
    );
}

/// A checkout in a temporary folder with scripts/setup.sh and the marker
/// files of libtorch, ONNX Runtime's CPU build and nats-server (so setup.sh
/// installs none of them), and each file of `extra` (written empty).
fn checkout(extra: &[&str]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    std::fs::create_dir_all(r.join("scripts")).unwrap();
    std::fs::copy(repo("scripts/setup.sh"), r.join("scripts/setup.sh")).unwrap();
    for f in [
        ".libtorch/.rulka-torch-2.11.0",
        ".libtorch/torch/lib/libtorch_cpu.so",
        ".onnxruntime/.rulka-ort-1.31.1",
        ".onnxruntime/libonnxruntime.so.1.31.1",
        ".nats/.rulka-nats-2.15.1",
    ]
    .iter()
    .chain(extra)
    {
        std::fs::create_dir_all(r.join(f).parent().unwrap()).unwrap();
        std::fs::write(r.join(f), b"").unwrap();
    }
    executable(&r.join(".nats/nats-server"), "#!/bin/sh\n");
    d
}

fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Writes a stand-in wheel of PyPI package `name==version` into `dir`,
/// each of `members` (paths inside the wheel) holding its own file name.
fn wheel(dir: &Path, name: &str, version: &str, members: &[String]) {
    std::fs::create_dir_all(dir).unwrap();
    let o = Command::new("python3")
        .arg("-c")
        .arg(
            r#"import os, sys, zipfile
out, name, version, members = sys.argv[1], sys.argv[2], sys.argv[3], [m for m in sys.argv[4].split(",") if m]
norm = name.replace("-", "_")
di = f"{norm}-{version}.dist-info"
with zipfile.ZipFile(f"{out}/{norm}-{version}-py3-none-any.whl", "w") as z:
    for m in members:
        z.writestr(m, os.path.basename(m))
    z.writestr(di + "/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    z.writestr(di + "/WHEEL", "Wheel-Version: 1.0\nGenerator: rulka-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(di + "/RECORD", "")
"#,
        )
        .arg(dir)
        .arg(name)
        .arg(version)
        .arg(members.join(","))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A [`checkout`] with the CUDA libraries' marker, and a folder holding a
/// stand-in `onnxruntime-gpu==1.31.1` wheel with the libraries `with`.
fn sandbox(with: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let d = checkout(&[".libtorch/.rulka-cuda-libs-2.11.0"]);
    let wheels = d.path().join("wheels");
    let members: Vec<String> = with.iter().map(|m| format!("onnxruntime/capi/{m}")).collect();
    wheel(&wheels, "onnxruntime-gpu", "1.31.1", &members);
    (d, wheels)
}

/// `setup.sh ARGS` of the checkout at `root`, offline: from `wheels` when
/// given, else with every index unreachable; run from `cwd` (default the
/// checkout) with `path` first on PATH.
fn setup_in(
    root: &Path,
    args: &[&str],
    wheels: Option<&Path>,
    cwd: Option<&Path>,
    path: Option<&Path>,
) -> (Option<i32>, String) {
    let mut c = Command::new(root.join("scripts/setup.sh"));
    c.args(args)
        .current_dir(cwd.unwrap_or(root))
        .env("PIP_RETRIES", "0")
        .env("PIP_TIMEOUT", "2")
        .env_remove("RULKA_NO_GPU");
    match wheels {
        Some(w) => c.env("PIP_NO_INDEX", "1").env("PIP_FIND_LINKS", w),
        None => c.env("PIP_INDEX_URL", "http://127.0.0.1:9/simple"),
    };
    if let Some(p) = path {
        let rest = std::env::var_os("PATH").unwrap_or_default();
        let mut all = vec![p.to_path_buf()];
        all.extend(std::env::split_paths(&rest));
        c.env("PATH", std::env::join_paths(all).unwrap());
    }
    let o = c.output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `setup.sh --gpu` of the sandbox, offline (see [`setup_in`]).
fn sandbox_setup(root: &Path, wheels: Option<&Path>) -> (Option<i32>, String) {
    setup_in(root, &["--gpu"], wheels, None, None)
}

const GPU_LIBS: [&str; 4] = [
    "libonnxruntime.so.1.31.1",
    "libonnxruntime_providers_shared.so",
    "libonnxruntime_providers_cuda.so",
    "libonnxruntime_providers_tensorrt.so",
];

#[test]
fn a_fresh_gpu_install_is_made_whole_found_again_and_a_failed_one_keeps_the_old() {
    let (d, wheels) = sandbox(&GPU_LIBS);
    let r = d.path();
    let (code, err) = sandbox_setup(r, Some(&wheels));
    assert_eq!(code, Some(0), "{err}");
    let gpu = r.join(".onnxruntime-gpu");
    for lib in GPU_LIBS {
        assert_eq!(std::fs::read_to_string(gpu.join(lib)).unwrap(), lib, "{lib} installed");
    }
    assert_eq!(
        std::fs::read_link(gpu.join("libonnxruntime.so")).unwrap(),
        Path::new("libonnxruntime.so.1.31.1")
    );
    assert!(!r.join(".onnxruntime-gpu.partial").exists());
    // Found again by its own marker: a second run downloads nothing.
    let (code, err) = sandbox_setup(r, None);
    assert_eq!(code, Some(0), "the second install tried to download: {err}");
    assert!(err.contains("ONNX Runtime 1.31.1 GPU build present"), "{err}");

    // A wheel that lacks a library fails the install and leaves what was there.
    std::fs::remove_file(gpu.join(".rulka-ort-gpu-1.31.1")).unwrap();
    let (_other, partial_wheels) = sandbox(&GPU_LIBS[..3]);
    let (code, err) = sandbox_setup(r, Some(&partial_wheels));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("libonnxruntime_providers_tensorrt.so"),
        "the missing member is named: {err}"
    );
    for lib in GPU_LIBS {
        assert!(gpu.join(lib).is_file(), "{lib} lost by a failed install");
    }
}

/// The (package, version) of every wheel setup.sh takes CUDA libraries
/// from, as its `cuda_libs` lists them.
fn cuda_wheels() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo("scripts/setup.sh")).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find("\"nvidia-") else { continue };
        let spec = line[at + 1..].split_whitespace().next().unwrap();
        let (name, version) = spec.split_once("==").unwrap();
        out.push((name.to_string(), version.to_string()));
    }
    assert!(out.len() >= 10, "{out:?}");
    out
}

/// Every CUDA and cuDNN library a GPU provider loads (what `rulka gpu
/// check` looks for), but libcudart, which comes with torch's own install.
fn provider_cuda_libs() -> Vec<&'static str> {
    rulka_inference::native::CUDA_LIBS
        .iter()
        .chain(rulka_inference::native::CUDNN_LIBS)
        .copied()
        .filter(|l| *l != "libcudart.so.13")
        .collect()
}

#[test]
fn setup_gpu_installs_every_cuda_library_the_providers_load_after_the_test_setup_and_a_failed_download(
) {
    // What the GPU build of ONNX Runtime needs is there; the CUDA libraries
    // are as the test setup leaves them: cuDNN's front library alone.
    let d = checkout(&[
        ".onnxruntime-gpu/.rulka-ort-gpu-1.31.1",
        ".onnxruntime-gpu/libonnxruntime_providers_cuda.so",
        ".libtorch/nvidia/cu13/lib/libcudart.so.13",
    ]);
    let r = d.path();
    let lib = |dir: &str, name: &str| r.join(".libtorch/nvidia").join(dir).join("lib").join(name);
    std::fs::create_dir_all(lib("cudnn", "")).unwrap();
    std::fs::write(lib("cudnn", "libcudnn.so.9"), b"from the test setup").unwrap();
    // Stand-in wheels holding every library under every folder name (setup
    // takes the members it lists; the providers' list judges the result).
    let mut names: Vec<String> = provider_cuda_libs().iter().map(|s| s.to_string()).collect();
    for l in std::fs::read_to_string(repo("scripts/setup.sh")).unwrap().split_whitespace() {
        let l = l.trim_matches(|c| c == '"' || c == ')' || c == '(');
        if l.starts_with("lib") && l.contains(".so") && !names.iter().any(|n| n == l) {
            names.push(l.to_string());
        }
    }
    let members: Vec<String> = names.iter().map(|n| format!("nvidia/any/lib/{n}")).collect();
    let (all, short) = (r.join("wheels-all"), r.join("wheels-short"));
    for (name, version) in cuda_wheels() {
        wheel(&all, &name, &version, &members);
        if name != "nvidia-cuda-nvrtc" {
            wheel(&short, &name, &version, &members);
        }
    }
    // A download that fails part way (NVRTC's wheel cannot be had) fails
    // the install and leaves no marker to say it is done.
    let (code, err) = sandbox_setup(r, Some(&short));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("nvidia-cuda-nvrtc"), "the failed wheel is named: {err}");
    assert!(!r.join(".libtorch/.rulka-cuda-libs-2.11.0").exists(), "marked done after a failure");
    // The next run fetches what is missing and is then whole.
    let (code, err) = sandbox_setup(r, Some(&all));
    assert_eq!(code, Some(0), "{err}");
    for name in provider_cuda_libs() {
        let dir = if name.starts_with("libcudnn") { "cudnn" } else { "cu13" };
        assert!(lib(dir, name).is_file(), "{name} missing after setup --gpu: {err}");
    }
    assert_eq!(
        std::fs::read_to_string(lib("cudnn", "libcudnn_ops.so.9")).unwrap(),
        "libcudnn_ops.so.9",
        "cuDNN's engines come with its front library from its wheel"
    );
    assert!(r.join(".libtorch/.rulka-cuda-libs-2.11.0").is_file());
    // And a third run finds it all, with no index to reach.
    let (code, err) = sandbox_setup(r, None);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("CUDA 13 and cuDNN 9 libraries present") && !err.contains("fetching"),
        "{err}"
    );
}

#[test]
fn the_gpu_pieces_come_by_default_only_where_nvidia_smi_lists_a_gpu() {
    let (d, wheels) = sandbox(&GPU_LIBS);
    let r = d.path();
    let (none, one) = (r.join("smi-none"), r.join("smi-one"));
    // What nvidia-smi -L says with the driver's tools but no GPU (a
    // container without the device, a detached card), and with one.
    executable(&none.join("nvidia-smi"), "#!/bin/sh\necho 'No devices were found'\nexit 6\n");
    executable(
        &one.join("nvidia-smi"),
        "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0c1d2e3f-0000-1111-2222-333344445555)'\n",
    );
    let (code, err) = setup_in(r, &[], Some(&wheels), None, Some(&none));
    assert_eq!(code, Some(0), "{err}");
    assert!(!r.join(".onnxruntime-gpu").exists(), "GPU pieces fetched with no GPU: {err}");
    assert!(!err.contains("GPU build"), "{err}");
    let (code, err) = setup_in(r, &[], Some(&wheels), None, Some(&one));
    assert_eq!(code, Some(0), "{err}");
    assert!(r.join(".onnxruntime-gpu/libonnxruntime_providers_cuda.so").is_file(), "{err}");
    // --no-gpu wins over a listed GPU, and says nothing of GPU pieces.
    std::fs::remove_dir_all(r.join(".onnxruntime-gpu")).unwrap();
    let (code, err) = setup_in(r, &["--no-gpu"], None, None, Some(&one));
    assert_eq!(code, Some(0), "{err}");
    assert!(!r.join(".onnxruntime-gpu").exists());
}

#[test]
fn a_tensorrt_folder_needs_both_libraries_and_may_be_given_from_anywhere() {
    let d = checkout(&[
        ".onnxruntime-gpu/.rulka-ort-gpu-1.31.1",
        ".onnxruntime-gpu/libonnxruntime_providers_cuda.so",
        ".libtorch/.rulka-cuda-libs-2.11.0",
    ]);
    let r = d.path();
    let both = ["libnvinfer.so.10", "libnvonnxparser.so.10"];
    for have in [&[][..], &both[..1], &both[1..]] {
        let trt = tempfile::tempdir().unwrap();
        for so in have {
            std::fs::write(trt.path().join(so), b"").unwrap();
        }
        let (code, err) =
            setup_in(r, &["--tensorrt", trt.path().to_str().unwrap()], None, None, None);
        assert_eq!(code, Some(2), "{have:?}: {err}");
        let lacking = both.iter().find(|so| !have.contains(so)).unwrap();
        assert!(err.contains(&format!("no {lacking} there")), "{have:?}: {err}");
        assert!(!r.join(".tensorrt").exists(), "{have:?} was linked");
    }
    // A relative folder is taken from where setup.sh runs, not from the
    // checkout it cds into.
    let elsewhere = tempfile::tempdir().unwrap();
    let lib_dir = elsewhere.path().join("TensorRT-10.13/lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    for so in both {
        std::fs::write(lib_dir.join(so), so).unwrap();
    }
    let (code, err) =
        setup_in(r, &["--tensorrt", "TensorRT-10.13/lib"], None, Some(elsewhere.path()), None);
    assert_eq!(code, Some(0), "{err}");
    let link = std::fs::read_link(r.join(".tensorrt/lib")).unwrap();
    assert!(link.is_absolute(), "{}", link.display());
    assert_eq!(link.canonicalize().unwrap(), lib_dir.canonicalize().unwrap());
    assert_eq!(
        std::fs::read_to_string(r.join(".tensorrt/lib/libnvinfer.so.10")).unwrap(),
        "libnvinfer.so.10"
    );
    // A folder that is not there is named as such.
    let (code, err) = setup_in(r, &["--tensorrt=no/such/dir"], None, Some(elsewhere.path()), None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no/such/dir: no such folder"), "{err}");
}

#[test]
fn each_piece_gpu_check_carries_fits_the_carry_beside_the_working_tree() {
    let o = Command::new(repo("scripts/gpu-check")).arg("sizes").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let field = |k: &str| -> u64 {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k}: {text}"))
            .parse()
            .unwrap()
    };
    // The working tree as the device tool carries it: every file git does
    // not ignore, counted here on its own.
    let ls = Command::new("git")
        .args(["ls-files", "-z", "-co", "--exclude-standard"])
        .current_dir(repo(""))
        .output()
        .unwrap();
    let tree: u64 = ls
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .filter_map(|p| std::fs::metadata(repo(std::str::from_utf8(p).unwrap())).ok())
        .map(|m| m.len())
        .sum();
    let (limit, piece) = (field("limit_mib") << 20, field("piece_mib") << 20);
    assert_eq!(limit, 64 << 20, "the device tool's carry");
    assert!(field("tree_bytes").abs_diff(tree) < 1 << 20, "{text} against {tree}");
    assert!(piece + tree <= limit, "a {piece}-byte piece and the {tree}-byte tree: {text}");
    assert!(piece >= 16 << 20, "pieces this small make many commands: {text}");
}
