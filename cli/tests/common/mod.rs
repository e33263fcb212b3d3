//! Helpers shared by the CLI's black-box tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

/// A `rulka sim serve` child on a free port, killed when dropped (its stdout
/// is kept open: it may print more).
pub struct Serve {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    _out: std::io::BufReader<ChildStdout>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `rulka sim serve --config cfg` with `extra` arguments and returns
/// once it says it listens (trying another port if one was taken meanwhile).
pub fn serve(cfg: &Path, extra: &[&str]) -> Serve {
    for _ in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_rulka"))
            .args(["sim", "serve", "--config"])
            .arg(cfg)
            .args(["--port", &port.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        if line.contains("TMInterface-protocol simulator") {
            return Serve { child, port, _out: out };
        }
        let _ = child.wait();
    }
    panic!("rulka sim serve never listened");
}

/// The last value of each TensorBoard scalar of `run` whose tag starts with `prefix`.
pub fn tensorboard_last(run: &Path, prefix: &str) -> std::collections::BTreeMap<String, f32> {
    let mut last = std::collections::BTreeMap::new();
    for f in std::fs::read_dir(run.join("tensorboard")).unwrap().flatten() {
        for e in rulka_learner::read_events(&f.path()).unwrap() {
            for v in e.summary.iter().flat_map(|s| &s.value) {
                if v.tag.starts_with(prefix) {
                    last.insert(v.tag.clone(), v.simple_value.unwrap_or(f32::NAN));
                }
            }
        }
    }
    last
}

/// A straight reference line of `points` points 0.5 m apart along x, at
/// height 0, written as `dir/name` (a map's `.npy`).
pub fn straight_line(dir: &Path, name: &str, points: u32) -> std::path::PathBuf {
    let line: Vec<[f64; 3]> = (0..points).map(|i| [0.5 * f64::from(i), 0.0, 0.0]).collect();
    let npy = dir.join(name);
    rulka_env::write_points(&npy, &line).unwrap();
    npy
}
