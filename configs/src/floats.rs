//! The float input vector's layout and its normalisation statistics.
//!
//! Layout and statistics follow the original's `config_loader._build_float_inputs_mean_std`
//! (rulka-python.md §4). The zone-centre statistics there come from a YAML
//! table fitted to one map; rulka uses a distance-based estimate instead
//! (zone i is ~10·(i+1) m ahead along the car's forward axis), documented in
//! [`float_inputs_mean_std`]. Checkpoints carry the statistics as buffers, so
//! a converted Rulka checkpoint keeps its own.

use crate::Config;

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

/// `(mean, std)` of every float input, in [`float_layout`] order.
///
/// Zone centre i (car frame: lateral, vertical, forward) has mean
/// `[0, 0, 10·(i+1)]` and std `[2 + 0.5·d, 2, 2 + 0.5·d]` with `d = 10·(i+1)`.
pub fn float_inputs_mean_std(cfg: &Config) -> (Vec<f32>, Vec<f32>) {
    let e = &cfg.environment;
    let mut mean: Vec<f32> = Vec::with_capacity(cfg.float_input_dim());
    let mut std: Vec<f32> = Vec::with_capacity(cfg.float_input_dim());
    let mut push = |m: &[f32], s: &[f32]| {
        mean.extend_from_slice(m);
        std.extend_from_slice(s);
    };
    let mini_race_actions =
        e.temporal_mini_race_duration_ms as f32 / cfg.ms_per_action().max(1) as f32;
    push(&[mini_race_actions / 2.0], &[mini_race_actions / 2.0]);
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
    for i in 0..e.n_zone_centers_in_inputs {
        let d = 10.0 * (i as f32 + 1.0);
        push(&[0.0, 0.0, d], &[2.0 + 0.5 * d, 2.0, 2.0 + 0.5 * d]);
    }
    push(&[700.0], &[350.0]); // margin to finish
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
