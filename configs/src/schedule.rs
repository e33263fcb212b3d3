//! Frame-indexed schedules (`[[frame, value], ...]` in YAML).

use serde::{Deserialize, Serialize};

/// A schedule of `(frame, value)` knots, written `[[frame, value], ...]` in YAML.
///
/// Contract (checked by [`crate::Config::validate`]): at least one knot, every
/// number finite, frames `>= 0` and non-decreasing. Before the first knot the
/// first value holds; after the last, the last value holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Schedule(pub Vec<[f64; 2]>);

impl Schedule {
    /// A schedule that is `value` at every frame.
    pub fn constant(value: f64) -> Self {
        Self(vec![[0.0, value]])
    }

    /// Piecewise-linear interpolation at `frame` (NumPy `np.interp` semantics).
    pub fn linear_at(&self, frame: f64) -> f64 {
        self.interp(frame, |a, b, t| a + (b - a) * t)
    }

    /// Geometric interpolation between knots, `a * exp(-ln(a/b) * t)`, as the
    /// Python original's `from_exponential_schedule` (used for learning rates).
    /// Falls back to linear interpolation across a knot pair whose values are
    /// not both strictly positive (the logarithm is undefined there).
    pub fn exponential_at(&self, frame: f64) -> f64 {
        self.interp(frame, |a, b, t| {
            if a > 0.0 && b > 0.0 {
                a * (-(a / b).ln() * t).exp()
            } else {
                a + (b - a) * t
            }
        })
    }

    /// The same schedule with every frame multiplied by `speed`
    /// (`training.global_schedule_speed`).
    pub fn scaled(&self, speed: f64) -> Self {
        Self(self.0.iter().map(|[f, v]| [f * speed, *v]).collect())
    }

    fn interp(&self, frame: f64, mix: impl Fn(f64, f64, f64) -> f64) -> f64 {
        let knots = &self.0;
        let Some(first) = knots.first() else { return f64::NAN };
        if frame <= first[0] {
            return first[1];
        }
        for pair in knots.windows(2) {
            let ([f0, v0], [f1, v1]) = (pair[0], pair[1]);
            if frame <= f1 {
                if f1 <= f0 {
                    return v1;
                }
                return mix(v0, v1, (frame - f0) / (f1 - f0));
            }
        }
        knots[knots.len() - 1][1]
    }

    /// Problems with this schedule, as messages (empty when valid).
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.0.is_empty() {
            out.push("schedule must have at least one [frame, value] knot".to_string());
        }
        for (i, [f, v]) in self.0.iter().enumerate() {
            if !f.is_finite() || !v.is_finite() {
                out.push(format!("knot {i} [{f}, {v}] is not finite"));
            } else if *f < 0.0 {
                out.push(format!("knot {i} has negative frame {f}"));
            }
        }
        for (i, pair) in self.0.windows(2).enumerate() {
            if pair[1][0] < pair[0][0] {
                out.push(format!(
                    "frames must be non-decreasing: knot {} (frame {}) comes after frame {}",
                    i + 1,
                    pair[1][0],
                    pair[0][0]
                ));
            }
        }
        out
    }

    /// Every value in the schedule.
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.0.iter().map(|k| k[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config as ProptestConfig, RngSeed};

    #[test]
    fn linear_matches_np_interp_hand_values() {
        // np.interp(x, [0, 10, 20], [1.0, 0.5, 0.5])
        let s = Schedule(vec![[0.0, 1.0], [10.0, 0.5], [20.0, 0.5]]);
        assert_eq!(s.linear_at(-5.0), 1.0);
        assert_eq!(s.linear_at(0.0), 1.0);
        rulka_test_support::margin::close(
            "s.linear_at(5.0) vs 0.75",
            s.linear_at(5.0),
            0.75,
            1e-12,
        );
        rulka_test_support::margin::close(
            "s.linear_at(2.5) vs 0.875",
            s.linear_at(2.5),
            0.875,
            1e-12,
        );
        assert_eq!(s.linear_at(15.0), 0.5);
        assert_eq!(s.linear_at(1e9), 0.5);
    }

    #[test]
    fn exponential_is_geometric_midpoint() {
        // Halfway between 1e-3 and 1e-5 geometrically is 1e-4.
        let s = Schedule(vec![[0.0, 1e-3], [100.0, 1e-5]]);
        rulka_test_support::margin::close(
            "s.exponential_at(50.0) vs 1e-4",
            s.exponential_at(50.0),
            1e-4,
            1e-12,
        );
        rulka_test_support::margin::close(
            "s.exponential_at(0.0) vs 1e-3",
            s.exponential_at(0.0),
            1e-3,
            1e-15,
        );
        rulka_test_support::margin::close(
            "s.exponential_at(200.0) vs 1e-5",
            s.exponential_at(200.0),
            1e-5,
            1e-15,
        );
    }

    #[test]
    fn scaled_multiplies_frames_only() {
        let s = Schedule(vec![[0.0, 0.99], [12e6, 0.995]]).scaled(4.0);
        assert_eq!(s.0, vec![[0.0, 0.99], [48e6, 0.995]]);
    }

    #[test]
    fn problems_name_the_bad_knot() {
        assert!(Schedule(vec![]).problems()[0].contains("at least one"));
        let p = Schedule(vec![[10.0, 1.0], [5.0, 2.0]]).problems();
        assert!(p[0].contains("knot 1"), "{p:?}");
        assert!(!Schedule(vec![[f64::NAN, 1.0]]).problems().is_empty());
    }

    fn knots() -> impl Strategy<Value = Vec<[f64; 2]>> {
        // Frames around the edges: equal neighbours (a step), 0, a negative,
        // non-finite; values finite or not.
        let frame =
            prop::sample::select(vec![0.0, 0.0, 5.0, 5.0, 10.0, -1.0, f64::NAN, f64::INFINITY]);
        let value = prop::sample::select(vec![0.0, 1.0, -2.5, f64::NAN]);
        prop::collection::vec((frame, value).prop_map(|(f, v)| [f, v]), 0..6)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, rng_seed: RngSeed::Fixed(0x6b6e_6f74), failure_persistence: None, ..ProptestConfig::default() })]

        /// The contract against a model: valid exactly when there is a knot,
        /// every number is finite, frames are >= 0, and no frame is below
        /// the one before (equal frames, a step, are allowed); each knot out
        /// of order is named by its index.
        #[test]
        fn problems_are_the_contract(k in knots()) {
            let finite = k.iter().all(|[f, v]| f.is_finite() && v.is_finite());
            let out_of_order: Vec<usize> =
                (1..k.len()).filter(|&i| k[i][0] < k[i - 1][0]).collect();
            let valid = !k.is_empty() && finite && k.iter().all(|[f, _]| *f >= 0.0) && out_of_order.is_empty();
            let p = Schedule(k.clone()).problems();
            prop_assert_eq!(p.is_empty(), valid, "{:?}: {:?}", k, p);
            for i in out_of_order {
                let named = format!("knot {i} (frame");
                prop_assert!(p.iter().any(|m| m.contains(&named)), "{:?}: {:?}", k, p);
            }
        }
    }
}
