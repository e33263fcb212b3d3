//! What several of the learner's test files share.

use rulka_config::Config;

/// The small network and inputs the update tests train (36×36 images, one
/// zone centre, no previous actions or materials), with `extra` YAML
/// lines after.
pub const SMALL_NET: &str = "nn: {image_width: 36, image_height: 36, float_hidden_dim: 8, dense_hidden_dim: 16}\n\
     environment: {n_zone_centers_in_inputs: 1, n_prev_actions_in_inputs: 0, n_contact_material_physics_behavior_types: 0}\n";

/// [`SMALL_NET`] with `extra` after it.
pub fn cfg(extra: &str) -> Config {
    Config::from_yaml_str(&format!("{SMALL_NET}{extra}"), "t").unwrap()
}
