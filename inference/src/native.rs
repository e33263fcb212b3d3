//! The native pieces the GPU execution providers need, where they are, and
//! what is missing: one owner of the rule "which pieces does provider X
//! need, and which command installs each" for `build_session`'s errors,
//! `rulka gpu check` and the benchmark's absent rows.
//!
//! The pieces come from three places: `scripts/setup.sh --gpu` (the GPU
//! build of ONNX Runtime in `.onnxruntime-gpu/`, the CUDA 13 and cuDNN 9
//! libraries in `.libtorch/nvidia/`), `scripts/setup.sh --tensorrt DIR` (a
//! TensorRT 10 the user installed, linked as `.tensorrt/lib`), and the
//! system (the NVIDIA driver's `libcuda.so.1`, which nothing but the
//! driver's own installer provides). `RULKA_CUDA_LIBS` (a `:`-separated
//! list of folders) is searched first, e.g. a PyTorch install's
//! `nvidia/*/lib` folders on a machine rulka did not set up.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rulka_config::Provider;

/// Environment variable: extra folders (`:`-separated, `;` on Windows)
/// searched first for the CUDA, cuDNN and TensorRT libraries.
pub const CUDA_LIBS_ENV: &str = "RULKA_CUDA_LIBS";

/// The command that installs the GPU build of ONNX Runtime and the CUDA
/// libraries.
pub const FIX_SETUP_GPU: &str = "scripts/setup.sh --gpu";
/// What installs TensorRT (it is not on the package registries).
pub const FIX_TENSORRT: &str = "install TensorRT 10 for CUDA 13 from NVIDIA (it is not on the package registries), then scripts/setup.sh --tensorrt /path/to/TensorRT-10/lib";
/// What installs the driver (the one piece rulka cannot install).
pub const FIX_DRIVER: &str =
    "install the NVIDIA driver (580 or newer, for CUDA 13); rulka cannot install it";

/// `--version` of rulka's binaries: the version and the build's features
/// (`scripts/rulka` reads the latter to keep a binary's build).
pub const VERSION: &str = match (cfg!(feature = "cuda"), cfg!(feature = "tensorrt")) {
    (true, true) => concat!(env!("CARGO_PKG_VERSION"), " (build: cuda,tensorrt)"),
    (true, false) => concat!(env!("CARGO_PKG_VERSION"), " (build: cuda)"),
    (false, true) => concat!(env!("CARGO_PKG_VERSION"), " (build: tensorrt)"),
    (false, false) => concat!(env!("CARGO_PKG_VERSION"), " (build: cpu)"),
};

/// The cargo features this binary was built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildFeatures {
    /// ONNX Runtime's CUDA execution provider compiled in.
    pub cuda: bool,
    /// ONNX Runtime's TensorRT execution provider compiled in.
    pub tensorrt: bool,
}

impl BuildFeatures {
    /// The features of this build of `rulka-inference`.
    pub const THIS: BuildFeatures =
        BuildFeatures { cuda: cfg!(feature = "cuda"), tensorrt: cfg!(feature = "tensorrt") };

    /// `cpu`, `cuda`, `tensorrt` or `cuda,tensorrt` (what `--version` prints
    /// and `scripts/rulka` keeps).
    pub fn label(self) -> &'static str {
        match (self.cuda, self.tensorrt) {
            (true, true) => "cuda,tensorrt",
            (true, false) => "cuda",
            (false, true) => "tensorrt",
            (false, false) => "cpu",
        }
    }
}

/// What a piece is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// The GPU build of ONNX Runtime and its provider libraries.
    OrtGpu,
    /// The CUDA 13 runtime libraries.
    Cuda,
    /// cuDNN 9.
    Cudnn,
    /// TensorRT 10.
    Tensorrt,
    /// The NVIDIA driver's library.
    Driver,
}

