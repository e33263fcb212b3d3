//! Demonstration shards and the recorder's pieces against independent
//! references: the 12 actions' key table, the race time of each head's
//! decision, a shard read back field for field, damage and foreign files
//! refused by name, a saved trajectory whose frames were not this track's.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::{Config, ACTION_KEYS};
use rulka_demos::{
    action_of_keys, decision_time_ms, drive_script, read_demos, replay_saved, write_demos, Demo,
    DemoError, SavedTrajectory,
};
use rulka_env::{InputTiming, SimEnv};

fn cfg(track_seeds: &str) -> Config {
    Config::from_yaml_str(
        &format!("environment: {{sim: {{track: easy, track_seeds: {track_seeds}}}}}\n"),
        "t.yaml",
    )
    .unwrap()
}

#[test]
fn keys_map_to_the_original_actions_and_left_with_right_to_none() {
    let mut mapped = 0;
    for bits in 0..16u8 {
        let keys = [bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0];
        match action_of_keys(keys) {
            Some(a) => {
                assert_eq!(ACTION_KEYS[a as usize], keys);
                mapped += 1;
            }
            None => assert!(keys[2] && keys[3], "{keys:?}"),
        }
    }
    assert_eq!(mapped, 12);
    assert_eq!(action_of_keys([true, false, false, false]), Some(0));
    assert_eq!(action_of_keys([false, true, false, true]), Some(8));
}

#[test]
fn each_heads_decision_takes_effect_at_its_engine_step() {
    // 5 engine steps of 10 ms per decision shared by 2 heads: 2 and 3 steps.
    let t = InputTiming { engine_ms: 10, engine_steps: 5, n_heads: 2 };
    assert_eq!(decision_time_ms(&t, 0, 0), 0);
    assert_eq!(decision_time_ms(&t, 0, 1), 20);
    assert_eq!(decision_time_ms(&t, 3, 0), 150);
    assert_eq!(decision_time_ms(&t, 3, 1), 170);
    let one = InputTiming { engine_ms: 10, engine_steps: 5, n_heads: 1 };
    assert_eq!(decision_time_ms(&one, 7, 0), 350);
}

#[test]
fn a_shard_reads_back_as_written_and_damage_is_named() {
    let c = cfg("[2]");
    let mut env = SimEnv::new(&c);
    // Accelerate, steer left from 1.00 s to 1.50 s.
    let script = "0.00 press up\n1.00 press left\n1.50 rel left\n";
    let d = drive_script(&c, &mut env, 2, "tap.inputs", script).unwrap();
    let step = |ms: usize| ms / 50;
    assert_eq!(d.actions[step(950)], 0);
    assert_eq!(d.actions[step(1000)], 1, "fwd+L from 1.00 s");
    assert_eq!(d.actions[step(1450)], 1);
    assert_eq!(d.actions[step(1500)], 0);
    assert_eq!(d.map, "sim2");
    assert_eq!(d.environment, "sim easy");
    assert_eq!(d.network_hash, c.network_hash());
    assert!(d.race_time_ms.is_some());
    let dir = tempfile::tempdir().unwrap();
    let written = write_demos(dir.path(), std::slice::from_ref(&d)).unwrap();
    assert_eq!(read_demos(dir.path(), &c).unwrap(), vec![d.clone()]);
    // Not finished: no race time, read back as such.
    let mut unfinished = d.clone();
    unfinished.race_time_ms = None;
    unfinished.source = "other.inputs".into();
    write_demos(dir.path(), std::slice::from_ref(&unfinished)).unwrap();
    let back = read_demos(dir.path(), &c).unwrap();
    assert!(back.contains(&unfinished) && back.contains(&d), "{}", back.len());
    // A cut shard.
    let bytes = std::fs::read(&written[0]).unwrap();
    std::fs::write(&written[0], &bytes[..bytes.len() - 10]).unwrap();
    let e = read_demos(dir.path(), &c).unwrap_err();
    assert!(matches!(e, DemoError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains(&written[0].display().to_string()), "{e}");
    // A safetensors file that is not a shard.
    std::fs::write(&written[0], &bytes).unwrap();
    let w = rulka_checkpoint::Weights::zeros(&rulka_network::Architecture::from_config(&c));
    w.write(&dir.path().join("a-checkpoint.safetensors"), &rulka_checkpoint::Meta::new(&c, 0))
        .unwrap();
    let e = read_demos(dir.path(), &c).unwrap_err();
    assert!(e.to_string().contains("a-checkpoint.safetensors: not a demonstration shard"), "{e}");
    assert_eq!(e.kind(), rulka_error::ErrorKind::BadInput);
}

#[test]
fn a_saved_trajectory_with_other_frames_is_refused_at_its_first_differing_step() {
    let c = cfg("[1]");
    let mut env = SimEnv::new(&c);
    let d: Demo = drive_script(&c, &mut env, 1, "flat.inputs", "0.00 press up\n").unwrap();
    let n = d.len();
    let saved = SavedTrajectory {
        group: 1,
        frames: d.frames.clone(),
        floats: d.floats.clone(),
        actions: d.actions.clone(),
        rewards: vec![0.0; n],
        log_probs: vec![0.0; n],
        values: vec![0.0; n],
    };
    let again = replay_saved(&c, &mut env, &saved, "t.jsonl:1").unwrap();
    assert_eq!(again.frames, d.frames);
    let mut other = saved.clone();
    other.frames[7 * d.frame_len + 3] ^= 0x40;
    let e = replay_saved(&c, &mut env, &other, "t.jsonl:1").unwrap_err();
    assert!(e.to_string().starts_with("t.jsonl:1: replayed on sim1"), "{e}");
    assert!(e.to_string().contains("from step 7"), "{e}");
    let mut short = saved.clone();
    short.actions.truncate(n - 5);
    let e = replay_saved(&c, &mut env, &short, "t.jsonl:2").unwrap_err();
    assert!(e.to_string().contains("past the"), "{e}");
}
