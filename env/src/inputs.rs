//! Runs as TMInterface input scripts (the text TMInterface loads with
//! `load FILE`): timed `press`/`rel` of `up`, `down`, `left`, `right` at race
//! times in seconds (`1.23 press up`), ranges (`2.00-3.00 press up`), `#`
//! comments. A run's actions become the key changes at the race times they
//! take effect ([`input_script`]); a script becomes the keys held at each race time
//! ([`InputScript::keys_at`]), which `rulka inputs play` sets step by step.
//!
//! ```
//! use rulka_env::{input_script, InputScript, InputTiming};
//! // Two decisions of 50 ms: accelerate, then accelerate + left.
//! let timing = InputTiming { engine_ms: 10, engine_steps: 5, n_heads: 1 };
//! let text = input_script(&[0, 1], &timing, &["# a test run"]);
//! let s = InputScript::parse(&text).unwrap();
//! assert_eq!(s.keys_at(0), [true, false, false, false]);
//! assert_eq!(s.keys_at(50), [true, false, true, false]);
//! assert_eq!(s.keys_at(100), [false; 4]);
//! ```

use rulka_config::{Config, ACTION_KEYS};

/// Key names in `[accelerate, brake, left, right]` order.
const KEYS: [&str; 4] = ["up", "down", "left", "right"];

/// How actions map to race time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputTiming {
    /// Milliseconds per engine step.
    pub engine_ms: u32,
    /// Engine steps per decision.
    pub engine_steps: u32,
    /// Actions per decision (action heads); the decision's engine steps are
    /// shared as the simulator shares them ([`crate::sim::head_engine_steps`]).
    pub n_heads: usize,
}

impl InputTiming {
    /// The timing of `cfg`'s decisions.
    pub fn from_config(cfg: &Config) -> Self {
        let p = crate::sim::SimParams::from_config(cfg);
        Self { engine_ms: p.engine_ms, engine_steps: p.engine_steps, n_heads: p.n_heads.max(1) }
    }
}

fn secs(ms: u64) -> String {
    format!("{}.{:02}", ms / 1000, ms % 1000 / 10)
}

/// The script of a run: `actions` are the run's actions in order (one per
/// head per decision; indices of [`ACTION_KEYS`]), the first taking effect
/// at race time 0; `comments` go first, each line as given (start them with
/// `#`). Every key still held at the end is released there.
pub fn input_script(actions: &[i32], timing: &InputTiming, comments: &[&str]) -> String {
    let mut out: String = comments.iter().map(|c| format!("{c}\n")).collect();
    let steps = timing.engine_steps.max(1) as usize;
    let heads = timing.n_heads.max(1);
    let (mut held, mut t) = ([false; 4], 0u64);
    for (i, &a) in actions.iter().enumerate() {
        let keys = ACTION_KEYS[(a.max(0) as usize).min(ACTION_KEYS.len() - 1)];
        for k in 0..4 {
            if keys[k] != held[k] {
                let verb = if keys[k] { "press" } else { "rel" };
                out.push_str(&format!("{} {verb} {}\n", secs(t), KEYS[k]));
            }
        }
        held = keys;
        let n = crate::sim::head_engine_steps(steps, heads, i % heads);
        t += n as u64 * u64::from(timing.engine_ms);
    }
    for k in 0..4 {
        if held[k] {
            out.push_str(&format!("{} rel {}\n", secs(t), KEYS[k]));
        }
    }
    out
}

/// A script that cannot be played, naming the line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}: `{text}`")]
pub struct InputScriptError {
    /// 1-based line number.
    pub line: usize,
    /// The line.
    pub text: String,
    /// What is wrong.
    pub message: String,
}

impl InputScriptError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        rulka_error::ErrorKind::BadInput
    }
}

/// A parsed input script: key events in race-time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputScript {
    /// `(race time ms, key index, pressed)`, sorted by time (stable: the
    /// file's order among equal times).
    pub events: Vec<(u64, usize, bool)>,
}

/// A race time as TMInterface reads it: seconds (`1.23`; as TMInterface,
/// digits after the hundredths are ignored: `1.239` is 1.23 s), milliseconds
/// ending in 0 (`1230`; TMInterface takes any, the race clock ticks by 10),
/// or `m:ss.cc`.
fn parse_time(s: &str) -> Option<u64> {
    if let Some((m, rest)) = s.split_once(':') {
        let m: u64 = m.parse().ok()?;
        return parse_time(rest).map(|ms| m * 60_000 + ms);
    }
    if let Some((whole, frac)) = s.split_once('.') {
        if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let w: u64 = whole.parse().ok()?;
        let hundredths: u64 = format!("{:0<2}", &frac[..frac.len().min(2)]).parse().ok()?;
        return Some(w * 1000 + hundredths * 10);
    }
    // A bare integer is milliseconds, a multiple of 10 (`9430` is 9.43 s).
    let n: u64 = s.parse().ok()?;
    (n % 10 == 0).then_some(n)
}