impl Group {
    /// The libraries of a group `preload` loads (in load order); empty for
    /// the ONNX Runtime GPU build and the driver, which are not preloaded.
    pub fn libraries(self) -> &'static [&'static str] {
        match self {
            Group::Cuda => CUDA_LIBS,
            Group::Cudnn => CUDNN_LIBS,
            Group::Tensorrt => TENSORRT_LIBS,
            Group::OrtGpu | Group::Driver => &[],
        }
    }

    /// The command (or step) that provides this group's pieces.
    pub fn fix(self) -> &'static str {
        match self {
            Group::OrtGpu | Group::Cuda | Group::Cudnn => FIX_SETUP_GPU,
            Group::Tensorrt => FIX_TENSORRT,
            Group::Driver => FIX_DRIVER,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Group::OrtGpu => "ONNX Runtime GPU build",
            Group::Cuda => "CUDA 13",
            Group::Cudnn => "cuDNN 9",
            Group::Tensorrt => "TensorRT 10",
            Group::Driver => "NVIDIA driver",
        }
    }
}

/// The CUDA runtime libraries the CUDA provider links or opens, in load order.
pub const CUDA_LIBS: &[&str] = &[
    "libcudart.so.13",
    "libcublasLt.so.13",
    "libcublas.so.13",
    "libcurand.so.10",
    "libcufft.so.12",
    "libnvrtc.so.13",
];
/// cuDNN 9: the front library and the engines it opens by name.
pub const CUDNN_LIBS: &[&str] = &[
    "libcudnn.so.9",
    "libcudnn_graph.so.9",
    "libcudnn_ops.so.9",
    "libcudnn_heuristic.so.9",
    "libcudnn_adv.so.9",
    "libcudnn_cnn.so.9",
    "libcudnn_engines_precompiled.so.9",
    "libcudnn_engines_runtime_compiled.so.9",
];
/// TensorRT 10: the libraries ONNX Runtime's TensorRT provider links.
pub const TENSORRT_LIBS: &[&str] = &["libnvinfer.so.10", "libnvonnxparser.so.10"];
/// The provider libraries beside the GPU build of ONNX Runtime.
pub const ORT_GPU_LIBS: &[&str] = &[
    "libonnxruntime_providers_shared.so",
    "libonnxruntime_providers_cuda.so",
    "libonnxruntime_providers_tensorrt.so",
];
/// The driver's library.
pub const DRIVER_LIB: &str = "libcuda.so.1";

/// One library a provider needs and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// File name, e.g. `libcublas.so.13`.
    pub name: &'static str,
    /// What it is part of.
    pub group: Group,
    /// Where it is (a file), or `None` when no searched folder has it.
    pub found: Option<PathBuf>,
}

/// Everything known, without loading anything, about the GPU pieces of
/// this machine and this build.
#[derive(Debug, Clone)]
pub struct GpuFacts {
    /// The features this binary was built with.
    pub built: BuildFeatures,
    /// The ONNX Runtime library this process uses (or would use).
    pub ort_library: Option<PathBuf>,
    /// Whether that library is the GPU build (its provider libraries beside it).
    pub ort_is_gpu_build: bool,
    /// Whether the driver's `libcuda.so.1` loads (`Err` says why not).
    pub driver: Result<(), String>,
    /// The GPUs `nvidia-smi -L` lists (empty without a driver).
    pub gpus: Vec<String>,
    /// Every library of the CUDA, cuDNN, TensorRT and ONNX Runtime GPU groups.
    pub pieces: Vec<Piece>,
}

/// One missing piece: what, and the command or step that provides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// What is missing, naming the file or the feature.
    pub what: String,
    /// The command that fixes it.
    pub fix: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (fix: {})", self.what, self.fix)
    }
}

