//! `rulka tmi inspect`: what a collector makes of one game state — the
//! decoded `SimStateData` fields and the float vector it would feed the
//! network — for users checking a game setup; and `rulka tmi check`: a
//! preflight against a running (or launched) game.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rulka_config::{Config, ACTION_KEYS, N_ACTIONS};
use rulka_env::{physics_group, FloatBuilder, GameState, ProgressTracker, ZoneMap, ZoneParams};

use crate::{load_config, BadInput};

/// Connects to the game's TMInterface plugin (every later read or write
/// fails after `timeout`); a refusal is bad input that says how to check the game.
pub fn connect_to_game(
    host: &str,
    port: u16,
    timeout: std::time::Duration,
) -> Result<rulka_env::TmiClient, BadInput> {
    rulka_env::TmiClient::connect(host, port, timeout).map_err(|e| {
        BadInput(format!(
            "{e}\n  is the game running with the TMInterface plugin on port {port}? (`rulka tmi check --port {port}` tells)"
        ))
    })
}

/// Arguments of `rulka tmi inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A saved state: the bytes of `SaveState().ToArray()` (what the plugin
    /// sends for `get_simulation_state`, without its length prefix).
    pub state: PathBuf,
    /// The map's zone centres (`.npy`, N×3): without them only the fields are shown.
    #[arg(long)]
    pub zones: Option<PathBuf>,
    /// Config shaping the float vector (default: the built-in defaults).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Zone index of the collector's tracker. The tracker's zone is state: by
    /// default it is located from the position alone, which can pick the
    /// wrong pass where the line comes near itself (bridges, crossings).
    #[arg(long)]
    pub zone_idx: Option<usize>,
    /// The actions taken before this state, oldest first (e.g. `0,0,2`);
    /// default none, as at the start of a run.
    #[arg(long, value_delimiter = ',')]
    pub prev_actions: Vec<u8>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rulka tmi inspect`.
pub fn inspect(a: &InspectArgs) -> anyhow::Result<()> {
    let cfg = match &a.config {
        Some(p) => load_config(p)?,
        None => Config::default(),
    };
    let bytes =
        std::fs::read(&a.state).map_err(|e| BadInput(format!("{}: {e}", a.state.display())))?;
    let st =
        GameState::decode(&bytes).map_err(|e| BadInput(format!("{}: {e}", a.state.display())))?;
    if let Some(&bad) = a.prev_actions.iter().find(|&&x| usize::from(x) >= N_ACTIONS) {
        return Err(
            BadInput(format!("--prev-actions: action {bad} is not in 0..{N_ACTIONS}")).into()
        );
    }
    let floats = match &a.zones {
        Some(z) => Some(floats(&cfg, &st, z, a.zone_idx, &a.prev_actions)?),
        None => None,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json(&cfg, &st, floats.as_ref()))?);
    } else {
        print_text(&cfg, &st, &a.state, floats.as_ref());
    }
    Ok(())
}

struct Built {
    values: Vec<f32>,
    zone: usize,
    meters: f64,
}

fn floats(
    cfg: &Config,
    st: &GameState,
    zones: &Path,
    zone_idx: Option<usize>,
    prev: &[u8],
) -> anyhow::Result<Built> {
    let line = rulka_env::read_points(zones, 2).map_err(|e| BadInput(e.to_string()))?;
    let map = ZoneMap::new(&line, ZoneParams::from_config(cfg))
        .map_err(|e| BadInput(format!("{}: {e}", zones.display())))?;
    let builder = FloatBuilder::new(cfg);
    let mut tracker = ProgressTracker::new(&map, builder.n_prev());
    let pos = st.position.map(f64::from);
    tracker.zone = match zone_idx {
        Some(z) if z < 1 || z > map.last_index() => {
            return Err(BadInput(format!(
                "--zone-idx {z} is outside the map's zones 1..={}",
                map.last_index()
            ))
            .into())
        }
        Some(z) => z,
        None => map.locate(pos),
    };
    tracker.furthest = tracker.zone;
    for &p in prev {
        tracker.record_keys(ACTION_KEYS[usize::from(p)]);
    }
    let mut values = vec![0f32; builder.float_dim()];
    let progress = builder
        .build(st, &map, &mut tracker, &mut values)
        .with_context(|| "building the float vector")?;
    Ok(Built { values, zone: progress.zone, meters: progress.meters })
}

fn slices(cfg: &Config, values: &[f32]) -> Vec<(&'static str, Vec<f32>)> {
    let mut at = 0;
    rulka_config::float_layout(cfg)
        .into_iter()
        .map(|(name, len)| {
            let s = (name, values[at..at + len].to_vec());
            at += len;
            s
        })
        .collect()
}

fn json(cfg: &Config, st: &GameState, built: Option<&Built>) -> serde_json::Value {
    let wheels: Vec<serde_json::Value> = st
        .wheels
        .iter()
        .map(|w| {
            serde_json::json!({
                "damper_absorb": w.damper_absorb,
                "has_ground_contact": w.has_ground_contact,
                "contact_material_id": w.contact_material_id,
                "material": w.material(),
                "physics_group": physics_group(w.material()),
                "is_sliding": w.is_sliding,
            })
        })
        .collect();
    let mut v = serde_json::json!({
        "version": st.version,
        "context_mode": st.context_mode,
        "flags": st.flags,
        "rotation": st.rotation,
        "position": st.position,
        "linear_speed": st.linear_speed,
        "angular_speed": st.angular_speed,
        "gearbox_state": st.gearbox_state,
        "actual_rpm": st.actual_rpm,
        "gear": st.gear,
        "is_freewheeling": st.is_freewheeling,
        "wheels": wheels,
        "race_time": st.race_time(),
        "cp_states": st.cp_states,
        "cp_times": st.cp_times.iter().map(|t| [t.time, t.stunts_score]).collect::<Vec<_>>(),
    });
    if let Some(b) = built {
        v["zone_index"] = b.zone.into();
        v["meters_since_start"] = b.meters.into();
        v["floats"] = serde_json::json!(b.values);
        v["float_slices"] = serde_json::Value::Object(
            slices(cfg, &b.values)
                .into_iter()
                .map(|(n, x)| (n.to_string(), serde_json::json!(x)))
                .collect(),
        );
    }
    v
}

fn print_text(cfg: &Config, st: &GameState, path: &Path, built: Option<&Built>) {
    let f3 = |v: [f32; 3]| format!("[{:.4}, {:.4}, {:.4}]", v[0], v[1], v[2]);
    println!(
        "{}: SimStateData v{}, context {}, flags {:#04x}",
        path.display(),
        st.version,
        st.context_mode,
        st.flags
    );
    println!("  race time        {} ms", st.race_time());
    println!("  position         {}", f3(st.position));
    println!(
        "  linear speed     {}  (|v| {:.3} m/s)",
        f3(st.linear_speed),
        st.linear_speed.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
    );
    println!("  angular speed    {}", f3(st.angular_speed));
    for (i, row) in st.rotation.iter().enumerate() {
        println!("  rotation[{i}]      {}", f3(*row));
    }
    println!(
        "  gearbox {}  gear {}  rpm {:.1}  freewheeling {}",
        st.gearbox_state, st.gear, st.actual_rpm, st.is_freewheeling
    );
    for (i, w) in st.wheels.iter().enumerate() {
        println!(
            "  wheel {i}          damper {:.4}  contact {}  sliding {}  material {} (group {})",
            w.damper_absorb,
            w.has_ground_contact,
            w.is_sliding,
            w.material(),
            physics_group(w.material()).map_or("unknown".into(), |g| g.to_string())
        );
    }
    println!(
        "  checkpoints      states {:?}  times {:?}",
        st.cp_states,
        st.cp_times.iter().map(|t| t.time).collect::<Vec<_>>()
    );
    match built {
        None => println!("(pass --zones MAP.npy to see the float vector)"),
        Some(b) => {
            println!(
                "float vector ({} values; zone {}, {:.2} m since the start line):",
                b.values.len(),
                b.zone,
                b.meters
            );
            for (name, x) in slices(cfg, &b.values) {
                let shown: Vec<String> = x.iter().map(|v| format!("{v}")).collect();
                println!("  {name:<18} {}", shown.join(" "));
            }
        }
    }
}

/// Arguments of `rulka tmi check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The game's TMInterface port.
    #[arg(long)]
    pub port: u16,
    /// The run's config (maps, frame size; default: the built-in defaults
    /// with the simulator's track 0 as the map).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Launch the game first with the config's `environment.tmi.launch`
    /// (and end it afterwards).
    #[arg(long)]
    pub launch: bool,
}

/// Runs `rulka tmi check` ([`rulka_collector::preflight`]): each check with
/// its outcome and, when it fails, the fix. Exit 0 when all pass, 1 otherwise.
pub fn check(a: &CheckArgs) -> anyhow::Result<()> {
    let cfg = match &a.config {
        Some(p) => load_config(p)?,
        None => Config::default(),
    };
    let exe = std::env::current_exe().context("locating this binary")?;
    let checks = rulka_collector::preflight(&cfg, a.port, a.launch, exe, &mut std::io::stdout())
        .map_err(|e| BadInput(e.to_string()))?;
    match rulka_collector::preflight_verdict(&checks) {
        Ok(line) => {
            println!("{line}");
            Ok(())
        }
        Err(line) => anyhow::bail!(line),
    }
}
