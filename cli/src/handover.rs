//! The commands that use libtorch run in `rulka-torch`, the binary beside
//! this one: `rulka` replaces itself with it (`exec`), keeping its process
//! id, arguments, environment and terminal, so signals, exit codes and
//! output are the command's own.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

/// The commands `rulka-torch` runs.
pub(crate) const TORCH_COMMANDS: [&str; 8] =
    ["train", "pretrain", "init", "import", "export", "hf-vit", "bench", "demo"];

/// The arguments of a command handed over, as given (parsed by `rulka-torch`,
/// which prints its own help and errors).
#[derive(Debug, clap::Args)]
pub(crate) struct Torch {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// The command word of `argv` (after the program and the global options
/// `-v`/`--verbose`/`--ort-lib PATH`), if any.
pub(crate) fn command_word(argv: &[String]) -> Option<&str> {
    let mut rest = argv.iter().skip(1);
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--ort-lib" => {
                rest.next();
            }
            a if a.starts_with("--ort-lib=") || a == "--verbose" => {}
            a if a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| c == 'v') => {}
            a => return Some(a),
        }
    }
    None
}

/// Whether `argv` asks for a command that `rulka-torch` runs.
pub(crate) fn torch_command(argv: &[String]) -> bool {
    command_word(argv).is_some_and(|w| TORCH_COMMANDS.contains(&w))
}

/// `rulka-torch` beside this binary.
fn torch_binary() -> anyhow::Result<PathBuf> {
    let exe =
        std::env::current_exe().map_err(|e| anyhow::anyhow!("locating the rulka binary: {e}"))?;
    Ok(exe.with_file_name("rulka-torch"))
}

/// Replaces this process with `rulka-torch` and this process's arguments;
/// returns only the error when it cannot be started (it is not beside this
/// binary: the message says how to build it).
pub(crate) fn to_torch() -> anyhow::Error {
    let bin = match torch_binary() {
        Ok(b) => b,
        Err(e) => return e,
    };
    if !bin.is_file() {
        return anyhow::anyhow!(
            "{} not found: the commands that use libtorch ({}) run in rulka-torch, built beside rulka (cargo build -p rulka -p rulka-torch; scripts/rulka builds both)",
            bin.display(),
            TORCH_COMMANDS.join(", ")
        );
    }
    let e = std::process::Command::new(&bin).args(std::env::args_os().skip(1)).exec();
    anyhow::anyhow!("starting {}: {e}", bin.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn the_command_word_comes_after_the_global_options() {
        assert_eq!(command_word(&argv("rulka train --config c.yaml")), Some("train"));
        assert_eq!(
            command_word(&argv("rulka -vv --ort-lib /x/lib.so bench learner")),
            Some("bench")
        );
        assert_eq!(command_word(&argv("rulka --ort-lib=/x -v --verbose export")), Some("export"));
        assert_eq!(command_word(&argv("rulka --help")), Some("--help"));
        assert_eq!(command_word(&argv("rulka -v")), None);
        // A lone `-` is no option: it is the word (clap refuses it).
        assert_eq!(command_word(&argv("rulka - train")), Some("-"));
        assert!(torch_command(&argv("rulka -v train")));
        assert!(torch_command(&argv("rulka hf-vit --out x")));
        // A file named like a command, after the command word, decides nothing.
        assert!(!torch_command(&argv("rulka sim serve --config train")));
        assert!(!torch_command(&argv("rulka collect --run r --id 0")));
        assert!(!torch_command(&argv("rulka --help")));
    }
}