/// The folders searched for the CUDA, cuDNN and TensorRT libraries, in
/// order: `RULKA_CUDA_LIBS`, beside the executable (and its `lib/`), then
/// the workspace's `.libtorch/nvidia/cu13/lib`, `.libtorch/nvidia/cudnn/lib`
/// and `.tensorrt/lib`.
pub fn library_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(v) = std::env::var_os(CUDA_LIBS_ENV) {
        dirs.extend(std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()));
    }
    if let Some(exe_dir) =
        std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf))
    {
        dirs.push(exe_dir.join("lib"));
        dirs.push(exe_dir);
    }
    for root in crate::runtime::workspace_roots() {
        dirs.push(root.join(".libtorch/nvidia/cu13/lib"));
        dirs.push(root.join(".libtorch/nvidia/cudnn/lib"));
        dirs.push(root.join(".tensorrt/lib"));
    }
    dirs
}

/// The first of `dirs` holding `name` (the path made absolute, with no
/// `..` in it).
pub fn find_in(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    let p = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())?;
    let dir = p.parent()?.canonicalize().ok()?;
    Some(dir.join(name))
}

/// A loader error with its cause (libloading's own says only "dlopen
/// failed"; the cause names the file and why).
fn load_error(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s = format!("{s}: {c}");
        cause = c.source();
    }
    s
}

/// Whether the ONNX Runtime library at `path` is the GPU build: its
/// provider libraries lie beside it (ONNX Runtime loads them from there).
pub fn is_gpu_build(path: &Path) -> bool {
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join("libonnxruntime_providers_shared.so").is_file()
        && dir.join("libonnxruntime_providers_cuda.so").is_file()
}

/// Gathers [`GpuFacts`] (reads folders, runs `nvidia-smi -L`, tries to load
/// `libcuda.so.1`; loads no ONNX Runtime).
pub fn gpu_facts() -> GpuFacts {
    let dirs = library_dirs();
    let ort_library = crate::runtime::loaded_path()
        .map(Path::to_path_buf)
        .or_else(|| crate::locate_runtime(None).ok());
    let ort_dir = ort_library.as_deref().and_then(Path::parent).map(Path::to_path_buf);
    let mut pieces = Vec::new();
    for name in ORT_GPU_LIBS {
        let found = ort_dir.as_ref().map(|d| d.join(name)).filter(|p| p.is_file());
        pieces.push(Piece { name, group: Group::OrtGpu, found });
    }
    for group in [Group::Cuda, Group::Cudnn, Group::Tensorrt] {
        for name in group.libraries() {
            pieces.push(Piece { name, group, found: find_in(&dirs, name) });
        }
    }
    GpuFacts {
        built: BuildFeatures::THIS,
        ort_is_gpu_build: ort_library.as_deref().is_some_and(is_gpu_build),
        ort_library,
        driver: driver_loads(),
        gpus: nvidia_smi_gpus(),
        pieces,
    }
}

fn driver_loads() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT.get_or_init(|| ort::util::preload_dylib(DRIVER_LIB).map_err(|e| load_error(&e))).clone()
}

