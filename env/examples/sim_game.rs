//! A stand-in game on any platform: the simulator served over TMInterface's
//! protocol (what `rulka sim serve` does), as a small program that also
//! builds for Windows — the game the Windows collector's tests launch,
//! watch, kill and relaunch under Wine.
//!
//! ```text
//! sim_game CONFIG PORT [--hang-after-steps N | --exit-after-steps N] [--launcher]
//! ```
//!
//! `--launcher` acts as TMLoader does: it starts a copy of itself (the
//! game, without `--launcher`) and exits at once, leaving the game running.
//! An argument `@FILE` stands for the lines of FILE, one argument each (so
//! that a launch command's `{id}` can pick a game's behaviour).

use std::process::ExitCode;

use rulka_env::{SimServer, SimServerFault};

fn main() -> ExitCode {
    let mut args = Vec::new();
    for a in std::env::args().skip(1) {
        let Some(file) = a.strip_prefix('@') else {
            args.push(a);
            continue;
        };
        match std::fs::read_to_string(file) {
            Ok(text) => args.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_string)),
            Err(e) => {
                eprintln!("sim_game: {file}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sim_game: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let usage =
        "usage: sim_game CONFIG PORT [--hang-after-steps N | --exit-after-steps N] [--launcher]";
    let (Some(config), Some(port)) = (args.first(), args.get(1)) else {
        return Err(usage.into());
    };
    let port: u16 = port.parse().map_err(|_| format!("PORT {port:?}: not a port number"))?;
    let mut fault = SimServerFault::None;
    let mut launcher = false;
    let mut rest = args[2..].iter();
    while let Some(a) = rest.next() {
        let mut number = |flag: &str| -> Result<usize, String> {
            let v = rest.next().ok_or(format!("{flag} needs a number"))?;
            v.parse().map_err(|_| format!("{flag} {v:?}: not a number"))
        };
        match a.as_str() {
            "--hang-after-steps" => fault = SimServerFault::HangAfterSteps { steps: number(a)? },
            "--exit-after-steps" => fault = SimServerFault::ExitAfterSteps { steps: number(a)? },
            "--launcher" => launcher = true,
            other => return Err(format!("unknown argument {other:?}; {usage}")),
        }
    }
    if launcher {
        let me = std::env::current_exe().map_err(|e| format!("locating this program: {e}"))?;
        let game: Vec<&String> = args.iter().filter(|a| *a != "--launcher").collect();
        let child = std::process::Command::new(me)
            .args(game)
            .spawn()
            .map_err(|e| format!("starting the game: {e}"))?;
        println!("launcher: started the game (pid {}), exiting", child.id());
        return Ok(());
    }
    let cfg = rulka_config::Config::from_file(config).map_err(|e| e.to_string())?;
    let server = SimServer::start(&cfg, port, fault).map_err(|e| format!("port {port}: {e}"))?;
    println!(
        "sim_game: TMInterface-protocol simulator on 127.0.0.1:{} (pid {})",
        server.port(),
        std::process::id()
    );
    server.wait();
    Ok(())
}
