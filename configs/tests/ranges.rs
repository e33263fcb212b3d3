//! Every number of the config against the range written for it by hand
//! (`common/ranges.rs`): each key, in each setting that checks it, tried at
//! and around every edge of its range (the edge, one ulp or one unit either
//! side), at zero, one and two, at its type's limits, NaN and ±∞; a value
//! is refused naming the key exactly when the range leaves it out. Every
//! `*_schedule` is tried with the bad value at each of its knots, a list
//! with it at each of its places, so a check of the first element only, a
//! bound one off, a closed end written open, a range copied from another
//! key or a rule left out fails here by name.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

mod common;

use common::ranges::{Range, LISTS, NUMBERS, SCHEDULES};
use rulka_config::{Config, ConfigError};
use serde_yaml_ng::{Mapping, Number, Value};

fn defaults() -> Value {
    serde_yaml_ng::from_str(&Config::default().to_yaml()).unwrap()
}

/// `over` merged into `base`, mappings key by key.
fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) if slot.is_mapping() && v.is_mapping() => merge(slot, v),
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// The defaults with `context` merged over them.
fn with_context(context: &str) -> Value {
    let mut v = defaults();
    if !context.is_empty() {
        let over: Value = serde_yaml_ng::from_str(context).unwrap();
        merge(&mut v, &over);
    }
    v
}

/// `v` with its leaf at the dotted `key` set to `to` (mappings made on the way).
fn set(v: &mut Value, key: &str, to: Value) {
    let mut at = v;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if !at.is_mapping() {
            *at = Value::Mapping(Mapping::new());
        }
        let m = at.as_mapping_mut().unwrap();
        let k = Value::String((*p).to_string());
        if i + 1 == parts.len() {
            m.insert(k, to);
            return;
        }
        if !m.contains_key(&k) {
            m.insert(k.clone(), Value::Null);
        }
        at = m.get_mut(&k).unwrap();
    }
}

#[derive(Debug, PartialEq)]
enum Verdict {
    Taken,
    RefusedNamingIt,
    /// Refused by a parse error that names another key.
    RefusedElsewhere(String),
}

/// What the config makes of `v` as far as `key` goes: a problem of another
/// key leaves this one taken.
fn verdict(v: &Value, key: &str) -> Verdict {
    let text = serde_yaml_ng::to_string(v).unwrap();
    match Config::from_yaml_str(&text, "t.yaml") {
        Ok(_) => Verdict::Taken,
        Err(ConfigError::Invalid { problems, .. }) => {
            if problems.iter().any(|p| p.key == key) {
                Verdict::RefusedNamingIt
            } else {
                Verdict::Taken
            }
        }
        Err(e) => {
            let e = e.to_string();
            if e.contains(key) {
                Verdict::RefusedNamingIt
            } else {
                Verdict::RefusedElsewhere(e)
            }
        }
    }
}

fn float(x: f64) -> Value {
    Value::Number(Number::from(x))
}

/// `i` as a YAML integer, where YAML has one.
fn integer(i: i128) -> Option<Value> {
    if let Ok(u) = u64::try_from(i) {
        Some(Value::Number(Number::from(u)))
    } else {
        i64::try_from(i).ok().map(|s| Value::Number(Number::from(s)))
    }
}

/// The float next to the finite `x`, up or down (`f64::next_up` is newer
/// than the workspace's Rust).
fn next_after(x: f64, up: bool) -> f64 {
    if x == 0.0 {
        let tiny = f64::from_bits(1);
        return if up { tiny } else { -tiny };
    }
    let bits = x.to_bits();
    // Away from zero is one more in the magnitude's bits, toward it one less.
    let away = (x > 0.0) == up;
    f64::from_bits(if away { bits + 1 } else { bits - 1 })
}

/// The floats to try against `r`: each finite bound, one ulp either side of
/// it, a point between them, and the values every range is tried at.
fn float_probes(r: &Range) -> Vec<f64> {
    let mut xs = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        1e-300,
        -1e-300,
        1e300,
        -1e300,
        f64::MAX,
        -f64::MAX,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for b in [r.lo, r.hi] {
        if b.is_finite() {
            xs.extend([b, next_after(b, true), next_after(b, false), b + 1.0, b - 1.0]);
        }
    }
    if r.lo.is_finite() && r.hi.is_finite() {
        xs.push((r.lo + r.hi) / 2.0);
    }
    xs
}