fn nvidia_smi_gpus() -> Vec<String> {
    match std::process::Command::new("nvidia-smi").arg("-L").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("GPU "))
            .map(|l| l.trim().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// Every piece `provider` needs that `facts` lacks, in the order they must
/// be fixed (the build, ONNX Runtime's GPU build, the libraries, the
/// driver, a GPU). Empty for [`Provider::Cpu`], and when nothing is known
/// to be missing.
pub fn missing_for(provider: Provider, facts: &GpuFacts) -> Vec<Missing> {
    let mut out = Vec::new();
    let (feature, trt) = match provider {
        Provider::Cpu => return out,
        Provider::Cuda => (facts.built.cuda, false),
        Provider::Tensorrt => (facts.built.tensorrt, true),
    };
    let name = provider_name(provider);
    if !feature {
        let (f, features) = if trt {
            ("tensorrt", "rulka/cuda,rulka/tensorrt,rulka-torch/cuda,rulka-torch/tensorrt")
        } else {
            ("cuda", "rulka/cuda,rulka-torch/cuda")
        };
        out.push(Missing {
            what: format!("this rulka was built without the `{f}` cargo feature ({name} provider)"),
            fix: format!("scripts/rulka --build={f} (or cargo build --release -p rulka -p rulka-torch --features {features})"),
        });
    }
    match &facts.ort_library {
        Some(p) if !facts.ort_is_gpu_build => out.push(Missing {
            what: format!(
                "{} is the CPU build of ONNX Runtime; the {name} provider needs its GPU build (onnxruntime-gpu, .onnxruntime-gpu/)",
                p.display()
            ),
            fix: FIX_SETUP_GPU.into(),
        }),
        None => out.push(Missing {
            what: "no ONNX Runtime library found".into(),
            fix: FIX_SETUP_GPU.into(),
        }),
        Some(_) => {}
    }
    let libraries = library_groups(provider);
    let wanted = |g: Group| match g {
        Group::OrtGpu => facts.ort_is_gpu_build,
        g => libraries.contains(&g),
    };
    for group in [Group::OrtGpu, Group::Cuda, Group::Cudnn, Group::Tensorrt] {
        if !wanted(group) {
            continue;
        }
        let absent: Vec<&str> = facts
            .pieces
            .iter()
            .filter(|p| p.group == group && p.found.is_none())
            .filter(|p| {
                provider != Provider::Cuda || p.name != "libonnxruntime_providers_tensorrt.so"
            })
            .map(|p| p.name)
            .collect();
        if !absent.is_empty() {
            let of = facts.pieces.iter().filter(|p| p.group == group).count();
            out.push(Missing {
                what: format!(
                    "{} ({}, {} of {of} missing) not found",
                    absent.join(", "),
                    group.label(),
                    absent.len()
                ),
                fix: group.fix().into(),
            });
        }
    }
    if let Err(e) = &facts.driver {
        out.push(Missing {
            what: format!("the NVIDIA driver's {DRIVER_LIB} does not load ({e})"),
            fix: FIX_DRIVER.into(),
        });
    } else if facts.gpus.is_empty() {
        out.push(Missing {
            what: "nvidia-smi -L lists no GPU".into(),
            fix: "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES".into(),
        });
    }
    out
}

/// `CUDA` or `TensorRT`, as messages name the providers.
pub fn provider_name(provider: Provider) -> &'static str {
    match provider {
        Provider::Cpu => "CPU",
        Provider::Cuda => "CUDA",
        Provider::Tensorrt => "TensorRT",
    }
}

/// Turns an error ONNX Runtime gave while registering or starting a GPU
/// provider into what is missing and its fix: a library that did not load
/// is named with the command that installs it; a CPU build of ONNX
/// Runtime, a driver too old and no device each have their own. Anything
/// else keeps ONNX Runtime's words and points at `rulka gpu check`.
pub fn diagnose(provider: Provider, message: &str) -> Missing {
    let name = provider_name(provider);
    let message = message.trim();
    if let Some(lib) = unloadable_library(message) {
        let group = group_of(&lib);
        return Missing {
            what: format!("{lib} ({}) does not load: {message}", group.label()),
            fix: group.fix().into(),
        };
    }
    let lower = message.to_ascii_lowercase();
    if lower.contains("not enabled in this build")
        || lower.contains("is not available")
        || lower.contains("not supported in this build")
    {
        return Missing {
            what: format!("this ONNX Runtime is not built with the {name} provider: {message}"),
            fix: FIX_SETUP_GPU.into(),
        };
    }
    if lower.contains("driver version is insufficient") {
        return Missing {
            what: format!("the NVIDIA driver is older than CUDA 13 needs: {message}"),
            fix: FIX_DRIVER.into(),
        };
    }
    if lower.contains("no cuda-capable device") || lower.contains("invalid device ordinal") {
        return Missing {
            what: format!("no usable GPU: {message}"),
            fix: "check nvidia-smi -L, CUDA_VISIBLE_DEVICES and inference.device_id".into(),
        };
    }
    Missing { what: format!("{name} provider: {message}"), fix: "rulka gpu check".into() }
}

