//! Track-seed lists in configs and on command lines: seeds and `a..b` ranges
//! (`b` excluded), e.g. `[0, 5, "10..20"]`, `"0..256"` or `0..4,9`.

use serde::{Deserialize, Deserializer};

/// Parses `a..b` (b > a), or one seed.
fn parse_item(s: &str) -> Result<Vec<u64>, String> {
    let s = s.trim();
    if let Some((a, b)) = s.split_once("..") {
        let num = |x: &str| {
            x.trim()
                .parse::<u64>()
                .map_err(|_| format!("{s:?}: {x:?} is not a seed (an unsigned integer)"))
        };
        let (a, b) = (num(a)?, num(b)?);
        if b <= a {
            return Err(format!(
                "{s:?}: an empty range (the end, {b}, is excluded and must be above {a})"
            ));
        }
        if b - a > MAX_RANGE {
            return Err(format!("{s:?}: more than a million seeds"));
        }
        Ok((a..b).collect())
    } else {
        s.parse::<u64>()
            .map(|x| vec![x])
            .map_err(|_| format!("{s:?} is not a seed or a range a..b"))
    }
}

/// Parses a comma-separated list of seeds and `a..b` ranges (`0..4,9`).
pub fn parse_seeds(s: &str) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for item in s.split(',').filter(|x| !x.trim().is_empty()) {
        out.extend(parse_item(item)?);
    }
    if out.is_empty() {
        return Err(format!("{s:?}: no seeds"));
    }
    Ok(out)
}

/// The most seeds one `a..b` range may hold.
const MAX_RANGE: u64 = 1_000_000;

/// A short description of a seed list: runs of three or more consecutive
/// seeds as `a..b` (`b` excluded), e.g. `0..256` or `3, 7, 10..20`, in the
/// list's order; [`parse_seeds`] reads it back as the same list (a run
/// ending at `u64::MAX`, which no `a..b` can hold, is written out; one
/// longer than a range may hold is cut in such ranges).
pub fn describe_seeds(seeds: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < seeds.len() {
        let mut j = i;
        while j + 1 < seeds.len()
            && seeds[j].checked_add(1) == Some(seeds[j + 1])
            && seeds[j + 1] < u64::MAX
            && (j + 1 - i) < MAX_RANGE as usize
        {
            j += 1;
        }
        parts.push(if j - i >= 2 {
            format!("{}..{}", seeds[i], seeds[j] + 1)
        } else {
            seeds[i..=j].iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        });
        i = j + 1;
    }
    parts.join(", ")
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Item {
    Seed(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Seeds {
    List(Vec<Item>),
    One(Item),
}

/// Serde: a list of seeds and `"a..b"` strings, or one such item.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    let items = match Seeds::deserialize(d)? {
        Seeds::List(v) => v,
        Seeds::One(i) => vec![i],
    };
    let mut out = Vec::new();
    for item in items {
        match item {
            Item::Seed(x) => out.push(x),
            Item::Text(s) => out.extend(parse_seeds(&s).map_err(serde::de::Error::custom)?),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{describe_seeds, parse_seeds};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};

    /// Seed lists of every shape: runs of consecutive seeds (1, 2, 3 and
    /// more long), repeats, descending parts, and seeds at `u64::MAX`.
    fn seed_list() -> impl Strategy<Value = Vec<u64>> {
        let piece = prop_oneof![
            (0u64..50, 1usize..6).prop_map(|(a, n)| (a..a + n as u64).collect::<Vec<_>>()),
            (0u64..50).prop_map(|a| vec![a, a]),
            (1u64..50).prop_map(|a| vec![a, a - 1]),
            (0u64..4).prop_map(|k| (u64::MAX - k..=u64::MAX).collect()),
            any::<u64>().prop_map(|a| vec![a]),
        ];
        prop::collection::vec(piece, 1..6).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(Config { cases: 3000, rng_seed: RngSeed::Fixed(0x7365_6564), failure_persistence: None, ..Config::default() })]

        #[test]
        fn a_description_reads_back_as_the_same_list(seeds in seed_list()) {
            let text = describe_seeds(&seeds);
            prop_assert_eq!(parse_seeds(&text), Ok(seeds.clone()), "{}", text);
            // Every range it writes holds three or more seeds.
            for part in text.split(", ").filter(|p| p.contains("..")) {
                let (a, b) = part.split_once("..").unwrap();
                prop_assert!(b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() >= 3, "{}", part);
            }
        }
    }

    #[test]
    fn a_run_longer_than_a_range_may_hold_is_cut_and_reads_back() {
        let seeds: Vec<u64> = (0..2_000_001).collect();
        let text = describe_seeds(&seeds);
        assert_eq!(text, "0..1000000, 1000000..2000000, 2000000");
        assert_eq!(parse_seeds(&text), Ok(seeds));
    }

    #[test]
    fn ranges_exclude_their_end_and_bad_items_are_named() {
        assert_eq!(parse_seeds("0..4,9").unwrap(), vec![0, 1, 2, 3, 9]);
        assert_eq!(parse_seeds(" 1000..1003 ").unwrap(), vec![1000, 1001, 1002]);
        assert!(parse_seeds("5..5").unwrap_err().contains("empty range"));
        assert!(parse_seeds("a..3").unwrap_err().contains("\"a\""));
        assert!(parse_seeds("x").unwrap_err().contains("\"x\""));
        assert!(parse_seeds(",").unwrap_err().contains("no seeds"));
    }

    #[test]
    fn descriptions_fold_runs_of_three_or_more() {
        assert_eq!(describe_seeds(&[0, 1, 2, 3]), "0..4");
        assert_eq!(describe_seeds(&[3, 7, 8, 10, 11, 12]), "3, 7, 8, 10..13");
        assert_eq!(describe_seeds(&[]), "");
    }
}
