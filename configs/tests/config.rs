//! Behaviour of the strict config loader on the shipped presets and on bad input.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;

use rulka_config::{prompt_name, Algorithm, Config, ConfigError, EnvKind, GrpoObjective, MapEntry};

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
    rulka_test_support::margin::close(
        "ent.linear_at(5e6) vs (0.5 + (0.01 - 0.5) * 0.5)",
        ent.linear_at(5e6),
        0.5 + (0.01 - 0.5) * 0.5,
        1e-12,
    );

    let p = preset("ppo.yaml");
    assert_eq!(p.training.algorithm, Algorithm::Ppo);
    assert_eq!(p.ppo.clip_coef_vf, Some(0.2));
    assert_eq!(p.collectors.count, 8);
    // ent schedule [[0,0.5],[30k,0.01],...]: halfway to 30k frames
    rulka_test_support::margin::close(
        "p.ppo.ent_coef_schedule.as_ref().unwrap().linear_at(15_000.0) vs 0.255",
        p.ppo.ent_coef_schedule.as_ref().unwrap().linear_at(15_000.0),
        0.255,
        1e-12,
    );

    let d = preset("dpo.yaml");
    assert_eq!(d.training.algorithm, Algorithm::Dpo);
    assert_eq!(d.dpo.pair_buffer_max, 2);
    assert_eq!(d.dpo.update_epochs, 1);
}

/// The original's presets ramp the slide rewards up over 4.5 M–5 M frames to
/// 0.001 and back down to 0 at 15 M (config_ppo/grpo/dpo.yaml:
/// `[[0, 0], [4500000, 0], [5000000, 0.001], [15000000, 0]]`).
#[test]
fn slide_rewards_ramp_as_the_originals_presets() {
    for name in ["ppo.yaml", "grpo.yaml", "dpo.yaml"] {
        let g = preset(name);
        for s in [
            &g.rewards.engineered_speedslide_reward_schedule,
            &g.rewards.engineered_neoslide_reward_schedule,
        ] {
            let at = |f: f64| s.linear_at(f);
            assert_eq!(at(4.5e6), 0.0, "{name}");
            rulka_test_support::margin::close("at(4.75e6) vs 0.0005", at(4.75e6), 0.0005, 1e-12);
            rulka_test_support::margin::close("at(5e6) vs 0.001", at(5e6), 0.001, 1e-12);
            rulka_test_support::margin::close("at(1e7) vs 0.0005", at(1e7), 0.0005, 1e-12);
            assert_eq!(at(1.5e7), 0.0, "{name}");
            assert_eq!(at(1.6e7), 0.0, "{name}");
        }
        // The original's learning-rate schedule (exponential between knots) and game speed.
        let lr = g.training.lr_schedule.exponential_at(0.0);
        rulka_test_support::margin::close("lr vs 1e-3", lr, 1e-3, 1e-15);
        rulka_test_support::margin::close(
            "g.training.lr_schedule.exponential_at(1.2e7) vs 5e-5",
            g.training.lr_schedule.exponential_at(1.2e7),
            5e-5,
            1e-15,
        );
        assert_eq!(g.environment.tmi.running_speed, 32.0, "{name}");
        assert_eq!(g.collectors.weight_refresh_every_n_actions, 128, "{name}");
    }
}

#[test]
fn defaults_follow_the_original_schema() {
    let c = Config::from_yaml_str("", "empty.yaml").unwrap();
    assert_eq!(c.float_input_dim(), 184);
    // config_schema.py: RewardsConfig, TrainingConfig.lr_schedule, PerformanceConfig.
    assert_eq!(c.rewards.reward_per_m_advanced_along_centerline, 0.01);
    assert_eq!(c.rewards.final_speed_reward_as_if_duration_s, 0.0);
    assert_eq!(
        c.training.lr_schedule.0,
        vec![[0.0, 1e-3], [3e6, 5e-5], [12e6, 5e-5], [15e6, 1e-5]]
    );
    assert_eq!(c.environment.tmi.running_speed, 512.0);
    assert_eq!(c.collectors.weight_refresh_every_n_actions, 8);
    assert!(!c.grpo.filter_zero_std, "the original has no zero-spread filter");
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
fn weight_formats_and_quantization_settings() {
    let c = Config::from_yaml_str("inference: {weights: int8, quant_block: 64}", "q").unwrap();
    assert_eq!(
        (c.inference.weights, c.inference.quant_block),
        (rulka_config::WeightFormat::Int8, 64)
    );
    assert_eq!(Config::default().inference.weights, rulka_config::WeightFormat::Fp32);
    let e = err("inference:\n  weights: int3\n").to_string();
    assert!(e.contains("inference.weights") || e.contains("int3"), "{e}");
    let e = err("inference:\n  quant_block: 48\n  quant_max_mean_kl: 0\n");
    let ConfigError::Invalid { problems, .. } = &e else { panic!("{e}") };
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["inference.quant_block", "inference.quant_max_mean_kl"]);
    let e = err("inference:\n  weights: int4\n  provider: cuda\n").to_string();
    assert!(e.contains("inference.weights") && e.contains("CPU collectors"), "{e}");
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
}

/// The original's schema and constructor rules for the transformer
/// networks, each problem named by its key.
#[test]
fn transformer_settings_are_checked() {
    for (yaml, expect) in [
        ("nn: {fusion_mode: unified, vis: {transformer: {patch_size: 7}}}", "nn.vis.transformer.patch_size: 7 does not divide nn.image_height (64)"),
        ("nn: {fusion_mode: post_concat, encoder: {transformer: {d_model: 50, n_heads: 4}}}", "nn.encoder.transformer.d_model: 50 must be divisible by n_heads (4)"),
        ("nn: {fusion_mode: unified, vis: {transformer: {d_model: 64}}}", "nn.vis.transformer.d_model: 64 must equal nn.encoder.transformer.d_model (256)"),
        ("nn: {fusion_mode: post_concat, encoder: {float_token_layout: per_feature}}", "nn.encoder.float_token_layout: per_feature needs nn.fusion_mode post_concat and nn.encoder.post_concat_layout token_sequence"),
        ("nn: {fusion_mode: post_concat, encoder: {post_concat_layout: token_sequence, float_token_layout: per_feature, float_token_input: mlp_hidden}}", "nn.encoder.float_token_layout: per_feature needs nn.encoder.float_token_input raw"),
        ("nn: {fusion_mode: unified, encoder: {fusion_encoder: hf_embedding}}", "nn.encoder.fusion_encoder: hf_embedding needs"),
        ("nn: {fusion_mode: unified, encoder: {fusion_encoder: native_transformer, transformer: {use_hf_backbone: true}}}", "nn.encoder.transformer.model_name_or_path: is empty"),
        ("nn: {fusion_mode: vision_transformer, encoder: {transformer: {d_model: 16}}}", "nn.encoder.transformer.d_model: 16 must be >= 32"),
        ("nn: {fusion_mode: post_concat, encoder: {fusion_mlp: {n_layers: 0}}}", "nn.encoder.fusion_mlp.n_layers: must be >= 1"),
        ("nn: {vis: {transformer: {d_model: 64}}}", "nn.vis.transformer: a native patch encoder needs nn.fusion_mode"),
        ("nn: {fusion_mode: unified, cnn: {use_impala_cnn: true}, vis: {transformer: {}}}", "nn.vis.transformer: and nn.cnn are both set"),
        ("nn: {fusion_mode: unified, vis: {transformer: {dropout: 1.5}}}", "nn.vis.transformer.dropout"),
        ("nn: {fusion_mode: unified, encoder: {fusion_encoder: transformer}}", "nn.encoder.fusion_encoder: unknown variant `transformer`"),
        ("nn: {fusion_mode: unified, encoder: {transformer: {d_modell: 64}}}", "nn.encoder.transformer.d_modell: unknown field"),
    ] {
        let e = err(yaml).to_string();
        assert!(e.contains(expect), "{yaml}\n  expected: {expect}\n  got: {e}");
    }
    // Consistent ones load, and a native patch encoder frees the image from the CNN's minimum size.
    for ok in [
        "nn: {fusion_mode: unified, vis: {transformer: {d_model: 256, patch_size: 8}}}",
        "nn: {fusion_mode: post_concat, encoder: {post_concat_layout: token_sequence, float_token_layout: per_feature}}",
        "nn: {fusion_mode: vision_transformer, image_width: 16, image_height: 16, vis: {transformer: {patch_size: 4}}}",
        "nn: {fusion_mode: post_concat, no_image: true}",
    ] {
        assert!(Config::from_yaml_str(ok, "ok.yaml").is_ok(), "{ok}: {:?}", Config::from_yaml_str(ok, "ok.yaml").err());
    }
}