/// The file name in a loader message such as `libcublasLt.so.13: cannot
/// open shared object file: No such file or directory`.
fn unloadable_library(message: &str) -> Option<String> {
    let at = message.find("cannot open shared object file")?;
    let before = message[..at].trim_end_matches([':', ' ', '"', '\'']);
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '[' || c == '(')
        .next()?;
    let file = word.rsplit(['/', '\\']).next()?.trim_matches(['"', '\'', ':']);
    file.contains(".so").then(|| file.to_string())
}

fn group_of(lib: &str) -> Group {
    if lib.starts_with("libcuda.so") || lib.starts_with("nvcuda") {
        Group::Driver
    } else if lib.starts_with("libcudnn") || lib.starts_with("cudnn") {
        Group::Cudnn
    } else if lib.starts_with("libnvinfer")
        || lib.starts_with("libnvonnxparser")
        || lib.starts_with("nvinfer")
    {
        Group::Tensorrt
    } else if lib.contains("onnxruntime") {
        Group::OrtGpu
    } else {
        Group::Cuda
    }
}

/// Loads `provider`'s CUDA, cuDNN (and TensorRT) libraries from the
/// folders of [`library_dirs`] before ONNX Runtime registers the provider,
/// so that its dependencies resolve to them without `LD_LIBRARY_PATH`. A
/// library found in none of them is left to the system's loader (a
/// system-wide CUDA install); one that is found but does not load is
/// returned as missing. Runs once per provider per process.
pub fn preload(provider: Provider) -> Result<(), Missing> {
    // One result per group, in `library_groups`'s order: a group is loaded
    // once per process, whichever provider asked first.
    static LOADED: [OnceLock<Result<(), Missing>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let load = |group: Group| -> Result<(), Missing> {
        let dirs = library_dirs();
        for name in group.libraries() {
            if let Some(path) = find_in(&dirs, name) {
                ort::util::preload_dylib(&path).map_err(|e| Missing {
                    what: format!("{} does not load: {}", path.display(), load_error(&e)),
                    fix: group.fix().into(),
                })?;
            }
        }
        Ok(())
    };
    for &group in library_groups(provider) {
        let cell = match group {
            Group::Cuda => &LOADED[0],
            Group::Cudnn => &LOADED[1],
            _ => &LOADED[2],
        };
        cell.get_or_init(|| load(group)).clone()?;
    }
    Ok(())
}

/// The library groups `provider` needs, in the order they load: TensorRT's
/// provider links CUDA and cuDNN too, so they come first. (The driver and
/// ONNX Runtime's own GPU build are not among them: the former is the
/// system's, the latter is loaded as ONNX Runtime itself.)
pub fn library_groups(provider: Provider) -> &'static [Group] {
    match provider {
        Provider::Cpu => &[],
        Provider::Cuda => &[Group::Cuda, Group::Cudnn],
        Provider::Tensorrt => &[Group::Cuda, Group::Cudnn, Group::Tensorrt],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(built: BuildFeatures, gpu_core: bool, all_found: bool) -> GpuFacts {
        let mut pieces = Vec::new();
        for (g, names) in [
            (Group::OrtGpu, ORT_GPU_LIBS),
            (Group::Cuda, CUDA_LIBS),
            (Group::Cudnn, CUDNN_LIBS),
            (Group::Tensorrt, TENSORRT_LIBS),
        ] {
            for n in names {
                let found = (all_found && (g != Group::OrtGpu || gpu_core))
                    .then(|| PathBuf::from(format!("/x/{n}")));
                pieces.push(Piece { name: n, group: g, found });
            }
        }
        GpuFacts {
            built,
            ort_library: Some(PathBuf::from("/x/libonnxruntime.so")),
            ort_is_gpu_build: gpu_core,
            driver: Ok(()),
            gpus: vec!["GPU 0: NVIDIA H200".into()],
            pieces,
        }
    }

    const ALL: BuildFeatures = BuildFeatures { cuda: true, tensorrt: true };

    #[test]
    fn tensorrt_loads_what_cuda_loads_first_and_each_group_its_own_libraries() {
        // TensorRT's provider links cuBLAS and cuDNN: loading libnvinfer
        // before them would resolve them from the system, or fail.
        let (cuda, trt) = (library_groups(Provider::Cuda), library_groups(Provider::Tensorrt));
        assert_eq!(cuda, &[Group::Cuda, Group::Cudnn]);
        assert_eq!(trt, &[Group::Cuda, Group::Cudnn, Group::Tensorrt]);
        assert_eq!(library_groups(Provider::Cpu), &[] as &[Group]);
        for g in [Group::Cuda, Group::Cudnn, Group::Tensorrt] {
            assert!(!g.libraries().is_empty(), "{g:?}");
            for lib in g.libraries() {
                assert_eq!(group_of(lib), g, "{lib}");
            }
        }
        // The CUDA runtime loads before the libraries that link it.
        assert_eq!(Group::Cuda.libraries()[0], "libcudart.so.13");
        assert_eq!(Group::Cudnn.libraries()[0], "libcudnn.so.9");
    }

    #[test]
    fn nothing_is_missing_when_everything_is_there_and_cpu_needs_nothing() {
        let f = facts(ALL, true, true);
        assert_eq!(missing_for(Provider::Cuda, &f), vec![]);
        assert_eq!(missing_for(Provider::Tensorrt, &f), vec![]);
        let bare = facts(BuildFeatures { cuda: false, tensorrt: false }, false, false);
        assert_eq!(missing_for(Provider::Cpu, &bare), vec![]);
    }

    #[test]
    fn each_missing_library_is_named_with_its_fix_and_only_the_providers_own() {
        for (i, piece) in facts(ALL, true, true).pieces.iter().enumerate() {
            let mut f = facts(ALL, true, true);
            f.pieces[i].found = None;
            for provider in [Provider::Cuda, Provider::Tensorrt] {
                let m = missing_for(provider, &f);
                let needed = match provider {
                    Provider::Cuda => {
                        piece.group != Group::Tensorrt
                            && piece.name != "libonnxruntime_providers_tensorrt.so"
                    }
                    _ => true,
                };
                if needed {
                    assert_eq!(m.len(), 1, "{provider:?} without {}: {m:?}", piece.name);
                    assert!(m[0].what.contains(piece.name), "{m:?}");
                    assert_eq!(m[0].fix, piece.group.fix());
                } else {
                    assert_eq!(m, vec![], "{provider:?} does not need {}", piece.name);
                }
            }
        }
    }

    #[test]
    fn the_build_the_cpu_core_the_driver_and_the_device_each_say_their_fix() {
        let no_cuda = facts(BuildFeatures { cuda: false, tensorrt: true }, true, true);
        let m = missing_for(Provider::Cuda, &no_cuda);
        assert_eq!(m.len(), 1);
        assert!(m[0].what.contains("`cuda` cargo feature") && m[0].fix.contains("--build=cuda"));
        assert_eq!(missing_for(Provider::Tensorrt, &no_cuda), vec![]);
        let no_trt = facts(BuildFeatures { cuda: true, tensorrt: false }, true, true);
        assert!(missing_for(Provider::Tensorrt, &no_trt)[0].fix.contains("--build=tensorrt"));
        assert_eq!(missing_for(Provider::Cuda, &no_trt), vec![]);

        let mut cpu_core = facts(ALL, false, true);
        cpu_core.ort_library = Some(PathBuf::from("/r/.onnxruntime/libonnxruntime.so"));
        let m = missing_for(Provider::Cuda, &cpu_core);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].what.contains("/r/.onnxruntime/libonnxruntime.so is the CPU build"));
        assert_eq!(m[0].fix, FIX_SETUP_GPU);

        let mut no_driver = facts(ALL, true, true);
        no_driver.driver = Err("libcuda.so.1: cannot open shared object file".into());
        no_driver.gpus.clear();
        let m = missing_for(Provider::Tensorrt, &no_driver);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].fix, FIX_DRIVER);

        let mut no_gpu = facts(ALL, true, true);
        no_gpu.gpus.clear();
        let m = missing_for(Provider::Cuda, &no_gpu);
        assert_eq!(m.len(), 1);
        assert!(m[0].what.contains("no GPU"));
    }

    #[test]
    fn loader_messages_name_the_library_and_its_group() {
        let cases = [
            ("libcublasLt.so.13: cannot open shared object file: No such file or directory", "libcublasLt.so.13", FIX_SETUP_GPU),
            ("Failed to load library libonnxruntime_providers_cuda.so with error: libcuda.so.1: cannot open shared object file: No such file or directory", "libcuda.so.1", FIX_DRIVER),
            ("/opt/x/libonnxruntime_providers_tensorrt.so: libnvinfer.so.10: cannot open shared object file", "libnvinfer.so.10", FIX_TENSORRT),
            ("libcudnn_cnn.so.9: cannot open shared object file", "libcudnn_cnn.so.9", FIX_SETUP_GPU),
            ("Error loading \"/r/.onnxruntime-gpu/libonnxruntime_providers_cuda.so\": cannot open shared object file", "libonnxruntime_providers_cuda.so", FIX_SETUP_GPU),
        ];
        for (msg, lib, fix) in cases {
            let m = diagnose(Provider::Cuda, msg);
            assert!(m.what.starts_with(lib), "{msg}: {m:?}");
            assert_eq!(m.fix, fix, "{msg}");
        }
        assert_eq!(
            diagnose(Provider::Cuda, "CUDA execution provider is not enabled in this build.").fix,
            FIX_SETUP_GPU
        );
        assert_eq!(
            diagnose(
                Provider::Cuda,
                "CUDA failure 35: CUDA driver version is insufficient for CUDA runtime version"
            )
            .fix,
            FIX_DRIVER
        );
        assert!(diagnose(Provider::Cuda, "CUDA failure 100: no CUDA-capable device is detected")
            .what
            .starts_with("no usable GPU"));
        let other = diagnose(Provider::Tensorrt, "something else");
        assert_eq!(other.fix, "rulka gpu check");
        assert!(other.what.contains("TensorRT provider: something else"));
    }

    #[test]
    fn only_a_library_with_both_provider_libraries_beside_it_is_the_gpu_build() {
        for (shared, cuda, want) in
            [(false, false, false), (true, false, false), (false, true, false), (true, true, true)]
        {
            let d = std::env::temp_dir()
                .join(format!("rulka-gpu-build-{}-{shared}-{cuda}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap_or_default();
            let touch = |n: &str| std::fs::write(d.join(n), b"").unwrap_or_default();
            touch("libonnxruntime.so");
            if shared {
                touch("libonnxruntime_providers_shared.so");
            }
            if cuda {
                touch("libonnxruntime_providers_cuda.so");
            }
            assert_eq!(
                is_gpu_build(&d.join("libonnxruntime.so")),
                want,
                "shared {shared}, cuda {cuda}"
            );
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    #[test]
    fn every_library_belongs_to_its_group_and_gets_its_fix() {
        for (names, group) in [
            (CUDA_LIBS, Group::Cuda),
            (CUDNN_LIBS, Group::Cudnn),
            (TENSORRT_LIBS, Group::Tensorrt),
            (ORT_GPU_LIBS, Group::OrtGpu),
            (&[DRIVER_LIB][..], Group::Driver),
        ] {
            for name in names {
                assert_eq!(group_of(name), group, "{name}");
                let m = diagnose(
                    Provider::Cuda,
                    &format!("{name}: cannot open shared object file: No such file or directory"),
                );
                assert!(m.what.starts_with(name), "{name}: {m:?}");
                assert_eq!(m.fix, group.fix(), "{name}");
            }
        }
    }

    #[test]
    fn the_build_label_is_what_scripts_rulka_keeps() {
        let l = |cuda, tensorrt| BuildFeatures { cuda, tensorrt }.label();
        assert_eq!(
            [l(false, false), l(true, false), l(false, true), l(true, true)],
            ["cpu", "cuda", "tensorrt", "cuda,tensorrt"]
        );
    }
}
