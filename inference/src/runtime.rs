//! Finding and loading the ONNX Runtime shared library (once per process).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;

use crate::InferenceError;

/// File name of the ONNX Runtime library searched for (the platform's name).
#[cfg(not(windows))]
pub const LIBRARY_NAME: &str = "libonnxruntime.so";
/// File name of the ONNX Runtime library searched for (the platform's name).
#[cfg(windows)]
pub const LIBRARY_NAME: &str = "onnxruntime.dll";

/// Environment variable naming the library explicitly (the `ort` convention).
pub const DYLIB_ENV: &str = "ORT_DYLIB_PATH";

struct Loaded {
    path: PathBuf,
    env: Environment,
}

static LOADED: OnceLock<Loaded> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

/// The ONNX Runtime library loaded in this process and its environment.
#[derive(Debug, Clone, Copy)]
pub struct Runtime {
    path: &'static Path,
    env: &'static Environment,
}

impl Runtime {
    /// Path of the loaded library.
    pub fn library_path(&self) -> &'static Path {
        self.path
    }

    /// The process-wide ONNX Runtime environment sessions are created in.
    pub fn environment(&self) -> &'static Environment {
        self.env
    }
}

/// Loads ONNX Runtime once per process and returns it.
///
/// Where the library is looked for, first match wins:
/// 1. `explicit` (e.g. the CLI's `--ort-lib`), which must exist;
/// 2. `$ORT_DYLIB_PATH`, which must exist when set;
/// 3. next to the running executable, or in `lib/` beside it (installed binaries);
/// 4. in a build with the `cuda` or `tensorrt` feature, `.onnxruntime-gpu/`
///    (the GPU build `scripts/setup.sh --gpu` installs) at the root of the
///    workspace the executable was built in, then
/// 5. `.onnxruntime/` there (found relative to `target/<profile>/` and
///    `target/<profile>/deps/`, then at the workspace path recorded at
///    compile time).
///
/// A second call returns the already loaded runtime; asking for a different
/// library then is [`InferenceError::RuntimeConflict`].
pub fn load_runtime(explicit: Option<&Path>) -> Result<Runtime, InferenceError> {
    let requested = locate_runtime(explicit)?;
    let _guard = LOADING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(loaded) = LOADED.get() {
        return check_same(loaded, &requested, explicit.is_some());
    }
    let builder = ort::init_from(&requested).map_err(|e| InferenceError::RuntimeLoad {
        path: requested.clone(),
        message: e.to_string(),
    })?;
    let env = builder.with_name("rulka").build().map_err(|e| InferenceError::RuntimeLoad {
        path: requested.clone(),
        message: e.to_string(),
    })?;
    let loaded = LOADED.get_or_init(|| Loaded { path: requested, env });
    Ok(Runtime { path: &loaded.path, env: &loaded.env })
}

fn check_same(
    loaded: &'static Loaded,
    requested: &Path,
    explicit: bool,
) -> Result<Runtime, InferenceError> {
    let same = match (loaded.path.canonicalize(), requested.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => loaded.path == requested,
    };
    if !same && explicit {
        return Err(InferenceError::RuntimeConflict {
            loaded: loaded.path.clone(),
            requested: requested.to_path_buf(),
        });
    }
    Ok(Runtime { path: &loaded.path, env: &loaded.env })
}

/// Resolves which library file [`load_runtime`] would use, without loading it.
pub fn locate_runtime(explicit: Option<&Path>) -> Result<PathBuf, InferenceError> {
    if let Some(path) = explicit {
        return existing(path, "--ort-lib");
    }
    if let Some(path) = std::env::var_os(DYLIB_ENV).filter(|v| !v.is_empty()) {
        return existing(Path::new(&path), DYLIB_ENV);
    }
    let candidates = default_candidates();
    match candidates.iter().find(|p| p.is_file()) {
        // Windows's canonical form (`\\?\C:\…`) is not needed to load a DLL.
        #[cfg(windows)]
        Some(found) => Ok(found.clone()),
        #[cfg(not(windows))]
        Some(found) => Ok(found.canonicalize().unwrap_or_else(|_| found.clone())),
        None => Err(InferenceError::RuntimeNotFound { searched: candidates }),
    }
}

fn existing(path: &Path, source: &str) -> Result<PathBuf, InferenceError> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        Err(InferenceError::RuntimeLoad {
            path: path.to_path_buf(),
            message: format!("no such file (given by {source})"),
        })
    }
}

/// The path of the ONNX Runtime library this process loaded, if any.
pub fn loaded_path() -> Option<&'static Path> {
    LOADED.get().map(|l| l.path.as_path())
}

/// The roots of the workspace a binary built here runs from: relative to
/// `target/<profile>/` and `target/<profile>/deps/`, then the workspace path
/// recorded at compile time (Linux; none on Windows).
pub(crate) fn workspace_roots() -> Vec<PathBuf> {
    #[cfg(windows)]
    {
        Vec::new()
    }
    #[cfg(not(windows))]
    {
        let mut out = Vec::new();
        if let Some(dir) =
            std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf))
        {
            out.push(dir.join("../.."));
            out.push(dir.join("../../.."));
        }
        out.push(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
        out
    }
}

/// The workspace folders searched for ONNX Runtime, in order: a build
/// with either GPU provider looks for the GPU build (`scripts/setup.sh
/// --gpu`) first, then the CPU build; the CPU build looks for the CPU build
/// only.
fn runtime_folders(built: crate::native::BuildFeatures) -> &'static [&'static str] {
    if built.cuda || built.tensorrt {
        &[".onnxruntime-gpu", ".onnxruntime"]
    } else {
        &[".onnxruntime"]
    }
}

fn default_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf))
    {
        out.push(dir.join(LIBRARY_NAME));
        out.push(dir.join("lib").join(LIBRARY_NAME));
    }
    for folder in runtime_folders(crate::native::BuildFeatures::THIS) {
        for root in workspace_roots() {
            out.push(root.join(folder).join(LIBRARY_NAME));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::BuildFeatures;

    #[test]
    fn every_gpu_build_looks_for_the_gpu_runtime_first_and_the_cpu_build_never() {
        for (cuda, tensorrt) in [(true, true), (true, false), (false, true)] {
            assert_eq!(
                runtime_folders(BuildFeatures { cuda, tensorrt }),
                &[".onnxruntime-gpu", ".onnxruntime"],
                "cuda {cuda}, tensorrt {tensorrt}"
            );
        }
        assert_eq!(
            runtime_folders(BuildFeatures { cuda: false, tensorrt: false }),
            &[".onnxruntime"]
        );
    }
}