/// A real map's shape in the simulator: the file, the width and held-out
/// tracks (meaningless when every seed is that map) are checked.
#[test]
fn track_from_settings_are_checked() {
    for (yaml, expect) in [
        (
            "environment: {sim: {track_from: /no/such/map.npy}}",
            "environment.sim.track_from: /no/such/map.npy: no such file",
        ),
        (
            "environment: {sim: {track_from: Cargo.toml, track_width_m: 2.5}}",
            "environment.sim.track_width_m: 2.5 is not between 4 and 64 m",
        ),
        (
            "environment: {sim: {track_from: Cargo.toml}}\ntraining: {eval_tracks: [7]}",
            "training.eval_tracks: held-out tracks are generated ones",
        ),
    ] {
        let e = err(yaml).to_string();
        assert!(e.contains(expect), "{yaml}\n  expected: {expect}\n  got: {e}");
    }
    let ok = "environment: {sim: {track_from: Cargo.toml, track_width_m: 20}}";
    let c = Config::from_yaml_str(ok, "ok.yaml").unwrap();
    assert_eq!(c.environment.sim.track_width_m, 20.0);
}

#[test]
fn network_hash_tracks_only_network_shape() {
    let a = Config::default();
    let mut b = a.clone();
    b.ppo.gamma = 0.9;
    b.inference.weights = rulka_config::WeightFormat::Int4; // the same network, stored otherwise
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

#[test]
fn game_settings_are_checked() {
    let e = err("environment: {kind: tmi}").to_string();
    assert!(
        e.contains("environment.tmi.maps: environment.kind is tmi but no maps are listed"),
        "{e}"
    );
    let e = err("environment: {n_zone_centers_in_inputs: 40, n_zone_centers_extrapolate_after_end_of_map: 700}").to_string();
    assert!(
        e.contains("environment.n_zone_centers_extrapolate_after_end_of_map: 700 is too few")
            && e.contains("need >= 780"),
        "{e}"
    );
    let e = err("environment: {kind: tmi, rl_action_offsets_ms: [0, 10], tmi: {maps: [{name: a, map_path: a, zone_centers: a.npy}]}}").to_string();
    assert!(
        e.contains("environment.rl_action_offsets_ms: the game is driven with one action"),
        "{e}"
    );
    let e = err("environment: {tmi: {maps: [{name: a, map_path: '', zone_centers: a.npy}]}}")
        .to_string();
    assert!(e.contains("environment.tmi.maps[0].map_path: is empty"), "{e}");
    let e = err("state_normalization: {waypoint_std_40cp: [1, 2]}").to_string();
    assert!(e.contains("state_normalization.waypoint_std_40cp: 2 numbers; expected 120"), "{e}");
    let ok = Config::from_yaml_str(
        "environment: {kind: tmi, deck_height: -5.5, tmi: {maps: [{name: A01, map_path: A01-Race.Challenge.Gbx, zone_centers: maps/A01.npy, checkpoints: maps/A01_cp.npy}]}}",
        "t",
    )
    .unwrap();
    assert_eq!(ok.environment.deck_height, Some(-5.5));
    assert_eq!(
        ok.environment.tmi.maps[0].checkpoints.as_deref(),
        Some(Path::new("maps/A01_cp.npy"))
    );
    // The original's environment defaults (config_schema.py EnvironmentConfig).
    let d = Config::default().environment;
    assert_eq!(
        (
            d.one_every_n_zone_centers_in_inputs,
            d.n_zone_centers_extrapolate_before_start_of_map,
            d.n_zone_centers_extrapolate_after_end_of_map
        ),
        (20, 20, 1000)
    );
    assert_eq!(
        (d.distance_between_checkpoints, d.road_width, d.margin_to_announce_finish_meters),
        (0.5, 90.0, 700.0)
    );
    assert_eq!(
        (d.tmi.timeout_during_run_ms, d.tmi.timeout_between_runs_ms, d.deck_height),
        (10_100, 600_000_000, None)
    );
}

/// The original's transformer presets, translated (`configs/ppo-post-concat-cnn-tf.yaml`,
/// `configs/ppo-transformer.yaml`), load; the Hugging Face one with folders
/// holding the shapes of a ViT-Ti/16 and of google/bert_uncased_L-2_H-128_A-2.
#[test]
fn the_originals_transformer_presets_load() {
    let native = preset("ppo-post-concat-cnn-tf.yaml");
    assert_eq!(native.nn.fusion_mode, rulka_config::FusionMode::PostConcat);
    assert_eq!(native.nn.encoder.transformer.d_model, 128);
    let dir = tempfile::tempdir().unwrap();
    let text = rulka_test_support::transformer_preset(dir.path());
    let vit = dir.path().join("vit");
    let hf = Config::from_yaml_str(&text, "ppo-transformer.yaml").unwrap();
    // 197 ViT tokens (196 patches + CLS) and 264 float tokens: within BERT's 512 positions.
    assert_eq!(hf.fusion_sequence_len(), 197 + 264);
    // Without the folders: named.
    let e =
        Config::from_yaml_str(&text.replace(&vit.display().to_string(), "models/none"), "p.yaml")
            .unwrap_err();
    assert!(
        e.to_string()
            .contains("nn.vis.transformer.model_name_or_path: models/none: no such folder"),
        "{e}"
    );
}

/// Seed lists take `a..b` ranges; held-out tracks must be held out.
#[test]
fn seed_ranges_and_held_out_tracks() {
    let m = preset("sim-medium.yaml");
    assert_eq!(m.environment.sim.track_seeds, (0..256).collect::<Vec<u64>>());
    assert_eq!(m.training.eval_tracks, (1000..1100).collect::<Vec<u64>>());
    let back = Config::from_yaml_str(&m.to_yaml(), "resolved.yaml").unwrap();
    assert_eq!(m, back);
    let c = Config::from_yaml_str(
        "environment:\n  sim: {track_seeds: [3, \"10..13\", 20]}\n",
        "t.yaml",
    )
    .unwrap();
    assert_eq!(c.environment.sim.track_seeds, vec![3, 10, 11, 12, 20]);
    let e = err("environment:\n  sim: {track_seeds: \"9..4\"}\n").to_string();
    assert!(e.contains("\"9..4\"") && e.contains("track_seeds"), "{e}");
    let e = err("training: {eval_tracks: \"0..10\"}\nenvironment:\n  sim: {track_seeds: [4]}\n")
        .to_string();
    assert!(e.contains("training.eval_tracks: seed 4 is also a training seed"), "{e}");
    let e = err("training: {eval_tracks: [50], eval_every_n_updates: 0}\n").to_string();
    assert!(e.contains("training.eval_every_n_updates"), "{e}");
    let e = err("training: {eval_tracks: [50]}\nenvironment: {kind: tmi}\n").to_string();
    assert!(e.contains("training.eval_tracks: held-out evaluation drives the simulator"), "{e}");
    for p in ["sim-medium-grpo.yaml", "sim-hard.yaml"] {
        let c = preset(p);
        assert!(!c.training.eval_tracks.is_empty(), "{p}");
    }
}

/// Every section that is strict (31 of them: `deny_unknown_fields`) refuses
/// a misspelled key and names it with its path: a section that lost its
/// strictness would take the typo as a silent default.
#[test]
fn every_strict_section_refuses_a_misspelled_key() {
    let cases = [
        ("trainig: {}", "trainig"),
        ("training: {max_minuts: 3}", "training.max_minuts"),
        ("nn: {dense_hiden_dim: 8}", "nn.dense_hiden_dim"),
        ("nn: {cnn: {chanels: 3}}", "nn.cnn.chanels"),
        ("ppo: {max_grad_nrom: 0.5}", "ppo.max_grad_nrom"),
        ("grpo: {group_sise: 8}", "grpo.group_sise"),
        ("dpo: {beta_shedule: [[0, 0.1]]}", "dpo.beta_shedule"),
        ("rewards: {engineered_speed_coeff: 1}", "rewards.engineered_speed_coeff"),
        ("environment: {n_zone_center_in_inputs: 4}", "environment.n_zone_center_in_inputs"),
        ("environment: {sim: {trak: easy}}", "environment.sim.trak"),
        ("environment: {tmi: {base_prot: 8477}}", "environment.tmi.base_prot"),
        ("environment: {tmi: {launch: {comand: [a]}}}", "environment.tmi.launch.comand"),
        ("environment: {tmi: {maps: [{nmae: A01}]}}", "environment.tmi.maps[0].nmae"),
        ("collectors: {cuont: 2}", "collectors.cuont"),
        ("inference: {intra_op_thread: 1}", "inference.intra_op_thread"),
        ("state_normalization: {enabeld: true}", "state_normalization.enabeld"),
        ("transport: {knd: nats}", "transport.knd"),
        ("transport: {nats: {ulr: 'nats://127.0.0.1:4222'}}", "transport.nats.ulr"),
        ("transport: {nats: {tls: {cacert: a.pem}}}", "transport.nats.tls.cacert"),
        ("nn: {vis: {transfomer: {}}}", "nn.vis.transfomer"),
        ("nn: {vis: {transformer: {patch_sise: 8}}}", "nn.vis.transformer.patch_sise"),
        ("nn: {encoder: {fusion_mpl: {}}}", "nn.encoder.fusion_mpl"),
        ("nn: {encoder: {transformer: {d_modell: 64}}}", "nn.encoder.transformer.d_modell"),
        ("nn: {encoder: {fusion_mlp: {n_layer: 2}}}", "nn.encoder.fusion_mlp.n_layer"),
        ("nn: {encoder: {fusion_cnn: {chanels: 2}}}", "nn.encoder.fusion_cnn.chanels"),
        (
            "nn: {encoder: {hf_embedding: {model_name_or_pth: m}}}",
            "nn.encoder.hf_embedding.model_name_or_pth",
        ),
        (
            "nn: {encoder: {transformer: {backbone: {model_type: vit, hidden_sise: 8}}}}",
            "hidden_sise",
        ),
        (
            "nn: {encoder: {transformer: {backbone: {model_type: bert, hidden_sise: 8}}}}",
            "hidden_sise",
        ),
        ("nn: {encoder: {transformer: {backbone: {model_type: vitt}}}}", "vitt"),
        ("training: {freeze: {encoder_update: 3}}", "training.freeze.encoder_update"),
        ("training: {augment: {shift: 2}}", "training.augment.shift"),
        ("collectors: {curriculum: {replays: 0.5}}", "collectors.curriculum.replays"),
        ("pretrain: {epoch: 3}", "pretrain.epoch"),
    ];
    for (yaml, key) in cases {
        let e = err(yaml).to_string();
        let typo = key.rsplit(['.', ']']).next().unwrap_or(key);
        assert!(
            e.contains(key)
                && (e.contains("unknown field") || e.contains("unknown variant"))
                && e.contains(typo),
            "{yaml}\n  expected {key}: unknown field\n  got: {e}"
        );
    }
}

fn problem_keys(yaml: &str) -> Vec<String> {
    match err(yaml) {
        ConfigError::Invalid { problems, .. } => problems.into_iter().map(|p| p.key).collect(),
        e => panic!("{yaml}: {e}"),
    }
}

fn loads(yaml: &str) -> Config {
    Config::from_yaml_str(yaml, "ok.yaml").unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

/// Each rule at its limit (accepted) and just past it (refused, by its key).
#[test]
fn validation_rules_accept_their_limit_and_refuse_past_it() {
    assert_eq!(problem_keys("training: {learner_threads: 0}"), ["training.learner_threads"]);
    loads("grpo: {early_stop_imp_ratio: 1.01}");
    assert_eq!(problem_keys("grpo: {early_stop_imp_ratio: 1.0}"), ["grpo.early_stop_imp_ratio"]);
    let run = |n: usize| format!("transport: {{kind: nats, nats: {{run: {}}}}}", "r".repeat(n));
    loads(&run(64));
    assert_eq!(problem_keys(&run(65)), ["transport.nats.run"]);
    // 5 zone centres one every 2 points reach 8 points past the finish.
    let zones = |after: u32| {
        format!("environment: {{n_zone_centers_in_inputs: 5, one_every_n_zone_centers_in_inputs: 2, n_zone_centers_extrapolate_after_end_of_map: {after}}}")
    };
    loads(&zones(8));
    assert_eq!(
        problem_keys(&zones(7)),
        ["environment.n_zone_centers_extrapolate_after_end_of_map"]
    );
    // A schedule's values within the rule's range, both ends: the fixed
    // value's (0 < γ <= 1; a_schedule_refuses_what_its_value_refuses).
    loads("ppo: {gamma_schedule: [[0, 1.0e-6], [10, 1.0]]}");
    assert_eq!(
        problem_keys("ppo: {gamma_schedule: [[0, 0.0], [10, 1.0]]}"),
        ["ppo.gamma_schedule"]
    );
    assert_eq!(
        problem_keys("ppo: {gamma_schedule: [[0, 0.9], [10, 1.5]]}"),
        ["ppo.gamma_schedule"]
    );
    assert_eq!(problem_keys("ppo: {gamma_schedule: [[0, -0.1]]}"), ["ppo.gamma_schedule"]);
    // The fusion MLP of a post-concat network: 32 wide at least.
    let mlp = |w: u32| {
        format!("nn: {{fusion_mode: post_concat, encoder: {{fusion_mlp: {{hidden_dim: {w}}}}}}}")
    };
    loads(&mlp(32));
    assert_eq!(problem_keys(&mlp(31)), ["nn.encoder.fusion_mlp.hidden_dim"]);
}

#[test]
fn weight_formats_parse_from_their_names_only() {
    use rulka_config::WeightFormat;
    assert_eq!("fp32".parse::<WeightFormat>(), Ok(WeightFormat::Fp32));
    assert_eq!("int8".parse::<WeightFormat>(), Ok(WeightFormat::Int8));
    assert_eq!("int4".parse::<WeightFormat>(), Ok(WeightFormat::Int4));
    let e = "fp16".parse::<WeightFormat>().unwrap_err();
    assert!(e.contains("\"fp16\""), "{e}");
}

/// `exponential_at` between a zero and a positive knot (no logarithm there)
/// is linear: hand-computed halfway and quarter points.
#[test]
fn an_exponential_schedule_through_zero_is_linear_there() {
    let s = rulka_config::Schedule(vec![[0.0, 0.0], [10.0, 1.0], [20.0, 0.25]]);
    rulka_test_support::margin::close(
        "s.exponential_at(5.0) vs 0.5",
        s.exponential_at(5.0),
        0.5,
        1e-12,
    );
    rulka_test_support::margin::close(
        "s.exponential_at(2.5) vs 0.25",
        s.exponential_at(2.5),
        0.25,
        1e-12,
    );
    // Between positive knots, geometric: 1 · (0.25/1)^(1/2) = 0.5 halfway.
    rulka_test_support::margin::close(
        "s.exponential_at(15.0) vs 0.5",
        s.exponential_at(15.0),
        0.5,
        1e-12,
    );
}

/// The simulator's zone-centre statistics (docs of `float_inputs_mean_std`):
/// centre `i` lies `d = 10·(i+1)` m ahead, mean `[0, 0, d]`, std
/// `[2 + 0.5·d, 2, 2 + 0.5·d]` — hand-computed for the first two.
#[test]
fn the_simulators_zone_centres_are_normalised_by_distance_ahead() {
    let cfg = loads("environment: {kind: sim}");
    let (mean, std) = rulka_config::float_inputs_mean_std(&cfg);
    let mut at = 0;
    for (name, len) in rulka_config::float_layout(&cfg) {
        if name == "zone_centers" {
            break;
        }
        at += len;
    }
    assert_eq!(&mean[at..at + 6], &[0.0, 0.0, 10.0, 0.0, 0.0, 20.0]);
    assert_eq!(&std[at..at + 6], &[7.0, 2.0, 7.0, 12.0, 2.0, 12.0]);
}

#[test]
fn a_native_encoder_layers_feed_forward_is_at_least_64_wide() {
    let mut t = rulka_config::TransformerConfig { d_model: 32, ff_mult: 4, ..Default::default() };
    assert_eq!(t.dim_ff(), 128);
    t.ff_mult = 1;
    assert_eq!(t.dim_ff(), 64);
}

/// More rules at their limits: transformer widths, the group size, action
/// offsets, launch commands, run names and server URLs.
#[test]
fn more_rules_accept_their_limit_and_refuse_past_it() {
    let vit = |d: u32| {
        format!("nn: {{fusion_mode: vision_transformer, encoder: {{transformer: {{d_model: {d}, n_heads: 4}}}}}}")
    };
    loads(&vit(32));
    assert_eq!(problem_keys(&vit(28)), ["nn.encoder.transformer.d_model"]);
    loads("grpo: {group_size: 2}");
    assert_eq!(problem_keys("grpo: {group_size: 1}"), ["grpo.group_size"]);
    let offsets = |n: usize| {
        let o: Vec<String> = (0..n).map(|i| (10 * i).to_string()).collect();
        format!("environment: {{rl_action_offsets_ms: [{}]}}", o.join(", "))
    };
    loads(&offsets(16));
    assert_eq!(problem_keys(&offsets(17)), ["environment.rl_action_offsets_ms"]);
    let launch = |cmd: &str, restart: &str| {
        format!("environment: {{tmi: {{launch: {{command: {cmd}, restart_every_h: {restart}}}}}}}")
    };
    loads(&launch("['tm.sh', '{port}']", "0"));
    for (cmd, restart, key) in [
        ("[]", "0", "environment.tmi.launch.command"),
        ("['  ', '{port}']", "0", "environment.tmi.launch.command"),
        ("['tm.sh']", "0", "environment.tmi.launch.command"),
        ("['tm.sh', '{port}']", "-1", "environment.tmi.launch.restart_every_h"),
    ] {
        assert_eq!(problem_keys(&launch(cmd, restart)), [key], "{cmd} {restart}");
    }
    for ok in ["a-b_C9", "r"] {
        loads(&format!("transport: {{kind: nats, nats: {{run: {ok}}}}}"));
    }
    for bad in ["''", "a.b", "a b"] {
        assert_eq!(
            problem_keys(&format!("transport: {{kind: nats, nats: {{run: {bad}}}}}")),
            ["transport.nats.run"],
            "{bad}"
        );
    }
    for ok in ["nats://h:4222", "tls://h:4222"] {
        loads(&format!("transport: {{kind: nats, nats: {{url: '{ok}'}}}}"));
    }
    assert_eq!(
        problem_keys("transport: {kind: nats, nats: {url: 'http://h:4222'}}"),
        ["transport.nats.url"]
    );
}

/// `training.learner_threads` is `auto` (the default) or a number ≥ 1;
/// `training.device` is `auto` (the default), `cpu` or `cuda`; anything else
/// is refused naming the value.
#[test]
fn learner_threads_and_device_take_auto_a_number_or_a_device_name() {
    use rulka_config::{LearnerDevice, LearnerThreads};
    let d = loads("training: {}");
    assert_eq!(d.training.learner_threads, LearnerThreads::Auto);
    assert_eq!(d.training.device, LearnerDevice::Auto);
    assert_eq!(
        loads("training: {learner_threads: 3}").training.learner_threads,
        LearnerThreads::Count(3)
    );
    assert_eq!(
        loads("training: {learner_threads: auto}").training.learner_threads,
        LearnerThreads::Auto
    );
    assert_eq!(loads("training: {device: cuda}").training.device, LearnerDevice::Cuda);
    assert_eq!(loads("training: {device: cpu}").training.device, LearnerDevice::Cpu);
    assert_eq!(problem_keys("training: {learner_threads: -2}"), ["training.learner_threads"]);
    let e = err("training: {learner_threads: many}").to_string();
    assert!(e.contains("many") && e.contains("auto"), "{e}");
    let e = err("training: {device: gpu}").to_string();
    assert!(e.contains("gpu"), "{e}");
    // A config written back reads the same.
    let back = loads(&loads("training: {learner_threads: 5, device: cuda}").to_yaml());
    assert_eq!(
        (back.training.learner_threads, back.training.device),
        (LearnerThreads::Count(5), LearnerDevice::Cuda)
    );
    let back = loads(&d.to_yaml());
    assert_eq!(back.training.learner_threads, LearnerThreads::Auto);
}

/// `auto` gives the learner the cores the local collectors leave, at least
/// one, and at most two beside a GPU; a number is itself.
#[test]
fn auto_learner_threads_are_the_cores_the_collectors_leave() {
    use rulka_config::LearnerThreads::{Auto, Count};
    assert_eq!(Auto.resolve(2, 1, false), 1);
    assert_eq!(Auto.resolve(16, 14, false), 2);
    assert_eq!(Auto.resolve(16, 4, false), 12);
    assert_eq!(Auto.resolve(4, 8, false), 1);
    assert_eq!(Auto.resolve(16, 4, true), 2);
    assert_eq!(Auto.resolve(16, 15, true), 1);
    assert_eq!(Count(3).resolve(2, 1, false), 3);
    assert_eq!(Count(3).resolve(2, 1, true), 3);
}

#[test]
fn pretrain_ranges_are_all_reported_and_their_edges_allowed() {
    let e =
        err("pretrain:\n  epochs: 0\n  batch_size: 0\n  lr: -0.001\n  bc_time_offsets_ms: []\n  \
                 dropout: 1.0\n  held_out_fraction: -0.1\n  value_coef: -0.5\n");
    let ConfigError::Invalid { problems, .. } = &e else { panic!("{e}") };
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "pretrain.epochs",
            "pretrain.batch_size",
            "pretrain.lr",
            "pretrain.bc_time_offsets_ms",
            "pretrain.dropout",
            "pretrain.held_out_fraction",
            "pretrain.value_coef",
        ]
    );
    let e = e.to_string();
    assert!(e.contains("pretrain.dropout: 1 is out of range"), "{e}");
    assert!(e.contains("pretrain.bc_time_offsets_ms: needs at least one offset"), "{e}");
    // The excluded upper ends: every drive held out, every unit dropped.
    assert_eq!(problem_keys("pretrain: {held_out_fraction: 1.0}"), ["pretrain.held_out_fraction"]);
    assert_eq!(problem_keys("pretrain: {dropout: 1.0}"), ["pretrain.dropout"]);
    let c = Config::from_yaml_str(
        "pretrain:\n  dropout: 0.0\n  held_out_fraction: 0.0\n  value_coef: 0.0\n  bc_time_offsets_ms: [-10, 0, 100]\n",
        "t.yaml",
    )
    .expect("the lower edges are allowed");
    assert_eq!(c.pretrain.bc_time_offsets_ms, [-10, 0, 100]);
}

