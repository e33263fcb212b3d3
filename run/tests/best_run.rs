//! The best-run names (`rulka_run::best_run`) against a model over
//! generated names and times: what reads back, what is refused, and that
//! every kept time reads back as written.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use proptest::prelude::*;
use proptest::test_runner::{Config as Runner, RngSeed, TestRunner};
use rulka_run::{best_run_file, kept_race_time, map_key, parse_best_run_file};

fn runner(seed: u64) -> TestRunner {
    TestRunner::new(Runner {
        cases: 3000,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Runner::default()
    })
}

/// A file name `<map>_<time>.inputs` reads back as its map and its time
/// when the time is a finite number that is still above 0 to the hundredth
/// (the model: Python-like parsing by hand, then the rule in words); any
/// other time, or a name without `_` or `.inputs`, reads as none. Times
/// drawn from the edges: 0, -0, negatives, just under and at half a
/// hundredth, NaN, both infinities, exponents, many decimals.
#[test]
fn a_name_reads_back_only_with_a_time_that_is_one() {
    let map = prop::sample::select(vec!["sim0", "A06_Race", "a.b-c", "x", "_", ""]);
    let time = prop_oneof![
        prop::sample::select(vec![
            "0", "0.00", "-0.00", "-1.00", "0.004", "0.005", "0.01", "nan", "NaN", "inf", "-inf",
            "infinity", "1e3", "1e-3", "45.514", "45.51", "12", "", ".", "1.2.3", "+3.00"
        ])
        .prop_map(str::to_string),
        (0u32..100_000).prop_map(|c| format!("{}.{:02}", c / 100, c % 100)),
    ];
    let suffix = prop::sample::select(vec![".inputs", ".input", ""]);
    runner(0x6265_7374)
        .run(&(map, time, suffix), |(map, time, suffix)| {
            let name = format!("{map}_{time}{suffix}");
            let got = parse_best_run_file(&name);
            // The model.
            let t: Option<f64> = time.parse().ok();
            let kept = t.filter(|t| t.is_finite() && *t > 0.0).map(|t| (t * 100.0).round() / 100.0);
            let want = match (suffix, kept) {
                (".inputs", Some(k)) if k > 0.0 => Some((map.to_string(), k)),
                _ => None,
            };
            prop_assert_eq!(&got, &want, "{}", name);
            Ok(())
        })
        .unwrap();
}

/// Every time a best run keeps is written into its name and read back as
/// the same time and the map's key, for any map name.
#[test]
fn a_kept_time_and_map_read_back_from_the_name() {
    let time = prop_oneof![
        0.0f64..5000.0,
        prop::sample::select(vec![0.004, 0.005, 0.0051, 1e-9, 45.515, 59.995, f64::MIN_POSITIVE]),
    ];
    runner(0x6e61_6d65)
        .run(&("[ -~]{0,12}", time), |(map, t)| {
            let name = best_run_file(&map, t);
            match kept_race_time(t) {
                Some(k) => {
                    prop_assert_eq!(
                        parse_best_run_file(&name),
                        Some((map_key(&map), k)),
                        "{}",
                        name
                    )
                }
                None => prop_assert_eq!(parse_best_run_file(&name), None, "{}", name),
            }
            Ok(())
        })
        .unwrap();
}

/// `map_key` against its rule, character by character, over generated
/// names (ASCII letters, digits, every punctuation mark, spaces, and
/// letters outside ASCII): each kept when it is an ASCII letter or digit,
/// `.` or `-`, else made `_`; as many characters as the name has.
#[test]
fn a_maps_key_keeps_ascii_letters_digits_dots_and_dashes_only() {
    runner(0x6b65_7973)
        .run(&"[ -~éÉ日本ß]{0,16}", |name| {
            let want: String = name
                .chars()
                .map(|c| match c {
                    'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' => c,
                    _ => '_',
                })
                .collect();
            prop_assert_eq!(map_key(&name), want, "{:?}", name);
            Ok(())
        })
        .unwrap();
}