/// The integers to try: each bound and one either side, and the usual
/// edges of sizes and of the integer types.
fn int_probes(r: &Range) -> Vec<i128> {
    let mut xs: Vec<i128> = vec![
        -1,
        0,
        1,
        2,
        3,
        4,
        15,
        16,
        17,
        31,
        32,
        33,
        48,
        64,
        65,
        1024,
        1025,
        u16::MAX.into(),
        i128::from(u16::MAX) + 1,
        u32::MAX.into(),
        i128::from(u32::MAX) + 1,
        u64::MAX.into(),
    ];
    if let Some((lo, hi)) = r.int {
        for b in [lo, hi] {
            xs.extend([b - 1, b, b + 1, 2 * b]);
        }
    }
    xs
}

/// Every value tried on `key` (set by `place`) in `base`, against `r`; the
/// mismatches in words.
fn try_range(
    base: &Value,
    key: &str,
    r: &Range,
    place: &dyn Fn(Value) -> Value,
    what: &str,
    tried: &mut usize,
) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut check = |shown: String, value: Value, expected: bool| {
        let mut v = base.clone();
        set(&mut v, key, place(value));
        *tried += 1;
        match (verdict(&v, key), expected) {
            (Verdict::Taken, true) | (Verdict::RefusedNamingIt, false) => {}
            (Verdict::Taken, false) => wrong.push(format!("{key}{what} = {shown}: taken")),
            (Verdict::RefusedNamingIt, true) => {
                wrong.push(format!("{key}{what} = {shown}: refused"))
            }
            (Verdict::RefusedElsewhere(e), _) => {
                wrong.push(format!("{key}{what} = {shown}: refused naming another key: {e}"))
            }
        }
    };
    for i in int_probes(r) {
        if let Some(value) = integer(i) {
            check(i.to_string(), value, r.holds_integer(i));
        }
    }
    if r.int.is_some() {
        // An integer key takes no fraction and no non-number.
        for x in [1.5, f64::NAN, f64::INFINITY] {
            check(format!("{x:?}"), float(x), false);
        }
    } else {
        for x in float_probes(r) {
            check(format!("{x:?}"), float(x), r.holds(x));
        }
    }
    wrong
}