#[test]
fn a_prompt_is_named_by_its_seed_its_map_file_or_its_game_map() {
    let mut c = preset("sim-quick.yaml");
    assert_eq!(prompt_name(&c, 7), "sim7");
    c.environment.sim.track_from = Some("maps/ESL-Hockolicious_0.5m_cl2.npy".into());
    assert_eq!(prompt_name(&c, 7), "ESL-Hockolicious_0.5m_cl2", "every seed is the one map");
    c.environment.kind = EnvKind::Tmi;
    c.environment.tmi.maps = ["A01", "B02"]
        .iter()
        .map(|n| MapEntry {
            name: (*n).into(),
            map_path: format!("{n}-Race.Challenge.Gbx"),
            zone_centers: format!("{n}.npy").into(),
            checkpoints: None,
        })
        .collect();
    assert_eq!(prompt_name(&c, 1), "B02");
    assert_eq!(prompt_name(&c, 5), "map5", "an index past the list");
}

/// The learning-per-frame knobs (issue 61): each rule at its limit and past
/// it, each PPO-only knob refused by its key under GRPO and DPO, the
/// presets that mirror the original's defaults leave every one off, and
/// `sim-hard.yaml` and `sim-hockolicious.yaml` normalise returns (the
/// benchmark's winner) and only that, and `sim-hard.yaml` has the network
/// twice as wide as the other simulator presets' (the winner on top of it).
#[test]
fn the_ppo_levers_are_validated_and_off_in_the_originals_presets() {
    let shift = |px: u32| format!("training: {{augment: {{shift_px: {px}}}}}");
    assert_eq!(loads(&shift(8)).training.augment.shift_px, 8);
    assert_eq!(problem_keys(&shift(9)), ["training.augment.shift_px"]);
    for algo in ["grpo", "dpo"] {
        let e =
            err(&format!("training: {{algorithm: {algo}, augment: {{shift_px: 2}}}}")).to_string();
        assert!(e.contains("training.augment.shift_px") && e.contains("PPO only"), "{algo}: {e}");
        for (knob, key) in [
            ("target_kl: 0.02", "ppo.target_kl"),
            ("normalize_returns: true", "ppo.normalize_returns"),
            ("aux_every_updates: 4", "ppo.aux_every_updates"),
            ("popart_beta: 0.1", "ppo.popart_beta"),
            ("sil_coef: 0.1", "ppo.sil_coef"),
        ] {
            let e = err(&format!("training: {{algorithm: {algo}}}\nppo: {{{knob}}}")).to_string();
            assert!(
                e.contains(key) && e.contains(&format!("training.algorithm is {algo}")),
                "{algo} {knob}: {e}"
            );
        }
        assert_eq!(
            problem_keys(&format!("training: {{algorithm: {algo}, augment: {{shift_px: 2}}}}\nppo: {{drac_coef: 0.1}}")),
            ["training.augment.shift_px", "ppo.drac_coef"],
        );
    }
    let e = err("training: {algorithm: grpo}\nppo: {target_kl: 0.02}").to_string();
    assert!(e.contains("grpo.target_kl"), "GRPO's own knob named: {e}");
    let e = err("nn: {no_image: true}\ntraining: {augment: {shift_px: 2}}").to_string();
    assert!(e.contains("training.augment.shift_px") && e.contains("no_image"), "{e}");
    let e = err("ppo: {drac_coef: 0.1}").to_string();
    assert!(e.contains("ppo.drac_coef") && e.contains("shift_px"), "{e}");
    assert_eq!(problem_keys("ppo: {target_kl: 0.0}"), ["ppo.target_kl"]);
    assert_eq!(problem_keys("ppo: {drac_coef: -0.1}"), ["ppo.drac_coef"]);
    assert_eq!(problem_keys("ppo: {aux_every_updates: 4, aux_epochs: 0}"), ["ppo.aux_epochs"]);
    assert_eq!(
        loads("ppo: {aux_every_updates: 0, aux_epochs: 0}").ppo.aux_epochs,
        0,
        "off: unchecked"
    );
    assert_eq!(problem_keys("ppo: {aux_clone_coef: -1.0}"), ["ppo.aux_clone_coef"]);
    // PopArt's step: in (0, 1], at both ends and past them.
    assert_eq!(loads("ppo: {popart_beta: 1.0}").ppo.popart_beta, Some(1.0));
    assert_eq!(loads("ppo: {popart_beta: 1.0e-6}").ppo.popart_beta, Some(1.0e-6));
    assert_eq!(problem_keys("ppo: {popart_beta: 0.0}"), ["ppo.popart_beta"]);
    assert_eq!(problem_keys("ppo: {popart_beta: 1.01}"), ["ppo.popart_beta"]);
    assert_eq!(loads("ppo: {}").ppo.popart_beta, None, "off by default");
    // Self-imitation: a non-negative weight; its counts checked when on.
    assert_eq!(problem_keys("ppo: {sil_coef: -0.1}"), ["ppo.sil_coef"]);
    assert_eq!(problem_keys("ppo: {sil_coef: 0.1, sil_rollouts: 0}"), ["ppo.sil_rollouts"]);
    assert_eq!(problem_keys("ppo: {sil_coef: 0.1, sil_steps: 0}"), ["ppo.sil_steps"]);
    let sil = loads("ppo: {sil_coef: 0.1, sil_rollouts: 1, sil_steps: 1}").ppo;
    assert_eq!((sil.sil_coef, sil.sil_rollouts, sil.sil_steps), (0.1, 1, 1));
    let off = loads("ppo: {sil_rollouts: 0, sil_steps: 0}").ppo;
    assert_eq!((off.sil_coef, off.sil_rollouts), (0.0, 0), "off: unchecked");
    let aux = loads("ppo: {aux_every_updates: 16, aux_epochs: 3, aux_clone_coef: 0.5}").ppo;
    assert_eq!((aux.aux_every_updates, aux.aux_epochs, aux.aux_clone_coef), (16, 3, 0.5));
    let on = loads("training: {augment: {shift_px: 2}}\nppo: {target_kl: 0.01, normalize_returns: true, drac_coef: 0.1}");
    assert_eq!(
        (on.ppo.target_kl, on.ppo.normalize_returns, on.ppo.drac_coef),
        (Some(0.01), true, 0.1)
    );
    // The curriculum: each rule at its limit and past it; every algorithm
    // whose collectors' runs train takes it, DPO on a pairs file refuses it.
    let k = |y: &str| format!("collectors: {{curriculum: {{{y}}}}}");
    let c = loads(&k("replay: 0.999, temperature: 1.0e-3, staleness: 1.0")).collectors.curriculum;
    assert_eq!((c.replay, c.temperature, c.staleness), (0.999, 1.0e-3, 1.0));
    assert_eq!(loads(&k("staleness: 0.0")).collectors.curriculum.staleness, 0.0);
    assert_eq!(problem_keys(&k("replay: 1.0")), ["collectors.curriculum.replay"]);
    assert_eq!(problem_keys(&k("replay: -0.1")), ["collectors.curriculum.replay"]);
    assert_eq!(problem_keys(&k("temperature: 0.0")), ["collectors.curriculum.temperature"]);
    assert_eq!(problem_keys(&k("staleness: 1.01")), ["collectors.curriculum.staleness"]);
    assert_eq!(problem_keys(&k("staleness: -0.01")), ["collectors.curriculum.staleness"]);
    for algo in ["ppo", "grpo", "dpo"] {
        let c = loads(&format!("training: {{algorithm: {algo}}}\n{}", k("replay: 0.5")));
        assert_eq!(c.collectors.curriculum.replay, 0.5, "{algo}");
    }
    let offline =
        "training: {algorithm: dpo}\ndpo: {data_mode: offline, offline_pairs_jsonl: p.jsonl}\n";
    let e = err(&format!("{offline}{}", k("replay: 0.5"))).to_string();
    assert!(e.contains("collectors.curriculum.replay") && e.contains("offline"), "{e}");
    assert_eq!(loads(offline).collectors.curriculum.replay, 0.0, "off: accepted");
    for p in ["ppo.yaml", "grpo.yaml", "dpo.yaml"] {
        let c = preset(p);
        assert_eq!(c.collectors.curriculum.replay, 0.0, "{p}");
        assert_eq!(c.training.augment.shift_px, 0, "{p}");
        assert_eq!(
            (c.ppo.target_kl, c.ppo.normalize_returns, c.ppo.drac_coef, c.ppo.aux_every_updates),
            (None, false, 0.0, 0),
            "{p}"
        );
        assert_eq!(c.ppo.popart_beta, None, "{p}");
        assert_eq!(c.ppo.sil_coef, 0.0, "{p}");
    }
    // The benchmark's winner (docs/learning.md, "Learning per frame") is the
    // default of the presets it was measured on (the held-out hard tracks and
    // the transfer check's real map); the other levers stay off there. The
    // hard preset's network is twice the other simulator presets' width (the
    // winner on top of it there; level on the real map, which keeps 128/64).
    // (The real-map preset's `track_from` is relative to the repository
    // root, not this crate, so the presets are read without the value rules.)
    for (p, width) in [("sim-hard.yaml", (256, 128)), ("sim-hockolicious.yaml", (128, 64))] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(p);
        let c = Config::from_file_unvalidated(&path).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(
            (
                c.ppo.normalize_returns,
                c.ppo.target_kl,
                c.ppo.drac_coef,
                c.training.augment.shift_px
            ),
            (true, None, 0.0, 0),
            "{p}"
        );
        assert_eq!((c.nn.dense_hidden_dim, c.nn.float_hidden_dim), width, "{p}");
    }
    for p in ["sim-quick.yaml", "sim-medium.yaml"] {
        let c = preset(p);
        assert_eq!((c.nn.dense_hidden_dim, c.nn.float_hidden_dim), (128, 64), "{p}");
    }
}

