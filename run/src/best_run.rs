//! The names of a run's best runs, `best_runs/<map>_<seconds>.inputs`: one
//! owner of how a map and a race time become a file name and back, for
//! the trainer that keeps them, `rulka demos record` that finds a file's
//! map, and `rulka export original` that hands the bests back.
//!
//! A time is kept to the hundredth the name shows: whether a run beats the
//! map's best is decided on that, so a run and its resume (which reads the
//! bests back from the names) decide alike.
//!
//! ```
//! use rulka_run::{best_run_file, kept_race_time, map_key, parse_best_run_file};
//! assert_eq!(map_key("A06 Race #2"), "A06_Race__2");
//! assert_eq!(best_run_file("A06 Race", 45.514), "A06_Race_45.51.inputs");
//! assert_eq!(parse_best_run_file("A06_Race_45.51.inputs"), Some(("A06_Race".into(), 45.51)));
//! assert_eq!(kept_race_time(f64::NAN), None);
//! ```

/// A map's name as a file name: ASCII letters, digits, `.` and `-` kept,
/// everything else `_` (two maps whose names differ only there share one
/// best).
pub fn map_key(map: &str) -> String {
    map.chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') { c } else { '_' })
        .collect()
}

/// A race time as a best run keeps it: rounded to the hundredth; `None`
/// for what is not a race time (not finite, or not above zero).
pub fn kept_race_time(race_time_s: f64) -> Option<f64> {
    (race_time_s.is_finite() && race_time_s > 0.0)
        .then(|| (race_time_s * 100.0).round() / 100.0)
        .filter(|t| *t > 0.0)
}

/// The file name of `map`'s best run of `race_time_s` (kept as
/// [`kept_race_time`] keeps it; a time that is none is written as 0).
pub fn best_run_file(map: &str, race_time_s: f64) -> String {
    format!("{}_{:.2}.inputs", map_key(map), kept_race_time(race_time_s).unwrap_or(0.0))
}

/// The map key and race time a best run's file name holds; `None` for a
/// name that is not one (no `_`, no `.inputs`, a time that is none).
pub fn parse_best_run_file(name: &str) -> Option<(String, f64)> {
    let stem = name.strip_suffix(".inputs")?;
    let (map, time) = stem.rsplit_once('_')?;
    let t: f64 = time.parse().ok()?;
    Some((map.to_string(), kept_race_time(t)?))
}