/// The scalar numbers: refused naming the key exactly outside its range.
#[test]
fn every_number_is_refused_exactly_outside_its_stated_range() {
    let (mut tried, mut wrong) = (0, Vec::new());
    for (key, range, context) in NUMBERS {
        let r = Range::parse(range);
        let base = with_context(context);
        // The setting itself must stand: its own keys are not refused.
        let mut w = try_range(&base, key, &r, &|v| v, "", &mut tried);
        if !context.is_empty() {
            for x in &mut w {
                x.push_str(&format!(" (with {context})"));
            }
        }
        wrong.extend(w);
    }
    println!("{tried} values of {} rows tried", NUMBERS.len());
    assert!(tried > 5_000, "only {tried} values tried");
    assert!(
        wrong.is_empty(),
        "{} values judged against their range:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// A good value of `r`, inside it.
fn inside(r: &Range) -> f64 {
    match (r.lo.is_finite(), r.hi.is_finite()) {
        (true, true) => (r.lo + r.hi) / 2.0,
        (true, false) => r.lo + 1.0,
        (false, true) => r.hi - 1.0,
        (false, false) => 0.5,
    }
}

/// A schedule takes at every knot what its value takes: the value tried at
/// the first, a middle and the last of three knots (the others good).
#[test]
fn every_schedule_refuses_at_each_knot_what_its_value_refuses() {
    let (mut tried, mut wrong) = (0, Vec::new());
    for (key, range, context) in SCHEDULES {
        let r = Range::parse(range);
        let good = inside(&r);
        assert!(r.holds(good), "{key}: {good} must be inside {range}");
        let base = with_context(context);
        for at in 0..3 {
            let place = |v: Value| {
                let knots: Vec<Value> = (0..3)
                    .map(|k| {
                        let frame = float(1_000.0 * k as f64);
                        let value = if k == at { v.clone() } else { float(good) };
                        Value::Sequence(vec![frame, value])
                    })
                    .collect();
                Value::Sequence(knots)
            };
            let what = format!(" at knot {at} of 3");
            wrong.extend(try_range(&base, key, &r, &place, &what, &mut tried));
        }
    }
    println!("{tried} schedules of {} keys tried", SCHEDULES.len());
    assert!(
        wrong.is_empty(),
        "{} schedules judged against their value's range:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// A list's rule holds for each of its elements: the value tried alone,
/// first, in the middle and last of three.
#[test]
fn every_element_of_a_list_is_held_to_its_range() {
    let (mut tried, mut wrong) = (0, Vec::new());
    for (key, range, context) in LISTS {
        let r = Range::parse(range);
        let good = integer(inside(&r) as i128).unwrap();
        let base = with_context(context);
        for (len, at) in [(1, 0), (3, 0), (3, 1), (3, 2)] {
            let place = |v: Value| {
                Value::Sequence(
                    (0..len).map(|k| if k == at { v.clone() } else { good.clone() }).collect(),
                )
            };
            let what = format!(" at place {at} of {len}");
            wrong.extend(try_range(&base, key, &r, &place, &what, &mut tried));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} lists judged against their elements' range:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// A reward's distance clamp (`clamp(min, max)`) takes its lower end at most
/// its upper: equal ends are one distance, a lower end above the upper is
/// refused naming one of them.
#[test]
fn a_distance_clamps_lower_end_is_at_most_its_upper() {
    for which in ["shaped", "engineered"] {
        let (lo_key, hi_key) = (
            format!("rewards.{which}_reward_min_dist_to_cur_vcp"),
            format!("rewards.{which}_reward_max_dist_to_cur_vcp"),
        );
        for (lo, hi) in [
            (0.0, 0.0),
            (3.0, 3.0),
            (2.0, 25.0),
            (-1.0, 0.0),
            (3.0, 2.999),
            (26.0, 25.0),
            (0.0, -1.0),
        ] {
            let mut v = defaults();
            set(&mut v, &lo_key, float(lo));
            set(&mut v, &hi_key, float(hi));
            let refused = verdict(&v, &lo_key) == Verdict::RefusedNamingIt
                || verdict(&v, &hi_key) == Verdict::RefusedNamingIt;
            assert_eq!(refused, lo > hi, "{which}: min {lo}, max {hi}");
        }
    }
}

/// Every leaf of the defaults that is a number, and every key left empty by
/// default that takes one, has a stated range (a new number must say what it
/// may be); every schedule has one too.
#[test]
fn every_number_and_schedule_of_the_config_has_a_stated_range() {
    fn leaves(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Mapping(m) => {
                for (k, v) in m {
                    let k = k.as_str().unwrap();
                    let p = if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
                    leaves(v, p, out);
                }
            }
            leaf => out.push((path, leaf.clone())),
        }
    }
    let base = defaults();
    let mut all = Vec::new();
    leaves(&base, String::new(), &mut all);
    let stated = |k: &str| NUMBERS.iter().any(|(n, _, _)| *n == k);
    let mut missing = Vec::new();
    for (key, value) in &all {
        if key.ends_with("_schedule") {
            if !SCHEDULES.iter().any(|(s, _, _)| s == key) {
                missing.push(format!("{key}: a schedule"));
            }
            continue;
        }
        let number = value.is_number()
            || (value.is_null() && {
                // Empty by default: a number when one reads there.
                let takes = |x: Value| {
                    let mut v = base.clone();
                    set(&mut v, key, x);
                    verdict(&v, key) == Verdict::Taken
                };
                (takes(float(1.5)) || takes(integer(2).unwrap()))
                    && !takes(Value::String("abc".into()))
            });
        if number && !stated(key) {
            missing.push(format!("{key}: a number"));
        }
    }
    assert!(all.len() > 150, "only {} leaves", all.len());
    assert!(
        missing.is_empty(),
        "no range stated in tests/common/ranges.rs for:\n{}",
        missing.join("\n")
    );
}
