//! Behaviour of the strict config loader on the shipped presets and on bad input.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;

use rulka_config::{Algorithm, Config, ConfigError, GrpoObjective};

fn preset(name: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    Config::from_file(&path).unwrap_or_else(|e| panic!("{name} must load: {e}"))
}

fn err(yaml: &str) -> ConfigError {
    Config::from_yaml_str(yaml, "t.yaml").expect_err("must be rejected")
}

#[test]
fn presets_load_with_the_originals_values() {
    let g = preset("grpo.yaml");
    assert_eq!(g.training.algorithm, Algorithm::Grpo);
    assert_eq!(g.grpo.group_size, 128);
    assert_eq!(g.grpo.update_epochs, 10);
    assert_eq!(g.grpo.objective, GrpoObjective::Reinforce);
    // 27 + 3*40 + 4*25 + 4*4 + 1 (rulka-python.md §4: 264 for the RL presets)
    assert_eq!(g.float_input_dim(), 264);
    let ent = g.grpo.ent_coef_schedule.as_ref().unwrap();
    assert!((ent.linear_at(5e6) - (0.5 + (0.01 - 0.5) * 0.5)).abs() < 1e-12);

    let p = preset("ppo.yaml");
    assert_eq!(p.training.algorithm, Algorithm::Ppo);
    assert_eq!(p.ppo.clip_coef_vf, Some(0.2));
    assert_eq!(p.collectors.count, 8);
    // ent schedule [[0,0.5],[30k,0.01],...]: halfway to 30k frames
    assert!((p.ppo.ent_coef_schedule.as_ref().unwrap().linear_at(15_000.0) - 0.255).abs() < 1e-12);

    let d = preset("dpo.yaml");
    assert_eq!(d.training.algorithm, Algorithm::Dpo);
    assert_eq!(d.dpo.pair_buffer_max, 2);
    assert_eq!(d.dpo.update_epochs, 1);
}

#[test]
fn speedslide_window_is_a_step_between_5m_and_15m() {
    let g = preset("grpo.yaml");
    let s = &g.rewards.engineered_speedslide_reward_schedule;
    assert_eq!(s.linear_at(4.9e6), 0.0);
    assert_eq!(s.linear_at(1e7), 0.001);
    assert_eq!(s.linear_at(1.6e7), 0.0);
}

#[test]
fn defaults_follow_the_original_schema() {
    let c = Config::from_yaml_str("", "empty.yaml").unwrap();
    assert_eq!(c.float_input_dim(), 184);
    assert_eq!(c.grpo.group_size, 4);
    assert_eq!(c.ppo.rollout_steps_per_update, 2048);
    assert_eq!(c.dpo.beta, 0.1);
    assert_eq!(c.ms_per_action(), 50);
    assert_eq!(c.n_action_heads(), 1);
}

#[test]
fn misspelled_key_names_file_key_and_alternatives() {
    let e = err("grpo:\n  group_sise: 8\n").to_string();
    assert!(e.starts_with("t.yaml: grpo.group_sise: unknown field `group_sise`"), "{e}");
    assert!(e.contains("`group_size`"), "{e}");
    let e = err("nn:\n  cnn:\n    use_impala: true\n").to_string();
    assert!(e.starts_with("t.yaml: nn.cnn.use_impala: unknown field"), "{e}");
    let e = err("trainig: {}\n").to_string();
    assert!(e.starts_with("t.yaml: trainig: unknown field"), "{e}");
}

#[test]
fn wrong_type_names_the_key() {
    let e = err("ppo:\n  gamma: fast\n").to_string();
    assert!(e.starts_with("t.yaml: ppo.gamma: invalid type"), "{e}");
    let e = err("training:\n  algorithm: sac\n").to_string();
    assert!(e.contains("training.algorithm"), "{e}");
    assert!(e.contains("ppo") && e.contains("grpo") && e.contains("dpo"), "{e}");
}

#[test]
fn out_of_range_values_are_all_reported() {
    let e = err("ppo:\n  gamma: 1.5\ngrpo:\n  group_size: 1\ncollectors:\n  count: 0\n");
    let ConfigError::Invalid { problems, .. } = &e else { panic!("{e}") };
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["ppo.gamma", "grpo.group_size", "collectors.count"]);
    assert!(e.to_string().contains("t.yaml: ppo.gamma: 1.5 is out of range"), "{e}");
}

#[test]
fn cross_field_rules() {
    let e = err("environment:\n  rl_action_offsets_ms: [0, 20]\n").to_string();
    assert!(e.contains("environment.rl_action_offsets_ms"), "{e}");
    assert!(Config::from_yaml_str("environment:\n  rl_action_offsets_ms: [0, 10, 20]\n", "ok")
        .is_ok_and(|c| c.n_action_heads() == 3));
    let e = err("nn:\n  image_width: 32\n").to_string();
    assert!(e.contains("nn.image_width: 32 px is too small"), "{e}");
    // the IMPALA stem and float-only policies have no such minimum
    assert!(Config::from_yaml_str("nn:\n  image_width: 32\n  cnn: {use_impala_cnn: true}\n", "ok")
        .is_ok());
    assert!(Config::from_yaml_str("nn:\n  image_width: 8\n  no_image: true\n", "ok").is_ok());
    let e = err("dpo:\n  data_mode: offline\n").to_string();
    assert!(e.contains("dpo.offline_pairs_jsonl: required"), "{e}");
    let e = err("ppo:\n  gamma_schedule: [[10, 0.9], [5, 0.99]]\n").to_string();
    assert!(e.contains("ppo.gamma_schedule: frames must be non-decreasing"), "{e}");
    let e = err("nn:\n  fusion_mode: unified\n").to_string();
    assert!(e.contains("nn.fusion_mode") && e.contains("not implemented"), "{e}");
}

#[test]
fn network_hash_tracks_only_network_shape() {
    let a = Config::default();
    let mut b = a.clone();
    b.ppo.gamma = 0.9;
    assert_eq!(a.network_hash(), b.network_hash());
    b.nn.dense_hidden_dim = 512;
    assert_ne!(a.network_hash(), b.network_hash());
    let mut c = a.clone();
    c.environment.n_prev_actions_in_inputs = 25;
    assert_ne!(a.network_hash(), c.network_hash());
}

#[test]
fn resolved_yaml_round_trips() {
    let g = preset("grpo.yaml");
    let back = Config::from_yaml_str(&g.to_yaml(), "resolved.yaml").unwrap();
    assert_eq!(g, back);
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let e = Config::from_file("/nonexistent/rulka.yaml").unwrap_err();
    assert!(matches!(e, ConfigError::Io { .. }));
    assert!(e.to_string().starts_with("/nonexistent/rulka.yaml: cannot read"), "{e}");
}
