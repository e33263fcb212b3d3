//! The float input vector's layout and its normalisation statistics.
//!
//! Layout and statistics follow the original's `config_loader._build_float_inputs_mean_std`
//! (rulka-python.md §4). The zone-centre statistics depend on where the
//! floats come from:
//!
//! - **the game** (`environment.kind: tmi`): the original's
//!   `state_normalization.waypoint_mean_40cp` / `waypoint_std_40cp` from its
//!   `config_default.yaml` ([`ORIGINAL_WAYPOINT_MEAN_40CP`], fitted to real
//!   TrackMania maps), truncated or tiled to `n_zone_centers_in_inputs` as the
//!   original does;
//! - **the simulator** (`environment.kind: sim`): statistics fitted to its
//!   generated tracks ([`float_inputs_mean_std`] documents them).
//!
//! `state_normalization.waypoint_mean_40cp` / `waypoint_std_40cp` in a config
//! replace either. Checkpoints carry the statistics as buffers, so a loaded
//! (or converted Rulka) checkpoint keeps its own.

use crate::{Config, EnvKind};

/// Named slices of the float vector, in order: `(name, length)`.
pub fn float_layout(cfg: &Config) -> Vec<(&'static str, usize)> {
    let e = &cfg.environment;
    vec![
        ("temporal", 1),
        ("previous_actions", 4 * e.n_prev_actions_in_inputs as usize),
        ("gear_and_wheels", 16 + 4 * e.n_contact_material_physics_behavior_types as usize),
        ("angular_velocity", 3),
        ("velocity", 3),
        ("y_map", 3),
        ("zone_centers", 3 * e.n_zone_centers_in_inputs as usize),
        ("margin_to_finish", 1),
        ("is_freewheeling", 1),
    ]
}

/// The original's `state_normalization.waypoint_mean_40cp` (its
/// `config_default.yaml`): 40 zone centres × (lateral, vertical, forward) in
/// the car frame, metres.
pub const ORIGINAL_WAYPOINT_MEAN_40CP: [f32; 120] = [
    0.0, -2.1, -0.2, 0.0, -2.2, 9.5, 0.0, -2.2, 19.1, 0.0, -2.2, 28.5, 0.0, -2.2, 37.7, 0.0, -2.1,
    46.6, 0.0, -2.0, 55.2, 0.0, -1.8, 63.5, 0.0, -1.5, 71.4, 0.0, -1.3, 78.9, 0.0, -1.0, 86.2, 0.0,
    -0.7, 93.1, 0.0, -0.4, 99.8, 0.0, 0.0, 106.0, 0.0, 0.3, 112.0, 0.0, 0.7, 118.0, 0.0, 1.1,
    124.0, 0.0, 1.6, 129.0, 0.0, 2.1, 134.0, 0.0, 2.6, 139.0, 0.0, 3.1, 143.0, 0.0, 3.7, 148.0,
    0.0, 4.2, 152.0, 0.0, 4.8, 156.0, 0.0, 5.3, 160.0, 0.0, 5.8, 164.0, 0.0, 6.4, 167.0, 0.0, 6.9,
    171.0, 0.0, 7.4, 174.0, 0.0, 7.8, 177.0, 0.0, 8.3, 180.0, 0.0, 8.7, 182.0, 0.0, 9.1, 185.0,
    0.0, 9.5, 187.0, 0.0, 9.9, 189.0, 0.0, 10.2, 191.0, 0.0, 10.6, 193.0, 0.0, 10.9, 194.0, 0.0,
    11.2, 196.0, 0.0, 11.5, 197.0,
];

/// The original's `state_normalization.waypoint_std_40cp`.
pub const ORIGINAL_WAYPOINT_STD_40CP: [f32; 120] = [
    7.7, 7.7, 2.9, 7.8, 7.8, 3.3, 8.3, 8.3, 4.1, 9.5, 9.5, 5.1, 11.5, 11.5, 6.4, 14.3, 14.3, 7.9,
    17.8, 17.8, 9.7, 21.9, 21.9, 11.7, 26.3, 26.3, 14.2, 31.1, 31.1, 17.0, 36.1, 36.1, 20.1, 41.3,
    41.3, 23.5, 46.6, 46.6, 27.2, 52.0, 52.0, 31.1, 57.4, 57.4, 35.2, 63.0, 63.0, 39.4, 68.5, 68.5,
    43.7, 74.2, 74.2, 48.1, 79.9, 79.9, 52.5, 85.6, 85.6, 57.0, 91.4, 91.4, 61.4, 97.2, 97.2, 65.8,
    103.0, 103.0, 70.2, 109.0, 109.0, 74.6, 115.0, 115.0, 79.1, 121.0, 121.0, 83.5, 127.0, 127.0,
    88.0, 132.0, 132.0, 92.6, 138.0, 138.0, 97.2, 144.0, 144.0, 102.0, 149.0, 149.0, 107.0, 155.0,
    155.0, 112.0, 160.0, 160.0, 117.0, 166.0, 166.0, 121.0, 171.0, 171.0, 126.0, 176.0, 176.0,
    131.0, 182.0, 182.0, 136.0, 187.0, 187.0, 141.0, 192.0, 192.0, 146.0, 198.0, 198.0, 151.0,
];

