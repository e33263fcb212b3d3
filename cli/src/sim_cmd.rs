//! `rulka sim render`, `bench`, `serve` and `export-map`.

use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use rulka_config::{Config, TrackPreset};
use rulka_env::{overview_png, Autopilot, Environment, SimEnv, Status};

use crate::load_config;

/// `rulka sim render`: with a model, its line beside the autopilot's (SVG);
/// without, the autopilot's line and ego frames (PNG).
pub fn render_cmd(
    seed: u64,
    track: Option<TrackPreset>,
    model: Option<&Path>,
    config: Option<&Path>,
    out: Option<std::path::PathBuf>,
    ort: Option<&Path>,
) -> anyhow::Result<()> {
    let cfg = config.map(load_config).transpose()?;
    let preset =
        track.or(cfg.as_ref().map(|c| c.environment.sim.track)).unwrap_or(TrackPreset::Medium);
    match (model, cfg) {
        (Some(model), Some(mut cfg)) => {
            let out = out.unwrap_or_else(|| "track.svg".into());
            if out.extension().is_none_or(|e| e != "svg") {
                return Err(crate::BadInput(format!(
                    "--out {}: the policy's line is drawn as SVG; name an .svg file",
                    out.display()
                ))
                .into());
            }
            cfg.environment.sim.track = preset;
            crate::watch::render_policy(&cfg, model, seed, &out, ort)
        }
        (_, cfg) => render(cfg.as_ref(), seed, preset, &out.unwrap_or_else(|| "track.png".into())),
    }
}

/// Draws track `seed` of `preset` (or the `track_from` map of `base`) with
/// the autopilot's driven line to `out`, and three ego frames (the network's
/// view) next to it as `<out>-ego.png`.
pub fn render(
    base: Option<&Config>,
    seed: u64,
    preset: TrackPreset,
    out: &Path,
) -> anyhow::Result<()> {
    let mut cfg = base.cloned().unwrap_or_default();
    cfg.environment.sim.track = preset;
    cfg.environment.cutoff_rollout_if_race_not_finished_within_duration_ms = 600_000;
    let pilot = Autopilot::new(&cfg);
    let mut env = SimEnv::new(&cfg);
    env.reset(seed)?;
    let (fl, nf) = env.obs_sizes();
    let (w, h) = (cfg.nn.image_width as usize, cfg.nn.image_height as usize);
    let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
    let mut path = vec![env.car().pos];
    let mut egos = Vec::new();
    let status = loop {
        env.observe(&mut frame, &mut floats)?;
        if path.len() % 60 == 1 && egos.len() < 3 {
            egos.push(frame.clone());
        }
        let st = env.step(&[pilot.act(&floats)])?;
        path.push(env.car().pos);
        if st.is_done() {
            break st;
        }
    };
    let track = env.track().context("no track")?;
    std::fs::write(out, overview_png(track, &path, 640))
        .with_context(|| format!("writing {}", out.display()))?;
    // Ego frames side by side, 4× enlarged.
    let (sw, sh) = (w * 4, h * 4);
    let mut strip = vec![255u8; egos.len() * (sw + 8) * sh];
    let stride = egos.len() * (sw + 8);
    for (k, e) in egos.iter().enumerate() {
        for y in 0..sh {
            for x in 0..sw {
                strip[y * stride + k * (sw + 8) + x] = e[(y / 4) * w + x / 4];
            }
        }
    }
    let ego_path = out.with_file_name(format!(
        "{}-ego.png",
        out.file_stem().map_or("track".into(), |s| s.to_string_lossy().into_owned())
    ));
    std::fs::write(&ego_path, rulka_env::encode_png(stride as u32, sh as u32, 1, &strip))
        .with_context(|| format!("writing {}", ego_path.display()))?;
    let how = match status {
        Status::Finished { race_time_ms } => format!("finished in {:.2} s", race_time_ms / 1000.0),
        other => format!("{other:?}"),
    };
    println!(
        "{}: {:.0} m, {:.0} m wide; autopilot {how}\nwrote {} and {}",
        crate::watch::track_label(&cfg, seed),
        track.length(),
        track.width,
        out.display(),
        ego_path.display()
    );
    Ok(())
}

/// Simulator decisions per second on one core, with and without rendering
/// the frame (floats are always built), driving the autopilot over seeds 0..
pub fn bench(config: &Path, seconds: f64) -> anyhow::Result<()> {
    let cfg = load_config(config)?;
    let pilot = Autopilot::new(&cfg);
    let mut env = SimEnv::new(&cfg);
    let (fl, nf) = env.obs_sizes();
    let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
    println!(
        "simulator: {:?} tracks, frame {}x{}, {} floats, {} ms per decision",
        cfg.environment.sim.track,
        cfg.nn.image_width,
        cfg.nn.image_height,
        nf,
        cfg.ms_per_action()
    );
    let mut results = Vec::new();
    for render in [true, false] {
        let t0 = Instant::now();
        let (mut steps, mut seed) = (0u64, 0u64);
        env.reset(seed)?;
        while t0.elapsed().as_secs_f64() < seconds {
            if render {
                env.observe(&mut frame, &mut floats)?;
            } else {
                env.floats(&mut floats)?;
            }
            steps += 1;
            if env.step(&[pilot.act(&floats)])?.is_done() {
                seed += 1;
                env.reset(seed)?;
            }
        }
        let rate = steps as f64 / t0.elapsed().as_secs_f64();
        println!(
            "  {:<22} {:>10.0} decisions/s ({:.1} µs each)",
            if render { "with rendering" } else { "floats only" },
            rate,
            1e6 / rate
        );
        results.push(rate);
    }
    println!("  rendering costs {:.0}% of a decision", 100.0 * (1.0 - results[0] / results[1]));
    Ok(())
}

