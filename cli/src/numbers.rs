//! The parsers of every floating-point option of `rulka` and `rulka-torch`,
//! and the audit their tests run over the whole command tree.
//!
//! Rust's `f64` parser reads `NaN`, `inf` and `1e400` (∞) as numbers, and a
//! comparison with NaN is false whichever way it is written, so a range check
//! such as `x < 0.0 || x >= 1.0` lets NaN through. Every float option is
//! therefore parsed by one of the functions here, which refuse a non-finite
//! value before any range is looked at, and [`float_option_faults`] finds
//! a float option that is not.
//!
//! ```
//! use rulka_cli::numbers::{non_negative, positive, share};
//!
//! assert_eq!(share("0"), Ok(0.0));
//! assert!(share("1").is_err() && share("NaN").is_err() && share("-0.1").is_err());
//! assert_eq!(positive("2.5"), Ok(2.5));
//! assert!(positive("0").is_err() && positive("inf").is_err());
//! assert_eq!(non_negative("0"), Ok(0.0));
//! assert!(non_negative("1e400").is_err());
//! ```

use std::any::TypeId;

use clap::{Arg, Command};

/// A finite number: what every float option is before its own range.
fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("`{s}` is not a finite number"))
    }
}

/// A share in [0, 1): 0 is accepted, 1 is not.
pub fn share(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a share in [0, 1)"))
    }
}

/// A finite number above 0.
pub fn positive(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not above 0"))
    }
}

/// A finite number of at least 0.
pub fn non_negative(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} is below 0"))
    }
}

/// What [`float_options_accepting`] offers every float option: each spelling
/// of NaN and ±∞ that Rust's float parser reads.
pub const NON_FINITE: [&str; 7] = ["NaN", "nan", "inf", "-inf", "infinity", "-Infinity", "1e400"];

/// Every option and positional argument of `cmd` and its subcommands, at any
/// depth, whose value is an `f32` or `f64`, as `"sub sub --long"` (or the
/// argument's id when it has no long name).
pub fn float_options(cmd: &Command) -> Vec<String> {
    let mut out = Vec::new();
    walk(cmd, "", &mut |path, arg| out.push(name(path, arg)));
    out
}

/// What is wrong with the float options of `cmd`, one line each, named as
/// [`float_options`] names them: a value parser that accepts one of
/// [`NON_FINITE`] (with the value it accepted), or an option that does not
/// take a value starting with `-` (clap would then read `-1` or `-1e-9` as
/// an unknown flag, and the message would not name the option; clap's
/// `allow_negative_numbers` misses `-1e-9`). Each parser is
/// tried alone, on a command of that one argument, so the options' other
/// rules (required arguments, conflicts) play no part.
pub fn float_option_faults(cmd: &Command) -> Vec<String> {
    let mut out = Vec::new();
    walk(cmd, "", &mut |path, arg| {
        if arg.get_long().is_some() && !arg.is_allow_hyphen_values_set() {
            out.push(format!("{} takes no value starting with -", name(path, arg)));
        }
        for bad in NON_FINITE {
            let one = Command::new("t").no_binary_name(true).arg(
                Arg::new("v")
                    .long("v")
                    .allow_hyphen_values(true)
                    .value_parser(arg.get_value_parser().clone()),
            );
            if one.try_get_matches_from(["--v", bad]).is_ok() {
                out.push(format!("{} {bad}", name(path, arg)));
            }
        }
    });
    out
}

fn name(path: &str, arg: &Arg) -> String {
    let flag = arg.get_long().map_or_else(|| arg.get_id().to_string(), |l| format!("--{l}"));
    format!("{path}{flag}")
}

fn walk(cmd: &Command, path: &str, visit: &mut dyn FnMut(&str, &Arg)) {
    for arg in cmd.get_arguments() {
        let t = arg.get_value_parser().type_id();
        if t == TypeId::of::<f64>() || t == TypeId::of::<f32>() {
            visit(path, arg);
        }
    }
    for sub in cmd.get_subcommands() {
        walk(sub, &format!("{path}{} ", sub.get_name()), visit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The three parsers against their definitions over generated values:
    /// the edges (0, −0, 1 and the floats beside them, the extremes, the
    /// subnormals), NaN, ±∞, and any float, written as Rust prints it.
    #[test]
    #[allow(clippy::manual_range_contains)] // the model is the definition, written unlike the code
    fn each_parser_is_its_range_of_finite_numbers() {
        let edges = [
            0.0,
            -0.0,
            1.0,
            f64::from_bits(1.0f64.to_bits() - 1),
            f64::from_bits(1.0f64.to_bits() + 1),
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            f64::from_bits(1),
            -f64::from_bits(1),
            f64::MAX,
            f64::MIN,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let check = |v: f64| {
            let s = format!("{v:?}");
            let fin = v.is_finite();
            assert_eq!(share(&s).is_ok(), fin && v >= 0.0 && v < 1.0, "share({s})");
            assert_eq!(positive(&s).is_ok(), fin && v > 0.0, "positive({s})");
            assert_eq!(non_negative(&s).is_ok(), fin && v >= 0.0, "non_negative({s})");
            for ok in [share(&s), positive(&s), non_negative(&s)].into_iter().flatten() {
                assert_eq!(ok.to_bits(), v.to_bits(), "{s} read back as {ok:?}");
            }
        };
        edges.into_iter().for_each(check);
        proptest!(ProptestConfig::with_cases(2000), |(v in proptest::num::f64::ANY)| check(v));
        for word in ["", "x", "0.5s", "1,5"] {
            assert!(
                share(word).is_err() && positive(word).is_err() && non_negative(word).is_err(),
                "{word}"
            );
        }
        for bad in NON_FINITE {
            assert!(
                share(bad).is_err() && positive(bad).is_err() && non_negative(bad).is_err(),
                "{bad}"
            );
        }
    }

    /// The audit finds a float option at any depth, positional or not, and
    /// names it only when its parser lets a non-finite value through or it
    /// takes no value starting with -.
    #[test]
    fn the_audit_names_each_float_option_whose_parser_takes_a_non_finite_value() {
        let float = |id: &'static str, p: clap::builder::ValueParser| {
            Arg::new(id).long(id).allow_hyphen_values(true).value_parser(p)
        };
        let cmd = Command::new("r")
            .arg(float("plain", clap::value_parser!(f64).into()))
            .arg(Arg::new("count").long("count").value_parser(clap::value_parser!(u32)))
            .subcommand(
                Command::new("a").subcommand(
                    Command::new("b")
                        .arg(float("checked", share.into()))
                        .arg(float("narrow", clap::value_parser!(f32).into()))
                        .arg(Arg::new("minus").long("minus").value_parser(positive))
                        .arg(Arg::new("pos").value_parser(positive)),
                ),
            );
        assert_eq!(
            float_options(&cmd),
            ["--plain", "a b --checked", "a b --narrow", "a b --minus", "a b pos"]
        );
        let faults = float_option_faults(&cmd);
        let want: Vec<String> = ["--plain", "a b --narrow"]
            .iter()
            .flat_map(|o| NON_FINITE.map(|bad| format!("{o} {bad}")))
            .chain(["a b --minus takes no value starting with -".to_string()])
            .collect();
        let (mut got, mut want) = (faults, want);
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }
}
