//! The preflight of a game setup (`rulka tmi check`, `rulka-collector tmi
//! check`): against a running game — or one launched with the config's
//! `environment.tmi.launch` — the plugin answers and speaks the protocol,
//! the game is not stuck in menus and the first map loads, steps arrive, a
//! frame of the config's size arrives, the state decodes, and race time
//! advances under inputs. Each failure comes with its fix.

use std::io::Write;
use std::path::PathBuf;

use rulka_config::Config;

use crate::game::GameSlot;
use crate::CollectorError;

/// The fix for a state that does not decode.
const STATE_FIX: &str = "the game's TMInterface version sends another state layout (rulka reads TMInterface 2.x's SimStateData); update TMInterface";

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreflightCheck {
    /// What was checked ("the plugin answers", …).
    pub name: &'static str,
    /// Whether it passed.
    pub ok: bool,
}

/// Runs the checks against the game on `port` (launched first with the
/// config's `environment.tmi.launch` when `launch`, through guards of
/// `guard_exe` on Linux, and ended afterwards), writing each outcome — and,
/// when it fails, the fix — to `out`. Stops at the first failure that makes
/// the next checks meaningless. [`preflight_verdict`] sums them up.
pub fn preflight(
    cfg: &Config,
    port: u16,
    launch: bool,
    guard_exe: PathBuf,
    out: &mut dyn Write,
) -> Result<Vec<PreflightCheck>, CollectorError> {
    use rulka_env::Environment as _;
    let mut cfg = cfg.clone();
    cfg.environment.kind = rulka_config::EnvKind::Tmi;
    if cfg.environment.tmi.maps.is_empty() {
        return Err(CollectorError::NoMaps);
    }
    if launch && cfg.environment.tmi.launch.is_none() {
        return Err(CollectorError::NoLaunchCommand);
    }
    if !launch {
        cfg.environment.tmi.launch = None;
    }
    let host = cfg.environment.tmi.host.clone();
    let timeout_ms = cfg.environment.tmi.timeout_ms;
    let map = cfg.environment.tmi.maps[0].clone();
    let _ = writeln!(
        out,
        "tmi check — {host}:{port}{}",
        if launch { " (launching the game)" } else { "" }
    );
    let mut checks = Vec::new();
    let mut push = |name, ok, detail: String, fix: &str| {
        let _ = writeln!(out, "  {} {name}: {detail}", if ok { "ok  " } else { "FAIL" });
        if !ok {
            let _ = writeln!(out, "       fix: {fix}");
        }
        checks.push(PreflightCheck { name, ok });
        ok
    };
    let mut slot = GameSlot::new(&cfg, 0, port, guard_exe, None);
    if launch {
        // The slot launches and waits for the plugin (startup_timeout_s).
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_secs(u64::from(
                cfg.environment.tmi.launch.as_ref().map_or(120, |l| l.startup_timeout_s),
            ));
        let mut stop = || std::time::Instant::now() > deadline || rulka_shm::stop_requests() > 0;
        // Its connection is closed at once: the checks make their own.
        let _ = slot.connect(&mut stop, &mut |_| {});
    }
    let listening = std::net::TcpStream::connect((host.as_str(), port)).is_ok();
    if !push(
        "the plugin answers",
        listening,
        if listening { format!("something listens on port {}", port) } else { format!("nothing listens on {host}:{}", port) },
        "start TrackMania with TMInterface and the rulka/Linesight Python_Link plugin loaded, on this port (TMInterface 2: `set custom_port PORT`; an older TMInterface without custom_port listens on 8477 only); or pass --launch with environment.tmi.launch",
    ) {
        return Ok(finish(checks, &mut slot));
    }
    let mut env = match rulka_env::TmiEnv::connect(&cfg, &host, port) {
        Ok(e) => e,
        Err(e) => {
            push(
                "it speaks the protocol",
                false,
                e.to_string(),
                "the port is TMInterface's, with the Python_Link plugin of this protocol (no other program on the port); restart the game if the plugin was reloaded",
            );
            return Ok(finish(checks, &mut slot));
        }
    };
    push(
        "it speaks the protocol",
        true,
        format!("on-connect sync within {timeout_ms} ms, setup commands taken"),
        "",
    );
    match env.reset(0) {
        Ok(()) => {
            push(
                "not stuck in menus; the map loads",
                true,
                format!("`map {}` loaded, the race started", map.map_path),
                "",
            );
            push(
                "steps arrive (speed is not 0)",
                true,
                "run steps came at the decision period".into(),
                "",
            );
        }
        Err(e @ rulka_env::EnvError::BadState(_)) => {
            push(
                "not stuck in menus; the map loads",
                true,
                format!("`map {}` loaded", map.map_path),
                "",
            );
            push("steps arrive (speed is not 0)", true, "the first run step came".into(), "");
            push("the state decodes", false, e.to_string(), STATE_FIX);
            return Ok(finish(checks, &mut slot));
        }
        Err(e) => {
            let timeout = matches!(e, rulka_env::EnvError::Timeout { .. });
            push(
                "not stuck in menus; the map loads",
                false,
                format!("`map {}`: {e}", map.map_path),
                "check environment.tmi.maps[0].map_path (relative to TrackMania's Tracks/Challenges) and that the game is not stuck in a menu or dialog",
            );
            if timeout {
                push(
                    "steps arrive (speed is not 0)",
                    false,
                    "no run step came".into(),
                    "the game is paused or at speed 0: in the TMInterface console, `set speed 1`; check the game window is not minimised with a frame limit (`set unfocused_fps_limit false`)",
                );
            }
            return Ok(finish(checks, &mut slot));
        }
    }
    let (fl, nf) = env.obs_sizes();
    let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
    match env.observe(&mut frame, &mut floats) {
        Ok(()) => {
            let distinct = frame.iter().collect::<std::collections::HashSet<_>>().len();
            push(
                "a frame of the config's size arrives",
                true,
                format!(
                    "{}x{} grey, {distinct} distinct levels; {nf} floats",
                    cfg.nn.image_width, cfg.nn.image_height
                ),
                "",
            );
        }
        Err(e) => {
            push(
                "a frame of the config's size arrives",
                false,
                e.to_string(),
                "nn.image_width/height must be a size the game renders; the game window must not be minimised",
            );
            return Ok(finish(checks, &mut slot));
        }
    }
    let t0 = match env.probe_state() {
        Ok((n, st)) => {
            push(
                "the state decodes",
                true,
                format!(
                    "{n} bytes, SimStateData version {}, race time {} ms",
                    st.version,
                    st.race_time()
                ),
                "",
            );
            st.race_time()
        }
        Err(e) => {
            push("the state decodes", false, e.to_string(), STATE_FIX);
            return Ok(finish(checks, &mut slot));
        }
    };
    let mut moved = Ok(());
    for _ in 0..10 {
        if let Err(e) = env.step(&[0]).and_then(|_| env.observe(&mut frame, &mut floats)) {
            moved = Err(e);
            break;
        }
    }
    match moved.and_then(|()| env.probe_state()) {
        Ok((_, st)) if st.race_time() > t0 => {
            push(
                "race time advances under inputs",
                true,
                format!("{} ms → {} ms after 10 decisions at full throttle", t0, st.race_time()),
                "",
            );
        }
        Ok((_, st)) => {
            push(
                "race time advances under inputs",
                false,
                format!("race time stayed at {} ms", st.race_time()),
                "inputs do not reach the game: check the plugin is the one of this protocol, and no other client holds the game",
            );
        }
        Err(e) => {
            push(
                "race time advances under inputs",
                false,
                e.to_string(),
                "the game stopped answering during the run: look at its console",
            );
        }
    }
    drop(env);
    Ok(finish(checks, &mut slot))
}

fn finish(checks: Vec<PreflightCheck>, slot: &mut GameSlot) -> Vec<PreflightCheck> {
    slot.shutdown();
    checks
}

/// `Ok` when every check passed, else the line that names the failed ones.
pub fn preflight_verdict(checks: &[PreflightCheck]) -> Result<String, String> {
    let failed: Vec<&str> = checks.iter().filter(|c| !c.ok).map(|c| c.name).collect();
    if failed.is_empty() {
        Ok(format!("all {} checks passed", checks.len()))
    } else {
        Err(format!("{} of {} checks failed: {}", failed.len(), checks.len(), failed.join(", ")))
    }
}