/// Serves `config`'s simulator on `127.0.0.1:port` over the TMInterface
/// protocol until killed: `rulka collect --env tmi` (or a run with
/// `environment.kind: tmi`) drives it as it would drive the game. Its maps
/// are the simulator's tracks: `map <seed>` loads track `seed` of the
/// config's preset (`rulka sim export-map` writes its zone centres).
pub fn serve(config: &Path, port: u16, faults: &ServeFaults) -> anyhow::Result<()> {
    let cfg = load_config(config)?;
    let fault = faults.fault()?;
    if let Some(s) = faults.refuse_for_s.filter(|&s| s > 0.0) {
        println!("refusing connections for {s} s (fault injection): not listening yet");
        std::thread::sleep(std::time::Duration::from_secs_f64(s));
    }
    let server = match faults.autopilot {
        Some(v) => rulka_env::SimServer::self_driving(&cfg, port, fault, v),
        None => rulka_env::SimServer::start(&cfg, port, fault),
    }
    .with_context(|| format!("listening on 127.0.0.1:{port}"))?;
    println!(
        "TMInterface-protocol simulator on 127.0.0.1:{} (Ctrl-C to stop){}{}",
        server.port(),
        faults.autopilot.map_or(String::new(), |v| format!("; driving itself at up to {v} m/s")),
        if fault == rulka_env::SimServerFault::None {
            String::new()
        } else {
            format!("; fault injection: {fault:?}")
        }
    );
    server.wait();
    Ok(())
}

/// `rulka sim serve`'s fault switches: the test game misbehaves on purpose,
/// as real games do (at most one of the step faults, plus `--refuse-for-s`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeFaults {
    /// Stop answering after N run steps (a hung game).
    #[arg(long, value_name = "N")]
    pub hang_after_steps: Option<usize>,
    /// Exit (code 3) after N run steps (a game that crashes).
    #[arg(long, value_name = "N")]
    pub exit_after_steps: Option<usize>,
    /// After N run steps, close the socket in the middle of a message.
    #[arg(long, value_name = "N")]
    pub close_mid_message_after_steps: Option<usize>,
    /// After N run steps, answer state requests with bytes that are not a state.
    #[arg(long, value_name = "N")]
    pub corrupt_state_after_steps: Option<usize>,
    /// After N run steps, send no more steps (a game left at speed 0).
    #[arg(long, value_name = "N")]
    pub stop_steps_after: Option<usize>,
    /// After N run steps, the car jumps 30 m along the road (a respawn or a
    /// cut; with --autopilot).
    #[arg(long, value_name = "N", requires = "autopilot")]
    pub jump_after_steps: Option<usize>,
    /// Refuse connections (do not listen) for the first S seconds.
    #[arg(long, value_name = "S", value_parser = rulka_cli::numbers::non_negative, allow_hyphen_values = true)]
    pub refuse_for_s: Option<f64>,
    /// Drive itself: on connect, track 0 loads and the car follows its
    /// centreline up to SPEED m/s, whatever inputs are set (as the game plays
    /// a replay; for `rulka map record`).
    #[arg(long, value_name = "SPEED", value_parser = autopilot_speed, allow_hyphen_values = true)]
    pub autopilot: Option<f64>,
}

/// `--autopilot`: a speed in m/s above 0 and at most 50 (the autopilot
/// puts one point of its line, 0.5 m apart, per engine step of 10 ms).
fn autopilot_speed(s: &str) -> Result<f64, String> {
    let v = rulka_cli::numbers::positive(s)?;
    if v <= 50.0 {
        Ok(v)
    } else {
        Err(format!("{v} m/s: a speed above 0 and at most 50 (one point of 0.5 m per engine step)"))
    }
}

impl ServeFaults {
    fn fault(&self) -> anyhow::Result<rulka_env::SimServerFault> {
        use rulka_env::SimServerFault;
        let set: Vec<SimServerFault> = [
            self.hang_after_steps.map(|steps| SimServerFault::HangAfterSteps { steps }),
            self.exit_after_steps.map(|steps| SimServerFault::ExitAfterSteps { steps }),
            self.close_mid_message_after_steps
                .map(|steps| SimServerFault::CloseMidMessageAfterSteps { steps }),
            self.corrupt_state_after_steps
                .map(|steps| SimServerFault::CorruptStateAfterSteps { steps }),
            self.stop_steps_after.map(|steps| SimServerFault::StopStepsAfter { steps }),
            self.jump_after_steps.map(|steps| SimServerFault::JumpAfterSteps { steps }),
        ]
        .into_iter()
        .flatten()
        .collect();
        match set.as_slice() {
            [] => Ok(SimServerFault::None),
            [one] => Ok(*one),
            more => Err(crate::BadInput(format!(
                "one step fault at a time, got {}: {more:?}",
                more.len()
            ))
            .into()),
        }
    }
}

/// Writes track `seed`'s reference line as a zone-centre `.npy` (what a game
/// map's `maps/*.npy` is), for `environment.tmi.maps` against `rulka sim serve`.
pub fn export_map(seed: u64, preset: TrackPreset, out: &Path) -> anyhow::Result<()> {
    let track = rulka_env::Track::generate(seed, preset);
    let line = rulka_env::reference_line(&track);
    rulka_env::write_points(out, &line).map_err(|e| crate::BadInput(e.to_string()))?;
    println!(
        "wrote {}: {} points 0.5 m apart ({:.0} m, track {seed} {preset:?}); with rulka sim serve its map_path is \"{seed}\"",
        out.display(),
        line.len(),
        track.length()
    );
    Ok(())
}
