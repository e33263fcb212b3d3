//! What the collector tests share: a game started by hand (`rulka sim
//! serve` on a port, as a user starts TrackMania on a game PC) failing in
//! every way a game fails, one game after another, while a collector drives
//! it ([`games_fail_in_turn`]).

#![allow(dead_code)] // each test binary uses its part

use rulka_test_support::{signal, sim_game};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

pub use rulka_test_support::Kill;

/// How one game of [`games_fail_in_turn`] ends.
#[derive(Debug, Clone, Copy)]
pub enum GameEnd {
    /// SIGKILLed by the test once the collector drove it (a game closed or
    /// crashed): the collector says "is gone".
    Killed,
    /// SIGSTOPped once the collector drove it (a frozen game): the collector
    /// says "stopped answering", then the test SIGKILLs it.
    Frozen,
    /// Started with a fault switch of `rulka sim serve` (`--hang-after-steps
    /// N`…, N a few runs' steps): the collector says `said`, then the test
    /// SIGKILLs the game (one that exits by itself is gone already).
    Fault { switch: &'static str, said: &'static str },
}

/// The failures a hand-started game went through, with the words the
/// collector says for each.
pub const EVERY_FAILURE: [GameEnd; 6] = [
    GameEnd::Fault { switch: "--exit-after-steps", said: "is gone" },
    GameEnd::Fault { switch: "--hang-after-steps", said: "stopped answering" },
    GameEnd::Fault { switch: "--close-mid-message-after-steps", said: "is gone" },
    GameEnd::Fault { switch: "--corrupt-state-after-steps", said: "broke the protocol" },
    GameEnd::Frozen,
    GameEnd::Killed,
];

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Trajectories of collector `id` recorded in `run`'s trajectories.csv.
pub fn recorded_from(run: &Path, id: u32) -> Vec<u64> {
    let rows = rulka_trainer::read_trajectories_so_far(run).unwrap();
    rows.iter().filter(|r| r.collector == id).map(|r| r.trajectory).collect()
}

/// Lines of `log` saying the game on `port` failed with `said`.
fn failures_said(log: &Path, port: u16, said: &str) -> usize {
    let what = format!("game on port {port}: {said} (");
    read(log).lines().filter(|l| l.contains(&what)).count()
}

/// Starts `rulka sim serve` (`rulka`, `serve_cfg`) on `port` with `args`.
/// Plays `ends` with a collector (`collector`, id `id`, stderr in `log`)
/// that drives the game on `port` of a run in `run`: for each, a game is
/// started by hand, the collector must drive it (a new trajectory of `id`
/// recorded within `limit`), then the game fails as said and the collector
/// must say so naming the port; after a pause of 2 s without a game, the
/// next. Faults come after `fault_after` run steps (make it a few runs).
/// The collector must not exit meanwhile. Returns the game left
/// running at the end (the last one, healthy, driven) and, for each game,
/// the seconds from its start to the collector's first trajectory on it.
#[allow(clippy::too_many_arguments)]
pub fn games_fail_in_turn(
    rulka: &Path,
    serve_cfg: &Path,
    port: u16,
    run: &Path,
    id: u32,
    collector: &mut Child,
    log: &Path,
    ends: &[GameEnd],
    fault_after: usize,
    limit: Duration,
) -> (Kill, Vec<f64>) {
    let alive = |c: &mut Child, what: &str| {
        if let Some(s) = c.try_wait().unwrap() {
            panic!("the collector exited ({s}) {what}:\n{}", read(log));
        }
    };
    let mut drove_after = Vec::new();
    // Waits until the collector recorded a trajectory more than `before`.
    let mut drive = |c: &mut Child, before: usize, t0: Instant, what: &str| loop {
        alive(c, what);
        if recorded_from(run, id).len() > before {
            drove_after.push(t0.elapsed().as_secs_f64());
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "{what}: no trajectory within {limit:?} of the game's start:\n{}",
            read(log)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let wait_said = |c: &mut Child, said: &str, before: usize, what: &str| {
        let t0 = Instant::now();
        while failures_said(log, port, said) <= before {
            alive(c, what);
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{what}: the collector never said {said:?} for port {port}:\n{}",
                read(log)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for end in ends {
        let what = format!("{end:?}");
        let before = recorded_from(run, id).len();
        let t0 = Instant::now();
        match *end {
            GameEnd::Killed | GameEnd::Frozen => {
                let said =
                    if matches!(end, GameEnd::Killed) { "is gone" } else { "stopped answering" };
                let n = failures_said(log, port, said);
                let mut game = sim_game(rulka, serve_cfg, port, &[]);
                drive(collector, before, t0, &what);
                if matches!(end, GameEnd::Frozen) {
                    signal(game.0.id(), "-STOP");
                } else {
                    signal(game.0.id(), "-KILL");
                }
                wait_said(collector, said, n, &what);
                let _ = game.0.kill();
                let _ = game.0.wait();
            }
            GameEnd::Fault { switch, said } => {
                let n = failures_said(log, port, said);
                let steps = fault_after.to_string();
                let mut game = sim_game(rulka, serve_cfg, port, &[switch, &steps]);
                drive(collector, before, t0, &what);
                wait_said(collector, said, n, &what);
                let _ = game.0.kill();
                let _ = game.0.wait();
            }
        }
        // No game for a while: the collector waits, it does not exit.
        std::thread::sleep(Duration::from_secs(2));
        alive(collector, &format!("{what}, while no game answered"));
    }
    let before = recorded_from(run, id).len();
    let t0 = Instant::now();
    let game = sim_game(rulka, serve_cfg, port, &[]);
    drive(collector, before, t0, "the last game");
    (game, drove_after)
}
