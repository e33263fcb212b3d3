//! The problems a config's rules collect: each section checks its own keys
//! (`sections.rs`, beside its fields); the config checks what crosses
//! sections (`Config::validate`).

use crate::{Problem, Schedule};

#[derive(Default)]
pub(crate) struct Validator(Vec<Problem>);

impl Validator {
    pub(crate) fn into_problems(self) -> Vec<Problem> {
        self.0
    }
    pub(crate) fn push(&mut self, key: &str, message: String) {
        self.0.push(Problem { key: key.to_string(), message });
    }
    pub(crate) fn finite(&mut self, key: &str, x: f64) -> bool {
        if x.is_finite() {
            true
        } else {
            self.push(key, format!("{x} is not a finite number"));
            false
        }
    }
    pub(crate) fn positive(&mut self, key: &str, x: f64) {
        if self.finite(key, x) && x <= 0.0 {
            self.push(key, format!("{x} must be > 0"));
        }
    }
    pub(crate) fn non_negative(&mut self, key: &str, x: f64) {
        if self.finite(key, x) && x < 0.0 {
            self.push(key, format!("{x} must be >= 0"));
        }
    }
    pub(crate) fn range_oc(&mut self, key: &str, x: f64, lo: f64, hi: f64) {
        if self.finite(key, x) && !(x > lo && x <= hi) {
            self.push(key, format!("{x} is out of range; expected {lo} < value <= {hi}"));
        }
    }
    pub(crate) fn range_co(&mut self, key: &str, x: f64, lo: f64, hi: f64) {
        if self.finite(key, x) && !(x >= lo && x < hi) {
            self.push(key, format!("{x} is out of range; expected {lo} <= value < {hi}"));
        }
    }
    pub(crate) fn range_cc(&mut self, key: &str, x: f64, lo: f64, hi: f64) {
        if self.finite(key, x) && !(x >= lo && x <= hi) {
            self.push(key, format!("{x} is out of range; expected {lo} <= value <= {hi}"));
        }
    }
    pub(crate) fn range_oo(&mut self, key: &str, x: f64, lo: f64, hi: f64) {
        if self.finite(key, x) && !(x > lo && x < hi) {
            self.push(key, format!("{x} is out of range; expected {lo} < value < {hi}"));
        }
    }
    pub(crate) fn schedule(&mut self, key: &str, s: &Schedule) {
        for m in s.problems() {
            self.push(key, m);
        }
    }
    pub(crate) fn opt_schedule_in(&mut self, key: &str, s: &Option<Schedule>, lo: f64, hi: f64) {
        self.opt_schedule_within(key, s, |x| x >= lo && x <= hi, &format!("[{lo}, {hi}]"));
    }
    /// [`Self::opt_schedule_in`] for a value whose range is open at `lo`
    /// (`lo < value <= hi`, as [`Self::range_oc`] checks the fixed value).
    pub(crate) fn opt_schedule_in_oc(&mut self, key: &str, s: &Option<Schedule>, lo: f64, hi: f64) {
        self.opt_schedule_within(key, s, |x| x > lo && x <= hi, &format!("({lo}, {hi}]"));
    }
    /// A schedule's own problems, else each value `within` refuses (`range`
    /// in words).
    fn opt_schedule_within(
        &mut self,
        key: &str,
        s: &Option<Schedule>,
        within: impl Fn(f64) -> bool,
        range: &str,
    ) {
        let Some(s) = s else { return };
        let before = self.0.len();
        self.schedule(key, s);
        if self.0.len() == before {
            for x in s.values() {
                if !within(x) {
                    self.push(key, format!("value {x} is out of range {range}"));
                }
            }
        }
    }
}
