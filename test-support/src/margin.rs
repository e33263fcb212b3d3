//! Checks that say how near they came to failing, for `scripts/sweep`.
//!
//! A numeric or learning assertion written with [`close`], [`at_most`] or
//! [`at_least`] fails the test exactly as `assert!` would, and, when the
//! environment names a file in `RULKA_MARGINS`, also appends one JSON line
//! to it: the test (its thread's name, which libtest sets to the test's
//! path), the test binary, the check's label, the observed value, the limit
//! and the **margin** — how many times over the observed slack could grow
//! before the check fails:
//!
//! - [`close`]`(got, want, bound)`: `bound / |got − want|`;
//! - [`at_most`]`(value, limit)` (an error-like figure, `value ≥ 0`): `limit / value`;
//! - [`at_least`]`(value, floor)` (a figure that grows, `floor > 0`): `value / floor`.
//!
//! A margin under 1 is a failure, `null` (exact agreement, or a value of 0
//! under a limit) an infinite margin. The sweep runs these tests on every CPU
//! path and thread count it has and wants every margin at 3 or more: a bound
//! that a machine's rounding could cross, or a learning figure that sits on
//! its threshold, is found before another machine finds it.

use std::io::Write as _;

/// Threads a test should give libtorch and ONNX Runtime: `RULKA_TEST_THREADS`
/// (the sweep runs 1 and 2), 1 when unset.
pub fn threads() -> usize {
    std::env::var("RULKA_TEST_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1)
}

/// Asserts `|got − want| ≤ bound` (`bound` the computation's error,
/// derived beside the call) and records the margin `bound / |got − want|`.
#[track_caller]
pub fn close(what: &str, got: f64, want: f64, bound: f64) {
    assert!(bound.is_finite() && bound >= 0.0, "{what}: the bound {bound} is not a bound");
    let err = (got - want).abs();
    let margin = ratio(bound, err);
    record(what, err, bound, margin);
    assert!(
        err <= bound,
        "{what}: {got} vs {want}: off by {err:e}, bound {bound:e} (margin {margin:.3})"
    );
}

/// Asserts `value ≤ limit` for a figure that is 0 at best (an error, a
/// loss ratio, a miss rate) and records the margin `limit / value`.
#[track_caller]
pub fn at_most(what: &str, value: f64, limit: f64) {
    assert!(limit > 0.0 && limit.is_finite(), "{what}: the limit {limit} must be positive");
    assert!(value >= 0.0, "{what}: {value} is not an error-like figure (negative or NaN)");
    let margin = ratio(limit, value);
    record(what, value, limit, margin);
    assert!(value <= limit, "{what}: {value} over the limit {limit} (margin {margin:.3})");
}

/// Asserts `value ≥ floor` for a figure that grows with learning and
/// records the margin `value / floor`.
#[track_caller]
pub fn at_least(what: &str, value: f64, floor: f64) {
    assert!(floor > 0.0 && floor.is_finite(), "{what}: the floor {floor} must be positive");
    assert!(!value.is_nan(), "{what}: NaN");
    let margin = value / floor;
    record(what, value, floor, margin);
    assert!(value >= floor, "{what}: {value} under the floor {floor} (margin {margin:.3})");
}

/// `slack / used`, infinite when nothing of the slack was used.
fn ratio(slack: f64, used: f64) -> f64 {
    if used > 0.0 {
        slack / used
    } else if used == 0.0 {
        f64::INFINITY
    } else {
        f64::NAN
    }
}

fn record(what: &str, observed: f64, limit: f64, margin: f64) {
    let Some(path) = std::env::var_os("RULKA_MARGINS") else { return };
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let exe = std::env::current_exe().ok();
    let binary = exe.as_deref().and_then(|p| p.file_stem()).and_then(|s| s.to_str()).unwrap_or("?");
    // `deps/demos-0123abcd…`: the binary's name without its hash.
    let binary = match binary.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name
        }
        _ => binary,
    };
    let num = |x: f64| if x.is_finite() { format!("{x:e}") } else { "null".into() };
    let line = format!(
        "{{\"binary\":{},\"test\":{},\"check\":{},\"observed\":{},\"limit\":{},\"margin\":{},\"env\":{}}}\n",
        json_str(binary),
        json_str(test),
        json_str(what),
        num(observed),
        num(limit),
        num(margin),
        json_str(&std::env::var("RULKA_SWEEP_CONFIG").unwrap_or_default()),
    );
    // One write of a short line to a file opened for appending: lines of
    // tests running side by side do not interleave.
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("RULKA_MARGINS {}: {e}", path.to_string_lossy()));
    f.write_all(line.as_bytes()).unwrap();
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(f: impl FnOnce()) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        // Only this test sets it: unit tests run in their own process under nextest.
        std::env::set_var("RULKA_MARGINS", &path);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        std::env::remove_var("RULKA_MARGINS");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        if caught.is_err() {
            lines.push("panicked".into());
        }
        lines
    }

    #[test]
    fn margins_are_the_slack_over_what_was_used_and_failures_still_fail() {
        let r = records(|| {
            close("c", 1.0 + 2e-7, 1.0, 1e-6);
            at_most("m", 0.1, 0.7);
            at_least("l", 9.0, 3.0);
            close("exact", 2.0, 2.0, 0.0);
        });
        assert_eq!(r.len(), 4, "{r:?}");
        let margin = |l: &str| -> f64 {
            let m = l.split("\"margin\":").nth(1).unwrap().split(',').next().unwrap();
            m.parse().unwrap_or(f64::INFINITY)
        };
        assert!((margin(&r[0]) - 5.0).abs() < 1e-6, "{}", r[0]);
        assert!((margin(&r[1]) - 7.0).abs() < 1e-9, "{}", r[1]);
        assert!((margin(&r[2]) - 3.0).abs() < 1e-12, "{}", r[2]);
        assert!(r[3].contains("\"margin\":null"), "{}", r[3]);
        assert!(r[0].contains("\"check\":\"c\"") && r[0].contains("margins_are_the_slack"));
        assert!(r[0].contains("\"binary\":\"rulka_test_support\""), "{}", r[0]);
        // A check that fails is recorded (margin under 1), then fails the test.
        let r = records(|| at_most("over", 0.8, 0.4));
        assert_eq!(r.len(), 2, "{r:?}");
        assert!((margin(&r[0]) - 0.5).abs() < 1e-12 && r[1] == "panicked", "{r:?}");
        for bad in [
            || close("x", 1.0, 1.1, 0.05),
            || at_least("y", 0.5, 1.0),
            || at_most("z", f64::NAN, 1.0),
        ] {
            assert_eq!(records(bad).last().unwrap(), "panicked");
        }
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
