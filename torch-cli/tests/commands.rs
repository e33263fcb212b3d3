//! `rulka` hands exactly `rulka-torch`'s commands over: each command the
//! libtorch binary has is listed by `rulka --help` and reaches `rulka-torch`
//! through `rulka` (its own help comes back), and no other command does.
//! (Building this test builds the `rulka-torch` binary, so the black-box
//! tests of `rulka` never run a stale one.)

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::PathBuf;
use std::process::Command;

fn torch() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rulka-torch"))
}

/// `rulka` beside `rulka-torch` (`cargo build -p rulka`; scripts/test builds both).
fn rulka() -> PathBuf {
    let p = torch().with_file_name("rulka");
    assert!(p.exists(), "{} not built: cargo build -p rulka -p rulka-torch", p.display());
    p
}

/// The command names of a clap `--help` page (its `Commands:` section).
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

fn help(bin: &PathBuf, args: &[&str]) -> String {
    let o = Command::new(bin).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{} {args:?}: {}",
        bin.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn rulka_hands_over_exactly_the_commands_rulka_torch_has() {
    let torch_cmds = commands(&help(&torch(), &["--help"]));
    assert_eq!(
        torch_cmds,
        ["train", "pretrain", "export", "import", "init", "hf-vit", "bench", "demo"]
    );
    let all = commands(&help(&rulka(), &["--help"]));
    for c in &torch_cmds {
        assert!(all.contains(c), "rulka --help does not list {c}: {all:?}");
        // Through `rulka`, the command's help is rulka-torch's own (its
        // options), not the hand-over's pass-through arguments.
        let through = help(&rulka(), &[c, "--help"]);
        assert_eq!(through, help(&torch(), &[c, "--help"]), "rulka {c} --help");
    }
    // The other commands stay in `rulka`: rulka-torch does not know them.
    for c in all.iter().filter(|c| !torch_cmds.contains(c)) {
        let o = Command::new(torch()).args([c.as_str(), "--help"]).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "rulka-torch {c}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}
