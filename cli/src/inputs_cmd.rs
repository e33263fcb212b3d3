//! `rulka inputs play`: an input script (a best run the trainer kept, or any
//! TMInterface script of timed `press`/`rel`) played into the game or `rulka
//! sim serve` from the start of a race, the keys set at every engine step;
//! reports the race time at the finish.

use std::path::PathBuf;
use std::time::Duration;

use rulka_env::{fmt_race_time, GameState, InputScript, TmiSync};

use crate::BadInput;

/// Arguments of `rulka inputs play`.
#[derive(Debug, clap::Args)]
pub struct PlayArgs {
    /// The input script.
    pub file: PathBuf,
    /// Port of the game's TMInterface plugin (or of `rulka sim serve`).
    #[arg(long)]
    pub port: u16,
    /// Host of the plugin.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Load this map first (`map NAME`; for `rulka sim serve` a track seed);
    /// without it the current map's race is restarted.
    #[arg(long)]
    pub map: Option<String>,
    /// Seconds of race time after the script's last input to wait for the finish.
    #[arg(long, default_value_t = 10.0, value_parser = rulka_cli::numbers::non_negative, allow_hyphen_values = true)]
    pub grace_s: f64,
}

/// Runs `rulka inputs play`: exit 0 with the race time at the finish; an
/// error when the car has not finished `--grace-s` after the last input.
pub fn play(a: &PlayArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| BadInput(format!("{}: {e}", a.file.display())))?;
    let script =
        InputScript::parse(&text).map_err(|e| BadInput(format!("{}: {e}", a.file.display())))?;
    let give_up_at = script.end_ms() + (a.grace_s.max(0.0) * 1000.0) as u64;
    let mut cl = crate::tmi_cmd::connect_to_game(&a.host, a.port, Duration::from_secs(60))?;
    let mut started = false;
    loop {
        let call = cl.read_sync()?;
        match call {
            TmiSync::OnConnect => {
                // Every engine step: a key change lands on the step the script names.
                cl.set_on_step_period(10)?;
                match &a.map {
                    Some(m) => cl.execute_command(&format!("map {m}"))?,
                    None => cl.give_up()?,
                }
                println!("playing {} ({} key events)", a.file.display(), script.events.len());
            }
            TmiSync::RunStep(t) => {
                let keys = if t >= 0 { script.keys_at(t as u64) } else { [false; 4] };
                if t <= 0 {
                    started = true;
                }
                let [gas, brake, left, right] = keys;
                cl.set_input_state(left, right, gas, brake)?;
                if started && t >= 0 && t as u64 > give_up_at {
                    cl.respond(&call)?;
                    return Err(BadInput(format!(
                        "no finish by {} ({} s after the script's last input at {})",
                        fmt_race_time(t),
                        a.grace_s,
                        fmt_race_time(script.end_ms() as i32)
                    ))
                    .into());
                }
            }
            TmiSync::CheckpointCount(current, target)
                if started && current == target && target > 0 =>
            {
                let st = GameState::decode(&cl.get_simulation_state()?)?;
                cl.respond(&call)?;
                let t = st.race_time();
                println!("finished in {} ({t} ms)", fmt_race_time(t));
                return Ok(());
            }
            _ => {}
        }
        cl.respond(&call)?;
    }
}
