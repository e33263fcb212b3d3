//! The knob table (`rulka_config::knobs`) against the schema: every key of
//! the configuration reference has a row, each key of `training`, `ppo`,
//! `grpo` and `dpo` its own (so a new one must say what it touches), and
//! the pairs an update is tested with are the keys it reads.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use rulka_config::knobs::{touches_of, update_pairs, Quantity, TOUCHES};
use rulka_config::Algorithm;

/// The keys of the generated configuration reference.
fn keys() -> Vec<String> {
    let md = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/config.md"),
    )
    .unwrap();
    md.lines()
        .filter_map(|l| l.strip_prefix("- **`"))
        .filter_map(|l| l.split_once("`**").map(|(k, _)| k.to_string()))
        .collect()
}

#[test]
fn every_key_says_what_it_touches() {
    let keys = keys();
    assert!(keys.len() > 200, "{} keys", keys.len());
    let mut missing = Vec::new();
    for k in &keys {
        match touches_of(k) {
            None => missing.push(k.clone()),
            Some(t) => {
                let section = k.split('.').next().unwrap();
                if ["training", "ppo", "grpo", "dpo"].contains(&section) && t.prefix != k {
                    missing.push(format!("{k} (only its section's row, {})", t.prefix));
                }
            }
        }
    }
    assert!(missing.is_empty(), "keys without a row in rulka_config::knobs::TOUCHES: {missing:?}");
    // The row of a key is the longest of the rows it falls under (a key, or
    // a section on a `.` boundary), whatever the rows' order.
    let mut nested = 0;
    for k in &keys {
        let plain = k.replace("[]", "");
        let under: Vec<&str> = TOUCHES
            .iter()
            .map(|t| t.prefix)
            .filter(|p| plain == *p || plain.starts_with(&format!("{p}.")))
            .collect();
        nested += usize::from(under.len() >= 2);
        let longest = under.iter().copied().max_by_key(|p| p.len());
        assert_eq!(touches_of(k).map(|t| t.prefix), longest, "{k} falls under {under:?}");
    }
    assert!(nested >= 5, "only {nested} keys under two rows: the rule above is not exercised");
    // Every row is a key or a section of the schema.
    for t in TOUCHES {
        assert!(
            keys.iter().any(|k| k == t.prefix || k.starts_with(&format!("{}.", t.prefix))),
            "{}: a row for no key",
            t.prefix
        );
    }
}

#[test]
fn an_updates_pairs_are_keys_it_reads_on_one_quantity() {
    for algorithm in [Algorithm::Ppo, Algorithm::Grpo, Algorithm::Dpo] {
        let pairs = update_pairs(algorithm);
        assert!(pairs.len() > 20, "{algorithm:?}: {}", pairs.len());
        for (a, b, q) in &pairs {
            assert_ne!(a, b);
            for k in [a, b] {
                let t = touches_of(k).unwrap();
                assert_eq!(&t.prefix, k);
                assert!(t.update.contains(&algorithm) && t.touches.contains(q), "{k} {q:?}");
            }
        }
        // Each pair once, and no key's reader missing: every key its
        // update reads and another on its quantity is in a pair.
        let mut seen: Vec<(&str, &str)> = pairs.iter().map(|p| (p.0, p.1)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), pairs.len());
    }
    // By hand: a schedule beside its fixed value; a clip beside the epochs.
    let grpo = update_pairs(Algorithm::Grpo);
    assert!(grpo.contains(&("grpo.ent_coef", "grpo.ent_coef_schedule", Quantity::Loss)));
    assert!(grpo.contains(&("grpo.max_grad_norm", "grpo.update_epochs", Quantity::Gradient)));
    let ppo = update_pairs(Algorithm::Ppo);
    assert!(ppo.contains(&("ppo.normalize_returns", "ppo.popart_beta", Quantity::Returns)));
    assert!(!ppo.iter().any(|p| p.0.starts_with("grpo.") || p.1.starts_with("dpo.")));
}