#[test]
fn quantized_weights_are_for_the_cpu_provider_only() {
    for provider in ["cpu", "cuda", "tensorrt"] {
        for weights in ["fp32", "int8", "int4"] {
            let yaml = format!("inference: {{provider: {provider}, weights: {weights}}}");
            let taken = provider == "cpu" || weights == "fp32";
            match Config::from_yaml_str(&yaml, "t.yaml") {
                Ok(_) => assert!(taken, "{yaml}: accepted"),
                Err(e) => {
                    assert!(!taken, "{yaml}: {e}");
                    let text = e.to_string();
                    assert!(
                        text.contains("inference.weights") && text.contains(weights),
                        "{yaml}: {text}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_real_game_templates_name_each_placeholder_and_check_once_filled_in() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in ["tmi-ppo.yaml", "tmi-levers.yaml"] {
        let text = std::fs::read_to_string(root.join(name)).unwrap();
        let e = Config::from_yaml_str(&text, name).unwrap_err().to_string();
        for field in ["name", "map_path", "zone_centers"] {
            let key = format!("environment.tmi.maps[0].{field}");
            assert!(
                e.contains(&key) && e.contains("is a placeholder of the template"),
                "{name}: {key}: {e}"
            );
        }
        assert_eq!(e.matches("placeholder").count(), 3, "{name}: only the placeholders: {e}");
        let filled = text
            .replace("<a short name for your map>", "hock")
            .replace("<your map>.Challenge.Gbx", "ESL-Hockolicious.Challenge.Gbx")
            .replace("maps/<your map>_0.5m_cl.npy", "maps/hock.npy");
        let c = Config::from_yaml_str(&filled, name)
            .unwrap_or_else(|e| panic!("{name} filled in: {e}"));
        assert_eq!(c.environment.kind, EnvKind::Tmi);
        assert_eq!(c.environment.tmi.base_port, 8478);
        // The original's PPO as configs/ppo.yaml has it; the lever only in the opt-in one.
        let ppo = preset("ppo.yaml");
        assert_eq!(
            (c.nn.dense_hidden_dim, c.ppo.update_epochs),
            (ppo.nn.dense_hidden_dim, ppo.ppo.update_epochs)
        );
        assert_eq!(c.ppo.normalize_returns, name == "tmi-levers.yaml", "{name}");
    }
    // A placeholder anywhere in a value, not only the templates' wording.
    for bad in ["<mine>", "maps/<x>.npy", "a<b>c"] {
        let yaml = format!("environment: {{kind: tmi, tmi: {{maps: [{{name: ok, map_path: '{bad}', zone_centers: a.npy}}]}}}}");
        assert!(
            Config::from_yaml_str(&yaml, "t").unwrap_err().to_string().contains("maps[0].map_path"),
            "{bad}"
        );
    }
    for fine in ["A01-Race.Challenge.Gbx", "a>b<c", "<unclosed"] {
        let yaml = format!("environment: {{kind: tmi, tmi: {{maps: [{{name: ok, map_path: '{fine}', zone_centers: a.npy}}]}}}}");
        assert!(Config::from_yaml_str(&yaml, "t").is_ok(), "{fine}");
    }
}

/// The dotted keys of `v`'s leaves that `keep` keeps, in order.
fn leaves(
    v: &serde_yaml_ng::Value,
    path: String,
    keep: &dyn Fn(&serde_yaml_ng::Value) -> bool,
    out: &mut Vec<String>,
) {
    match v {
        serde_yaml_ng::Value::Mapping(m) => {
            for (k, v) in m {
                let k = k.as_str().unwrap();
                let p = if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
                leaves(v, p, keep, out);
            }
        }
        leaf if keep(leaf) => out.push(path),
        _ => {}
    }
}

/// `v` with its leaf at `path` set to `to`.
fn set(v: &mut serde_yaml_ng::Value, path: &[&str], to: serde_yaml_ng::Value) {
    match path {
        [last] => v[*last] = to,
        [first, rest @ ..] => set(&mut v[*first], rest, to),
        [] => unreachable!(),
    }
}

/// Every number of the config (every leaf of the default config's YAML,
/// in every section, not the first), set to 0, to -1 and to 1e30 in turn:
/// a value refused is refused naming that key (a problem whose key is the
/// key changed, or a parse error naming its path). A check copied from one
/// section to another with its key left behind names the wrong key here.
#[test]
fn every_refused_number_is_refused_naming_its_key() {
    let base: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&rulka_config::Config::default().to_yaml()).unwrap();
    let mut keys = Vec::new();
    leaves(&base, String::new(), &|v| v.is_number(), &mut keys);
    assert!(keys.len() >= 110, "only {} numbers in the config (119 when written)", keys.len());
    let (mut refused, mut checked) = (0, 0);
    let mut wrong = Vec::new();
    for key in &keys {
        let parts: Vec<&str> = key.split('.').collect();
        for bad in [0.0f64, -1.0, 1e30] {
            let mut v = base.clone();
            let to = if bad.fract() == 0.0 && bad.abs() < 1e18 {
                serde_yaml_ng::Value::Number((bad as i64).into())
            } else {
                serde_yaml_ng::Value::Number(bad.into())
            };
            set(&mut v, &parts, to);
            let text = serde_yaml_ng::to_string(&v).unwrap();
            checked += 1;
            match rulka_config::Config::from_yaml_str(&text, "t.yaml") {
                Ok(_) => {}
                Err(rulka_config::ConfigError::Invalid { problems, .. }) => {
                    refused += 1;
                    if !problems.iter().any(|p| p.key == *key) {
                        wrong.push(format!("{key} = {bad}: {problems:?}"));
                    }
                }
                Err(e) => {
                    refused += 1;
                    if !e.to_string().contains(key.as_str()) {
                        wrong.push(format!("{key} = {bad}: {e}"));
                    }
                }
            }
        }
    }
    println!("{checked} values of {} keys tried, {refused} refused", keys.len());
    assert!(refused > 100, "only {refused} refusals: the test tries too little");
    assert!(wrong.is_empty(), "{} refusals name another key:\n{}", wrong.len(), wrong.join("\n"));
}

/// A config's verdict on `text`: `None` when it reads, else whether the
/// refusal names `key` (a problem of that key, or a parse error naming it).
fn refusal_names(text: &str, key: &str) -> Option<bool> {
    match rulka_config::Config::from_yaml_str(text, "t.yaml") {
        Ok(_) => None,
        Err(rulka_config::ConfigError::Invalid { problems, .. }) => {
            Some(problems.iter().any(|p| p.key == key))
        }
        Err(e) => Some(e.to_string().contains(key)),
    }
}

/// NaN passes no range: every number the default config checks (one that
/// refuses 0, -1 or 1e30), and every key left empty by default (`null`)
/// that takes a number and checks it, set to `.nan`, is refused naming its
/// key. (A check that compares without asking whether the value is a
/// number takes NaN: every comparison with NaN is false.)
#[test]
fn no_number_of_the_config_takes_nan() {
    let base: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&rulka_config::Config::default().to_yaml()).unwrap();
    let (mut numbers, mut empty) = (Vec::new(), Vec::new());
    leaves(&base, String::new(), &|v| v.is_number(), &mut numbers);
    leaves(&base, String::new(), &|v| v.is_null(), &mut empty);
    let with = |key: &str, to: serde_yaml_ng::Value| {
        let mut v = base.clone();
        set(&mut v, &key.split('.').collect::<Vec<_>>(), to);
        serde_yaml_ng::to_string(&v).unwrap()
    };
    let number = |x: f64| serde_yaml_ng::Value::Number(x.into());
    // An empty key takes a number when 1.5 (or 2) reads there and a word
    // does not.
    let optional: Vec<String> = empty
        .into_iter()
        .filter(|k| {
            (refusal_names(&with(k, number(1.5)), k).is_none()
                || refusal_names(&with(k, serde_yaml_ng::Value::Number(2.into())), k).is_none())
                && refusal_names(&with(k, serde_yaml_ng::Value::String("abc".into())), k).is_some()
        })
        .collect();
    assert!(optional.len() >= 5, "only {} optional numbers: {optional:?}", optional.len());
    // The numbers the default config checks.
    let checked: Vec<&String> = numbers
        .iter()
        .chain(&optional)
        .filter(|k| {
            [0.0, -1.0, 1e30].iter().any(|&x| refusal_names(&with(k, number(x)), k).is_some())
        })
        .collect();
    assert!(checked.len() >= 80, "only {} checked numbers", checked.len());
    let mut wrong = Vec::new();
    for key in &checked {
        match refusal_names(&with(key, serde_yaml_ng::Value::Number(f64::NAN.into())), key) {
            Some(true) => {}
            Some(false) => wrong.push(format!("{key}: refused naming another key")),
            None => wrong.push(format!("{key}: takes NaN")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} numbers:\n{}",
        wrong.len(),
        numbers.len() + optional.len(),
        wrong.join("\n")
    );
}

/// A `*_schedule` replaces its value, so it takes no value its value
/// refuses: for every schedule of the config and each of 0, -1, NaN and
/// 1e30 that its value refuses, the schedule `[[0, it]]` is refused too,
/// naming the schedule.
#[test]
fn a_schedule_refuses_what_its_value_refuses() {
    let base: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&rulka_config::Config::default().to_yaml()).unwrap();
    let mut numbers = Vec::new();
    leaves(&base, String::new(), &|v| v.is_number(), &mut numbers);
    let with = |key: &str, to: serde_yaml_ng::Value| {
        let mut v = base.clone();
        set(&mut v, &key.split('.').collect::<Vec<_>>(), to);
        serde_yaml_ng::to_string(&v).unwrap()
    };
    let (mut checked, mut wrong) = (0, Vec::new());
    for value in &numbers {
        let schedule = format!("{value}_schedule");
        let parts: Vec<&str> = schedule.split('.').collect();
        let (section, name) = (parts[0], parts[parts.len() - 1]);
        if base[section].get(name).is_none() {
            continue;
        }
        for bad in [0.0, -1.0, f64::NAN, 1e30] {
            let number = |x: f64| serde_yaml_ng::Value::Number(x.into());
            if refusal_names(&with(value, number(bad)), value).is_none() {
                continue;
            }
            checked += 1;
            let knot = serde_yaml_ng::Value::Sequence(vec![serde_yaml_ng::Value::Sequence(vec![
                serde_yaml_ng::Value::Number(0.into()),
                number(bad),
            ])]);
            match refusal_names(&with(&schedule, knot), &schedule) {
                Some(true) => {}
                Some(false) => {
                    wrong.push(format!("{schedule} [[0, {bad}]]: refused naming another key"))
                }
                None => wrong.push(format!(
                    "{schedule} [[0, {bad}]]: taken, though {value}: {bad} is refused"
                )),
            }
        }
    }
    assert!(checked >= 20, "only {checked} refused values had a schedule to try");
    assert!(wrong.is_empty(), "{}:\n{}", wrong.len(), wrong.join("\n"));
}

/// Every `*_schedule` key of the config, found in the schema rather than
/// listed, has a rule for its values at 0, −1, NaN and 1e30, and a knot of
/// each is refused exactly where the rule refuses it, naming the schedule:
/// a schedule beside a value (`ppo.gamma_schedule` and `ppo.gamma`,
/// `training.policy_rollout_gamma_schedule` and its value that is empty by
/// default) refuses what the value refuses; a schedule with no value has
/// its rule here (`training.lr_schedule`: a learning rate above 0; the
/// engineered rewards: any finite number). A schedule the schema gains
/// without either fails here, and so does a rule written with `<` for `<=`
/// on one schedule only.
#[test]
fn every_schedule_refuses_what_its_value_or_its_own_rule_refuses() {
    let base: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&rulka_config::Config::default().to_yaml()).unwrap();
    let mut all = Vec::new();
    leaves(&base, String::new(), &|_| true, &mut all);
    let schedules: Vec<&String> = all.iter().filter(|k| k.ends_with("_schedule")).collect();
    assert!(schedules.len() >= 16, "{schedules:?}");
    let with = |key: &str, to: serde_yaml_ng::Value| {
        let mut v = base.clone();
        set(&mut v, &key.split('.').collect::<Vec<_>>(), to);
        serde_yaml_ng::to_string(&v).unwrap()
    };
    let number = |x: f64| serde_yaml_ng::Value::Number(x.into());
    // The schedules without a value beside them: which of the four values
    // each refuses.
    let own = |key: &str, x: f64| -> Option<bool> {
        match key {
            "training.lr_schedule" => Some(!(x.is_finite() && x > 0.0)),
            k if k.starts_with("rewards.engineered_") => Some(!x.is_finite()),
            _ => None,
        }
    };
    let mut wrong = Vec::new();
    for schedule in schedules {
        let value = schedule.trim_end_matches("_schedule");
        let paired = all.iter().any(|k| k == value);
        for bad in [0.0, -1.0, f64::NAN, 1e30] {
            let refused = if paired {
                refusal_names(&with(value, number(bad)), value).is_some()
            } else if let Some(r) = own(schedule, bad) {
                r
            } else {
                wrong.push(format!("{schedule}: no value beside it and no rule here"));
                break;
            };
            let knot = serde_yaml_ng::Value::Sequence(vec![serde_yaml_ng::Value::Sequence(vec![
                serde_yaml_ng::Value::Number(0.into()),
                number(bad),
            ])]);
            match (refused, refusal_names(&with(schedule, knot), schedule)) {
                (true, Some(true)) | (false, None) => {}
                (_, Some(false)) => {
                    wrong.push(format!("{schedule} [[0, {bad}]]: refused naming another key"))
                }
                (true, None) => wrong
                    .push(format!("{schedule} [[0, {bad}]]: taken, though its rule refuses {bad}")),
                (false, Some(true)) => wrong
                    .push(format!("{schedule} [[0, {bad}]]: refused, though its rule takes {bad}")),
            }
        }
    }
    assert!(wrong.is_empty(), "{}:\n{}", wrong.len(), wrong.join("\n"));
}
