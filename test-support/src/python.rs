//! The test venv's Python (`scripts/setup.sh --python`: NumPy, onnx,
//! onnxruntime, PyTorch, transformers, tminterface).

use std::path::PathBuf;

/// The workspace's root folder.
pub fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `.venv/bin/python`, or `None` with a `SKIPPED` line naming `what` did
/// not run; under `RULKA_REQUIRE_VENV` (the test command) a missing venv
/// fails the test instead of skipping it.
pub fn venv_python(what: &str) -> Option<PathBuf> {
    let p = workspace().join(".venv/bin/python");
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("RULKA_REQUIRE_VENV").is_none(),
        "RULKA_REQUIRE_VENV is set but there is no {}: {what} cannot run",
        p.display()
    );
    eprintln!("SKIPPED: no .venv (run scripts/setup.sh --python): {what} did not run");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_is_the_folder_holding_cargo_toml_and_the_venv_probe_names_it() {
        assert!(workspace().join("Cargo.toml").is_file());
        assert!(workspace().join("test-support/Cargo.toml").is_file());
        match venv_python("this probe") {
            Some(p) => assert_eq!(p, workspace().join(".venv/bin/python")),
            None => assert!(!workspace().join(".venv/bin/python").exists()),
        }
    }
}
