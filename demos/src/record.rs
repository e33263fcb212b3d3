//! Drives made into demonstrations: an action source (an input script's
//! keys, a saved trajectory's actions) driven through an [`Environment`]
//! from the start of a track, observed step by step as a collector does.

use rulka_config::{ingredients, prompt_name, Config, ACTION_KEYS};
use rulka_env::{Environment, InputScript, InputTiming, Status};

use crate::shard::environment_label;
use crate::{Demo, DemoError, SavedTrajectory};

/// Drives `env` on track `track_seed` from its start, asking `decide` for
/// each decision's actions (one per head) by decision index and the raw
/// floats the network sees then, until the
/// environment finishes or cuts the drive off; records every state as a
/// collector does (the terminal state too, with the last actions repeated:
/// they are never executed). `source` names the drive in errors.
pub fn drive<E: Environment>(
    cfg: &Config,
    env: &mut E,
    track_seed: u64,
    source: &str,
    mut decide: impl FnMut(usize, &[f32]) -> Result<Vec<u8>, DemoError>,
) -> Result<Demo, DemoError> {
    let env_err = |e: rulka_env::EnvError| DemoError::Env { drive: source.to_string(), error: e };
    env.reset(track_seed).map_err(env_err)?;
    let (frame_len, n_floats) = env.obs_sizes();
    let n_heads = cfg.n_action_heads();
    let mut d = Demo {
        source: source.to_string(),
        map: prompt_name(cfg, track_seed),
        track_seed,
        environment: environment_label(cfg),
        network_hash: cfg.network_hash(),
        frame_len,
        n_floats,
        n_heads,
        ..Demo::default()
    };
    let (mut frame, mut floats) = (vec![0u8; frame_len], vec![0f32; n_floats]);
    let mut status = Status::Running;
    let mut last = vec![0u8; n_heads];
    for k in 0.. {
        env.observe(&mut frame, &mut floats).map_err(env_err)?;
        let ing = env.ingredients();
        if !status.is_done() {
            last = decide(k, &floats)?;
        }
        d.frames.extend_from_slice(&frame);
        d.floats.extend_from_slice(&floats);
        d.actions.extend(last.iter().map(|&a| i32::from(a)));
        d.ingredients.extend_from_slice(&ing);
        match status {
            Status::Running => status = env.step(&last).map_err(env_err)?,
            Status::Finished { race_time_ms } => {
                d.race_time_ms = Some(race_time_ms);
                break;
            }
            Status::CutOff(_) => break,
        }
    }
    let moved = d.meters(d.len() - 1) - d.meters(0);
    if moved <= 0.0 {
        let t = d.ingredients[(d.len() - 1) * ingredients::COUNT + ingredients::RACE_TIME_MS];
        return Err(DemoError::NeverStarted {
            drive: source.to_string(),
            message: format!(
                "the car never left the start on {} (cut off at {:.2} s with {moved:.1} m advanced)",
                d.map,
                f64::from(t) / 1000.0
            ),
        });
    }
    Ok(d)
}

/// The action index of `keys` (`[accelerate, brake, left, right]`), if it
/// is one of the 12.
pub fn action_of_keys(keys: [bool; 4]) -> Option<u8> {
    ACTION_KEYS.iter().position(|k| *k == keys).map(|i| i as u8)
}

/// The race time (ms) at which head `h` of decision `k` takes effect.
pub fn decision_time_ms(timing: &InputTiming, k: usize, h: usize) -> u64 {
    let steps = timing.engine_steps.max(1) as usize;
    let heads = timing.n_heads.max(1);
    let before: usize = (0..h).map(|i| rulka_env::head_engine_steps(steps, heads, i)).sum();
    ((k * steps + before) as u64) * u64::from(timing.engine_ms)
}

/// Drives the input script `text` (the file `file`) on `track_seed`: each
/// decision takes the keys the script holds when it takes effect. A script
/// the parser rejects, keys that are no action (left and right together)
/// and a drive that never leaves the start are errors naming the file.
pub fn drive_script<E: Environment>(
    cfg: &Config,
    env: &mut E,
    track_seed: u64,
    file: &str,
    text: &str,
) -> Result<Demo, DemoError> {
    let script = InputScript::parse(text)
        .map_err(|error| DemoError::Script { file: file.to_string(), error })?;
    let timing = InputTiming::from_config(cfg);
    drive(cfg, env, track_seed, file, |k, _| {
        (0..timing.n_heads.max(1))
            .map(|h| {
                let t = decision_time_ms(&timing, k, h);
                let keys = script.keys_at(t);
                action_of_keys(keys).ok_or_else(|| DemoError::Keys {
                    file: file.to_string(),
                    at_ms: t,
                    keys,
                })
            })
            .collect()
    })
}

/// The simulator's scripted autopilot ([`rulka_env::Autopilot`], which
/// reads only the floats, so any environment) driving track `track_seed`,
/// every head taking its action; the source is `autopilot:<seed>`.
pub fn drive_autopilot<E: Environment>(
    cfg: &Config,
    env: &mut E,
    track_seed: u64,
) -> Result<Demo, DemoError> {
    let pilot = rulka_env::Autopilot::new(cfg);
    let heads = cfg.n_action_heads();
    drive(cfg, env, track_seed, &format!("autopilot:{track_seed}"), |_, floats| {
        Ok(vec![pilot.act(floats); heads])
    })
}

/// Drives a saved trajectory's actions again on its track (`group`) and
/// checks that the environment shows what it showed then: the same frames
/// and floats at every step and the same length. Anything else means it was
/// driven on another map or with another config (an error naming `source`,
/// `FILE:LINE`, and the first step that differs).
pub fn replay_saved<E: Environment>(
    cfg: &Config,
    env: &mut E,
    saved: &SavedTrajectory,
    source: &str,
) -> Result<Demo, DemoError> {
    let heads = cfg.n_action_heads();
    let n = saved.len();
    let d = drive(cfg, env, saved.group, source, |k, _| {
        let row = saved.actions.get(k * heads..(k + 1) * heads).ok_or_else(|| {
            DemoError::Mismatch {
                path: source.into(),
                message: format!(
                    "replayed on {}, the drive goes on past the {n} saved steps: not driven on this config's track",
                    prompt_name(cfg, saved.group)
                ),
            }
        })?;
        Ok(row.iter().map(|&a| a.clamp(0, 11) as u8).collect())
    })?;
    let fl = d.frame_len;
    let nf = d.n_floats;
    let differs = (0..d.len().min(n)).find(|&k| {
        let frames_differ = !saved.frames.is_empty()
            && saved.frames.get(k * fl..(k + 1) * fl) != d.frames.get(k * fl..(k + 1) * fl);
        let floats_differ = saved.floats.get(k * nf..(k + 1) * nf).is_none_or(|s| {
            s.iter().zip(&d.floats[k * nf..(k + 1) * nf]).any(|(a, b)| (a - b).abs() > 1e-4)
        });
        frames_differ || floats_differ
    });
    if let Some(k) = differs.or((d.len() != n).then_some(d.len().min(n))) {
        return Err(DemoError::Mismatch {
            path: source.into(),
            message: format!(
                "replayed on {} the saved actions show other observations from step {k} ({} steps saved, {} replayed): not driven on this config's track",
                d.map,
                n,
                d.len()
            ),
        });
    }
    Ok(d)
}