/// The original's `_waypoint_mean` / `_waypoint_std`: the first `3n` numbers
/// of a 40-zone block, or the block tiled when `n > 40`.
fn waypoint_block(block: &[f32], n: usize) -> Vec<f32> {
    block.iter().copied().cycle().take(3 * n).collect()
}

/// The simulator's zone-centre statistics for `n` zones: zone `i` lies about
/// `d = 10·(i + 1)` m ahead along the road, so mean `[0, 0, d]`, std
/// `[2 + 0.5·d, 2, 2 + 0.5·d]`: the lateral and forward spread of a point `d`
/// metres along a curving road grows with `d`; the simulator is flat.
fn sim_waypoints(n: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut mean, mut std) = (Vec::with_capacity(3 * n), Vec::with_capacity(3 * n));
    for i in 0..n {
        let d = 10.0 * (i + 1) as f32;
        mean.extend_from_slice(&[0.0, 0.0, d]);
        std.extend_from_slice(&[2.0 + 0.5 * d, 2.0, 2.0 + 0.5 * d]);
    }
    (mean, std)
}

/// `(mean, std)` of every float input, in [`float_layout`] order, as the
/// original's `_build_float_inputs_mean_std`; the zone-centre block as the
/// module docs say (the game's or the simulator's statistics, or the
/// config's `state_normalization`).
pub fn float_inputs_mean_std(cfg: &Config) -> (Vec<f32>, Vec<f32>) {
    let e = &cfg.environment;
    let mut mean: Vec<f32> = Vec::with_capacity(cfg.float_input_dim());
    let mut std: Vec<f32> = Vec::with_capacity(cfg.float_input_dim());
    let mut push = |m: &[f32], s: &[f32]| {
        mean.extend_from_slice(m);
        std.extend_from_slice(s);
    };
    // The original: `temporal_mini_race_duration_actions // 2`, integer division.
    let mini_race_half = (e.temporal_mini_race_duration_ms / cfg.ms_per_action().max(1) / 2) as f32;
    push(&[mini_race_half], &[mini_race_half]);
    for _ in 0..e.n_prev_actions_in_inputs {
        push(&[0.8, 0.2, 0.3, 0.3], &[0.5; 4]);
    }
    let n_c = e.n_contact_material_physics_behavior_types as usize;
    push(&[0.1; 4], &[0.5; 4]); // is_sliding
    push(&[0.9; 4], &[0.5; 4]); // has_ground_contact
    push(&[0.02; 4], &[0.5; 4]); // damper_absorb
    push(&[0.3, 2.5, 7000.0, 0.1], &[1.0, 2.0, 3000.0, 10.0]); // gearbox, gear, rpm, counter
    push(&vec![0.5; 4 * n_c], &vec![0.5; 4 * n_c]); // contact materials
    push(&[0.0; 3], &[0.5, 1.0, 0.5]); // angular velocity
    push(&[0.0, 0.0, 55.0], &[5.0, 5.0, 20.0]); // velocity
    push(&[0.0, 1.0, 0.0], &[0.5; 3]); // y_map
    let n = e.n_zone_centers_in_inputs as usize;
    let (mut wm, mut ws) = match e.kind {
        EnvKind::Tmi => (
            waypoint_block(&ORIGINAL_WAYPOINT_MEAN_40CP, n),
            waypoint_block(&ORIGINAL_WAYPOINT_STD_40CP, n),
        ),
        EnvKind::Sim => sim_waypoints(n),
    };
    let sn = &cfg.state_normalization;
    if let Some(m) = &sn.waypoint_mean_40cp {
        wm = waypoint_block(&m.iter().map(|&x| x as f32).collect::<Vec<_>>(), n);
    }
    if let Some(s) = &sn.waypoint_std_40cp {
        ws = waypoint_block(&s.iter().map(|&x| x as f32).collect::<Vec<_>>(), n);
    }
    push(&wm, &ws);
    let margin = e.margin_to_announce_finish_meters as f32;
    push(&[margin], &[margin / 2.0]); // margin to finish
    push(&[0.0], &[1.0]); // is_freewheeling
    (mean, std)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_stats_cover_the_whole_vector() {
        for yaml in ["", "environment: {n_prev_actions_in_inputs: 25, n_zone_centers_in_inputs: 7}"]
        {
            let cfg = Config::from_yaml_str(yaml, "t").expect("valid");
            let total: usize = float_layout(&cfg).iter().map(|(_, n)| n).sum();
            assert_eq!(total, cfg.float_input_dim());
            let (m, s) = float_inputs_mean_std(&cfg);
            assert_eq!(m.len(), total);
            assert_eq!(s.len(), total);
            assert!(s.iter().all(|&x| x > 0.0));
        }
    }

    #[test]
    fn temporal_is_half_the_mini_race_in_actions() {
        // 7000 ms / 50 ms = 140 actions → mean = std = 70
        let (m, s) = float_inputs_mean_std(&Config::default());
        assert_eq!((m[0], s[0]), (70.0, 70.0));
        // margin to finish is second to last: mean 700, std 350
        assert_eq!(m[m.len() - 2], 700.0);
        assert_eq!(s[s.len() - 2], 350.0);
    }
}
