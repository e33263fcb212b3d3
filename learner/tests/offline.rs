#![allow(clippy::unwrap_used)]
//! Saved trajectories (JSONL) and offline DPO: round trip, errors naming the
//! line and field, pairing by return within groups, and a DPO learner that
//! moves probability from the rejected to the chosen actions.

use rulka_config::Config;
use rulka_learner::{load_jsonl, offline_pairs, trajectory_batch, Learner, SavedTrajectory};
use tch::{Device, Kind};

fn cfg() -> Config {
    Config::from_yaml_str(
        "training: {algorithm: dpo, optimizer: adam, lr_schedule: [[0, 1.0e-3]]}\n\
         nn: {no_image: true, float_hidden_dim: 16, dense_hidden_dim: 32}\n\
         dpo: {beta: 0.5, ref_sync_every_updates: 1000}\n\
         environment: {n_zone_centers_in_inputs: 2, n_prev_actions_in_inputs: 1}",
        "t",
    )
    .unwrap()
}

fn traj(cfg: &Config, group: u64, action: i32, ret: f32, t: usize) -> SavedTrajectory {
    let f = cfg.float_input_dim();
    let (mean, _) = rulka_config::float_inputs_mean_std(cfg);
    SavedTrajectory {
        group,
        frames: Vec::new(),
        floats: (0..t)
            .flat_map(|k| mean.iter().map(move |m| m + k as f32 * 0.1))
            .collect::<Vec<_>>()[..t * f]
            .to_vec(),
        actions: vec![action; t],
        rewards: {
            let mut r = vec![0.0; t];
            r[t - 1] = ret;
            r
        },
        log_probs: vec![-(12f32).ln(); t],
        values: vec![0.0; t],
        id: Some(rulka_learner::SavedId {
            start: 2,
            collector: 1,
            incarnation: 3,
            sequence: group * 100 + t as u64,
        }),
    }
}

#[test]
fn json_lines_round_trip_and_errors_name_line_and_field() {
    let c = cfg();
    let a = traj(&c, 7, 3, 1.5, 4);
    let back = SavedTrajectory::from_json_line(&c, &a.to_json_line()).unwrap();
    assert_eq!(back, a);
    assert!(a
        .to_json_line()
        .starts_with(r#"{"id":{"start":2,"collector":1,"incarnation":3,"sequence":704}"#));
    // A line saved before trajectories were named still reads.
    let unnamed = SavedTrajectory { id: None, ..a.clone() };
    assert!(!unnamed.to_json_line().contains("\"id\""));
    assert_eq!(SavedTrajectory::from_json_line(&c, &unnamed.to_json_line()).unwrap(), unnamed);
    let mut bad = a.clone();
    bad.floats.pop();
    let e = SavedTrajectory::from_json_line(&c, &bad.to_json_line()).unwrap_err().to_string();
    assert!(e.contains("floats:"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.jsonl");
    std::fs::write(&p, format!("{}\n{{\"group\": 1}}\n", a.to_json_line())).unwrap();
    let e = format!("{:#}", load_jsonl(&c, &p).unwrap_err());
    assert!(e.contains("t.jsonl:2"), "{e}");
    // A frame payload on a float-only network is rejected too.
    let mut with_frames = a;
    with_frames.frames = vec![1, 2, 3];
    assert!(SavedTrajectory::from_json_line(&c, &with_frames.to_json_line()).is_err());
}

#[test]
fn pairs_take_best_with_worst_within_each_group() {
    let c = cfg();
    let ts = vec![
        traj(&c, 0, 0, 5.0, 2),
        traj(&c, 0, 0, 1.0, 2),
        traj(&c, 0, 0, 3.0, 2),
        traj(&c, 0, 0, 9.0, 2),
        traj(&c, 1, 0, 2.0, 2), // group 1: equal returns give no pair
        traj(&c, 1, 0, 2.0, 2),
        traj(&c, 2, 0, 4.0, 2), // group 2: a single run gives no pair
    ];
    // Group 0 by return: 9 (#3), 5 (#0), 3 (#2), 1 (#1).
    assert_eq!(offline_pairs(&ts), vec![(3, 1), (0, 2)]);
}

#[test]
fn offline_dpo_moves_probability_to_the_chosen_actions() {
    let c = cfg();
    let chosen = traj(&c, 0, 2, 10.0, 16);
    let rejected = traj(&c, 0, 5, -10.0, 16);
    let pairs = offline_pairs(&[chosen.clone(), rejected.clone()]);
    assert_eq!(pairs, vec![(0, 1)]);
    let mut learner = Learner::new(&c, Device::Cpu, 3);
    let margin = |l: &Learner| {
        let b = trajectory_batch(&chosen, &c);
        let (logits, _) = l.network().forward(&b.image, &b.floats);
        let lp = logits.log_softmax(-1, Kind::Float);
        (lp.select(1, 2) - lp.select(1, 5)).mean(Kind::Float).double_value(&[])
    };
    let before = margin(&learner);
    for _ in 0..40 {
        learner
            .dpo_update(&[(trajectory_batch(&chosen, &c), trajectory_batch(&rejected, &c))])
            .unwrap()
            .unwrap();
    }
    let after = margin(&learner);
    println!("log π(chosen) − log π(rejected): {before:.3} → {after:.3}");
    // The rise saturates (1.56 after 40 updates, 1.60 after 80, 1.64 after
    // 120): the floor was 1.0, 1.6× under it. It tells this learner from
    // the bugs the test is for — chosen and rejected swapped (the log-ratio
    // falls), the pairs never trained on (0) — so it sits at 0.5: 3× under
    // the rise, and as far above what those bugs give.
    rulka_test_support::margin::at_least(
        "rise of log π(chosen) − log π(rejected)",
        after - before,
        0.5,
    );
}
