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

/// `d` as a run saves it (`--save-trajectories`) on track `group`.
fn saved_of(d: &Demo, group: u64) -> SavedTrajectory {
    let n = d.len();
    SavedTrajectory {
        group,
        frames: d.frames.clone(),
        floats: d.floats.clone(),
        actions: d.actions.clone(),
        rewards: vec![0.0; n],
        log_probs: vec![0.0; n],
        values: vec![0.0; n],
        id: None,
    }
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
    let saved = saved_of(&d, 1);
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

/// A safetensors file of `(name, dtype, shape, bytes)` with `meta`, written
/// by hand (not by the code under test).
fn safetensors(meta: &serde_json::Value, parts: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), meta.clone());
    let mut off = 0;
    for (name, dtype, shape, data) in parts {
        header.insert(
            (*name).into(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + data.len()]}),
        );
        off += data.len();
    }
    let json = serde_json::Value::Object(header).to_string();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    for (_, _, _, data) in parts {
        out.extend_from_slice(data);
    }
    out
}

#[test]
fn a_recorded_drive_names_its_source_track_and_progress() {
    let c = cfg("[2]");
    let mut env = SimEnv::new(&c);
    let d = drive_script(&c, &mut env, 2, "runs/x/best_runs/sim2_9.99.inputs", "0.00 press up\n")
        .unwrap();
    assert_eq!(d.source, "runs/x/best_runs/sim2_9.99.inputs");
    assert_eq!(d.track_seed, 2);
    assert!(!d.is_empty() && Demo::default().is_empty());
    let k = rulka_config::ingredients::COUNT;
    for i in [0, 5, d.len() - 1] {
        assert_eq!(d.meters(i), d.ingredients[i * k + rulka_config::ingredients::METERS]);
    }
    assert_eq!(d.meters(0), 0.0);
    assert!(d.meters(d.len() - 1) > 100.0, "a finished easy track is longer");
    let name = d.file_name();
    assert!(name.starts_with("sim2_sim2_9.99_") && name.ends_with(".safetensors"), "{name}");
    let mut odd = d.clone();
    odd.map = "A01 Race/1".into();
    assert!(odd.file_name().starts_with("A01_Race_1_sim2_9.99_"), "{}", odd.file_name());
}

#[test]
fn a_car_that_never_moves_is_refused_with_where_it_stopped() {
    let c = cfg("[1]");
    let mut env = SimEnv::new(&c);
    let e = drive_script(&c, &mut env, 1, "brake.inputs", "0.00 press down\n").unwrap_err();
    assert!(matches!(e, DemoError::NeverStarted { .. }), "{e}");
    // No progress for 2 s (`cutoff_rollout_if_no_vcp_passed_within_duration_ms`):
    // cut off at the first decision after, 2.05 s.
    assert_eq!(
        e.to_string(),
        "brake.inputs: the car never left the start on sim1 (cut off at 2.05 s with 0.0 m advanced)"
    );
    assert_eq!(e.kind(), rulka_error::ErrorKind::BadInput);
}

#[test]
fn the_autopilot_drives_as_it_does_alone() {
    use rulka_env::{Autopilot, Environment, Status};
    let c = cfg("[4]");
    let mut env = SimEnv::new(&c);
    let d = rulka_demos::drive_autopilot(&c, &mut env, 4).unwrap();
    // The same autopilot driven by hand through the simulator.
    let pilot = Autopilot::new(&c);
    env.reset(4).unwrap();
    let (fl, nf) = env.obs_sizes();
    let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
    let mut actions = Vec::new();
    let race = loop {
        env.observe(&mut frame, &mut floats).unwrap();
        let a = pilot.act(&floats);
        actions.push(i32::from(a));
        if let Status::Finished { race_time_ms } = env.step(&[a]).unwrap() {
            break race_time_ms;
        }
    };
    assert_eq!(d.race_time_ms, Some(race));
    assert_eq!(&d.actions[..actions.len()], &actions[..]);
    assert_eq!(d.source, "autopilot:4");
}

#[test]
fn replays_compare_every_head_and_every_float() {
    // Two heads per decision: 10 ms each (the original's multi-head timing).
    let c = Config::from_yaml_str(
        "environment: {rl_action_offsets_ms: [0, 10], sim: {track: easy, track_seeds: [3]}}\n",
        "t.yaml",
    )
    .unwrap();
    let mut env = SimEnv::new(&c);
    let script =
        "0.00 press up\n0.01 press left\n0.03 rel left\n1.00 press right\n1.03 rel right\n";
    let d = drive_script(&c, &mut env, 3, "two.inputs", script).unwrap();
    assert_eq!(d.n_heads, 2);
    assert_eq!(d.actions[..4], [0, 1, 1, 0], "heads at 0, 10, 20 and 30 ms");
    let saved = saved_of(&d, 3);
    let again = replay_saved(&c, &mut env, &saved, "s.jsonl:1").unwrap();
    assert_eq!(again.actions, d.actions);
    // A float off by 0.01 at step 9: refused there; by 1e-6: the same drive.
    let mut off = saved.clone();
    off.floats[9 * d.n_floats + 2] += 0.01;
    let e = replay_saved(&c, &mut env, &off, "s.jsonl:1").unwrap_err();
    assert!(e.to_string().contains("from step 9"), "{e}");
    let mut close = saved.clone();
    close.floats[9 * d.n_floats + 2] += 1e-6;
    replay_saved(&c, &mut env, &close, "s.jsonl:1").unwrap();
}

