//! The parity gate a refit TensorRT session passes before it serves (and
//! `rulka gpu check`'s verdict on a GPU provider): its outputs against the
//! CPU provider's on the same model, every logit and value compared.

/// Outputs of one call: logits and values, flattened.
pub type Outputs = (Vec<f32>, Vec<f32>);

/// Deterministic probe inputs: `rows` frames of `pixels` bytes and float
/// vectors drawn around `mean` ± `std` (the network's own normalisation,
/// so no input saturates it).
pub fn probes(rows: usize, pixels: usize, mean: &[f32], std: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let f = mean.len();
    let mut z = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = z;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    };
    let frames = (0..rows * pixels).map(|_| (next() >> 56) as u8).collect();
    let floats = (0..rows * f)
        .map(|i| {
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            mean[i % f] + std[i % f] * (2.0 * u as f32 - 1.0)
        })
        .collect();
    (frames, floats)
}

/// The largest `|candidate − reference|` over every logit and value of
/// the two outputs, with the index and which output it is at; an error
/// when the shapes differ or a value is not finite.
pub fn largest_difference(
    candidate: &Outputs,
    reference: &Outputs,
) -> Result<(f32, String), String> {
    let mut worst = (0.0f32, String::from("nowhere"));
    for (name, c, r) in
        [("logits", &candidate.0, &reference.0), ("value", &candidate.1, &reference.1)]
    {
        if c.len() != r.len() {
            return Err(format!("{name}: {} values against the CPU's {}", c.len(), r.len()));
        }
        for (i, (a, b)) in c.iter().zip(r).enumerate() {
            let d = (a - b).abs();
            if !d.is_finite() {
                return Err(format!("{name}[{i}] is {a} against the CPU's {b}"));
            }
            if d > worst.0 {
                worst = (d, format!("{name}[{i}]: {a} against the CPU's {b}"));
            }
        }
    }
    Ok(worst)
}

/// The gate's bound on `|candidate − CPU|`: TensorRT runs fp32 layers in
/// TF32 (10-bit mantissa) on Ampere and later, fp16 layers in 10-bit
/// halves; over this network's few thousand-term sums either leaves
/// errors of order 1e-3 in logits of order 1 (fp16 a few times more).
/// A refit that kept the previous snapshot's weights, or garbled them,
/// differs by the size of a learner update or more.
pub fn bound(fp16: bool) -> f32 {
    if fp16 {
        5e-2
    } else {
        1e-2
    }
}

/// Passes when `candidate` is within `bound` of `reference` everywhere.
pub fn check(candidate: &Outputs, reference: &Outputs, bound: f32) -> Result<f32, String> {
    let (d, at) = largest_difference(candidate, reference)?;
    if d > bound {
        return Err(format!("differs from the CPU by {d:.3e} > {bound:.0e} at {at}"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_of_both_outputs_is_compared() {
        let base: Outputs = (vec![0.5; 24], vec![0.25; 2]);
        assert_eq!(largest_difference(&base, &base).map(|w| w.0), Ok(0.0));
        for i in 0..24 {
            let mut c = base.clone();
            c.0[i] += 0.1;
            let (d, at) = largest_difference(&c, &base).unwrap_or_default();
            assert!((d - 0.1).abs() < 1e-6, "logit {i}: {d}");
            assert!(at.starts_with(&format!("logits[{i}]")), "{at}");
            assert!(check(&c, &base, 1e-2).is_err());
            assert!(check(&c, &base, 0.2).is_ok());
        }
        for i in 0..2 {
            let mut c = base.clone();
            c.1[i] -= 0.03;
            assert!(check(&c, &base, 1e-2).unwrap_err().contains(&format!("value[{i}]")));
        }
    }

    #[test]
    fn a_bound_is_inclusive_and_shapes_and_non_finite_values_fail() {
        let r: Outputs = (vec![0.0, 1.0], vec![0.0]);
        let at_bound: Outputs = (vec![0.0, 1.0 + 0.5], vec![0.0]);
        assert_eq!(check(&at_bound, &r, 0.5), Ok(0.5));
        let past: Outputs = (vec![0.0, 1.0 + 0.5000001], vec![0.0]);
        assert!(check(&past, &r, 0.5).is_err());
        assert!(check(&(vec![0.0], vec![0.0]), &r, 1.0).unwrap_err().contains("1 values"));
        assert!(check(&(vec![0.0, f32::NAN], vec![0.0]), &r, 1.0).is_err());
        assert!(check(&(vec![0.0, 1.0], vec![f32::INFINITY]), &r, 1.0).is_err());
    }

    #[test]
    fn fp16_gets_the_looser_bound() {
        assert_eq!((bound(false), bound(true)), (1e-2, 5e-2));
    }

    #[test]
    fn probes_are_fixed_and_stay_within_the_normalisation() {
        let (mean, std) = (vec![10.0, -2.0, 0.0], vec![1.0, 0.5, 3.0]);
        let (f1, x1) = probes(4, 16, &mean, &std);
        let (f2, x2) = probes(4, 16, &mean, &std);
        assert_eq!((f1.len(), x1.len()), (64, 12));
        assert_eq!((&f1, &x1), (&f2, &x2));
        assert!(f1.iter().any(|&p| p > 200) && f1.iter().any(|&p| p < 50), "{f1:?}");
        for (i, x) in x1.iter().enumerate() {
            let (m, s) = (mean[i % 3], std[i % 3]);
            assert!((x - m).abs() <= s, "{i}: {x} outside {m} ± {s}");
        }
    }
}