impl InputScript {
    /// Parses a script's text: timed `press`/`rel` of the four driving keys
    /// (ranges too) and comments. Anything else — analog `steer`/`gas`,
    /// another command — is an error naming its line (this player drives
    /// with keys only).
    pub fn parse(text: &str) -> Result<Self, InputScriptError> {
        let mut events = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |message: &str| InputScriptError {
                line: n + 1,
                text: raw.trim().to_string(),
                message: message.to_string(),
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            let [time, verb, key] = words.as_slice() else {
                return Err(err("expected `TIME press|rel KEY`"));
            };
            let (from, to) = match time.split_once('-') {
                Some((a, b)) => (parse_time(a), Some(parse_time(b))),
                None => (parse_time(time), None),
            };
            let from = from.ok_or_else(|| err("not a race time"))?;
            let pressed = match verb.to_ascii_lowercase().as_str() {
                "press" => true,
                "rel" => false,
                "steer" | "gas" => return Err(err("analog steer/gas: this player sets keys only")),
                _ => return Err(err("commands are press and rel")),
            };
            let k = KEYS
                .iter()
                .position(|x| x.eq_ignore_ascii_case(key))
                .ok_or_else(|| err("keys are up, down, left and right"))?;
            events.push((from, k, pressed));
            if let Some(to) = to {
                let to = to.ok_or_else(|| err("not a race time"))?;
                if to < from {
                    return Err(err("a range that ends before it starts"));
                }
                events.push((to, k, !pressed));
            }
        }
        events.sort_by_key(|e| e.0);
        Ok(Self { events })
    }

    /// The keys `[accelerate, brake, left, right]` held at race time `ms`
    /// (every event at or before it applied).
    pub fn keys_at(&self, ms: u64) -> [bool; 4] {
        let mut keys = [false; 4];
        for &(t, k, p) in &self.events {
            if t > ms {
                break;
            }
            keys[k] = p;
        }
        keys
    }

    /// Race time of the last event, ms.
    pub fn end_ms(&self) -> u64 {
        self.events.last().map_or(0, |e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_written_as_tminterface_reads_them() {
        let timing = InputTiming { engine_ms: 10, engine_steps: 5, n_heads: 1 };
        let up = ACTION_KEYS.iter().position(|k| *k == [true, false, false, false]).unwrap();
        let up_left = ACTION_KEYS.iter().position(|k| *k == [true, false, true, false]).unwrap();
        let none = ACTION_KEYS.iter().position(|k| *k == [false; 4]).unwrap();
        let a = [up, up, up_left, none, up].map(|x| x as i32);
        let text = input_script(&a, &timing, &["# run"]);
        assert_eq!(
            text,
            "# run\n0.00 press up\n0.10 press left\n0.15 rel up\n0.15 rel left\n0.20 press up\n0.25 rel up\n"
        );
        // Two heads share a decision's 5 steps as 2 + 3.
        let t2 = InputTiming { engine_ms: 10, engine_steps: 5, n_heads: 2 };
        let text = input_script(&[up as i32, none as i32, up as i32], &t2, &[]);
        assert_eq!(text, "0.00 press up\n0.02 rel up\n0.05 press up\n0.07 rel up\n");
    }

    #[test]
    fn parsing_takes_times_ranges_and_comments_and_names_bad_lines() {
        let s = InputScript::parse(
            "# c\n1.5 press up\n2.00-3.00 press LEFT # turn\n4230 rel up\n0:05.10 press down\n",
        )
        .unwrap();
        assert_eq!(
            s.events,
            vec![
                (1500, 0, true),
                (2000, 2, true),
                (3000, 2, false),
                (4230, 0, false),
                (5100, 1, true)
            ]
        );
        assert_eq!(s.keys_at(2500), [true, false, true, false]);
        assert_eq!(s.keys_at(3000), [true, false, false, false]);
        // As tminterface.commandlist's parse_time: hundredths, the rest ignored.
        let s = InputScript::parse("1.239 press up\n1.005 rel up\n0:01.5 press down\n").unwrap();
        assert_eq!(s.events, vec![(1000, 0, false), (1230, 0, true), (1500, 1, true)]);
        let e = InputScript::parse("0 press up\n1.00 steer 65536\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("analog"), "{e}");
        let e = InputScript::parse("x press up").unwrap_err();
        assert!(e.to_string().contains("not a race time"), "{e}");
        let e = InputScript::parse("1.00 press enter").unwrap_err();
        assert!(e.to_string().contains("keys are"), "{e}");
    }
}