#[test]
fn shards_whose_shapes_disagree_or_that_belong_elsewhere_are_refused() {
    let c = cfg("[2]");
    let mut env = SimEnv::new(&c);
    let d = drive_script(&c, &mut env, 2, "flat.inputs", "0.00 press up\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let n = d.len();
    let k = rulka_config::ingredients::COUNT;
    let meta = serde_json::json!({"format": "rulka.demos", "format_version": "1",
        "network_hash": c.network_hash(), "map": "sim2", "track_seed": "2",
        "environment": "sim easy", "source": "x", "race_time_ms": "", "steps": n.to_string()});
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let i32s = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let shard = |rows: [usize; 4], ingr_cols: usize| {
        let [fr, fl, ac, ing] = rows;
        safetensors(
            &meta,
            &[
                ("actions", "I32", vec![ac, 1], i32s(&d.actions[..ac])),
                ("floats", "F32", vec![fl, d.n_floats], f32s(&d.floats[..fl * d.n_floats])),
                ("frames", "U8", vec![fr, d.frame_len], d.frames[..fr * d.frame_len].to_vec()),
                ("ingredients", "F32", vec![ing, ingr_cols], vec![0u8; 4 * ing * ingr_cols]),
            ],
        )
    };
    let path = dir.path().join("s.safetensors");
    // Read by hand-written bytes first: the whole shard is fine.
    std::fs::write(&path, shard([n, n, n, n], k)).unwrap();
    assert_eq!(read_demos(dir.path(), &c).unwrap()[0].len(), n);
    for (rows, cols) in
        [([n - 1, n, n, n], k), ([n, n, n - 1, n], k), ([n, n, n, n - 1], k), ([n, n, n, n], k + 1)]
    {
        std::fs::write(&path, shard(rows, cols)).unwrap();
        let e = read_demos(dir.path(), &c).unwrap_err();
        assert!(e.to_string().contains("disagree"), "{rows:?} {cols}: {e}");
    }
    // The same shard for another track preset (same maps' names) or a map
    // the config does not train on.
    std::fs::write(&path, shard([n, n, n, n], k)).unwrap();
    let medium =
        Config::from_yaml_str("environment: {sim: {track: medium, track_seeds: [2]}}\n", "m")
            .unwrap();
    let e = read_demos(dir.path(), &medium).unwrap_err();
    assert!(
        e.to_string()
            .contains("map sim2 (sim easy) is not one the config trains on (sim medium: sim2)"),
        "{e}"
    );
    let e = read_demos(dir.path(), &cfg("[5, 6]")).unwrap_err();
    assert!(e.to_string().contains("(sim easy: sim5, sim6)"), "{e}");
    // A shard claiming the config's network with other floats per step.
    let wider = Config::from_yaml_str(
        "environment: {n_zone_centers_in_inputs: 12, sim: {track: easy, track_seeds: [2]}}\n",
        "w",
    )
    .unwrap();
    let mut m = meta.clone();
    m["network_hash"] = serde_json::json!(wider.network_hash());
    let bytes = safetensors(
        &m,
        &[
            ("actions", "I32", vec![n, 1], i32s(&d.actions)),
            ("floats", "F32", vec![n, d.n_floats], f32s(&d.floats)),
            ("frames", "U8", vec![n, d.frame_len], d.frames.clone()),
            ("ingredients", "F32", vec![n, k], f32s(&d.ingredients)),
        ],
    );
    std::fs::write(&path, bytes).unwrap();
    let e = read_demos(dir.path(), &wider).unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            "{} floats and 1 heads per step; the config has {} and 1",
            d.n_floats,
            wider.float_input_dim()
        )),
        "{e}"
    );
}

#[test]
fn keys_that_are_no_action_are_named() {
    let c = cfg("[1]");
    let mut env = SimEnv::new(&c);
    let e = drive_script(&c, &mut env, 1, "lr.inputs", "0.00 press left\n0.00 press right\n")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "lr.inputs: at 0.00 s the keys held (left+right) are not one of the 12 actions"
    );
    let e = drive_script(
        &c,
        &mut env,
        1,
        "all.inputs",
        "0.00-1.00 press up\n0.00-1.00 press down\n0.50 press left\n0.50 press right\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().ends_with(
            "at 0.50 s the keys held (up+down+left+right) are not one of the 12 actions"
        ),
        "{e}"
    );
    assert_eq!(e.kind(), rulka_error::ErrorKind::BadInput);
}

/// Shards recorded for one network are refused for another whose
/// observations have the same shapes (a wider hidden layer): only the
/// network hash tells them apart, and the refusal names both.
#[test]
fn shards_of_another_network_with_the_same_observations_are_refused_by_hash() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg("[2]");
    let mut env = rulka_env::SimEnv::new(&c);
    let d = drive_script(&c, &mut env, 2, "flat.inputs", "0.00 press up\n").unwrap();
    write_demos(dir.path(), std::slice::from_ref(&d)).unwrap();
    assert_eq!(read_demos(dir.path(), &c).unwrap().len(), 1, "its own network reads it");
    let mut wider = c.clone();
    wider.nn.dense_hidden_dim *= 2;
    assert_eq!(wider.float_input_dim(), c.float_input_dim());
    assert_ne!(wider.network_hash(), c.network_hash());
    let e = read_demos(dir.path(), &wider).unwrap_err().to_string();
    assert!(
        e.contains(&format!("recorded for network {}", c.network_hash()))
            && e.contains(&wider.network_hash()),
        "{e}"
    );
}
