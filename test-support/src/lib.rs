//! What the integration tests of several rulka crates share, written once:
//!
//! - processes: [`Kill`] (a child killed and reaped when the guard drops),
//!   [`wait_exit`], [`wait_for`], [`free_port`], [`signal`], [`children_of`], and
//!   [`games_on`], the simulator games (`rulka sim serve`) a test started —
//!   found among this process's descendants, never by command line alone,
//!   since anything else on the machine may run the same command line;
//! - the test venv's Python ([`venv_python`]), required under
//!   `RULKA_REQUIRE_VENV`;
//! - SVG: the points of the polylines plotters draws ([`polylines`]);
//! - numeric and learning checks that record how near they came to failing
//!   ([`margin::close`], [`margin::at_most`], [`margin::at_least`]) for
//!   `scripts/sweep`, and the threads a test gives libtorch and ONNX
//!   Runtime ([`margin::threads`]);
//! - files: Hugging Face model folders ([`hf_model_folders`],
//!   [`transformer_preset`]), the simulator's tracks as map lines
//!   ([`sim_maps`]).
//!
//! A dev-dependency only: its functions panic where a test should fail.
//!
//! ```
//! use std::process::Command;
//! use std::time::Duration;
//!
//! let mut sleeper = rulka_test_support::Kill::spawn(Command::new("sleep").arg("30"));
//! assert!(rulka_test_support::descendants().contains(&sleeper.id()));
//! rulka_test_support::signal(sleeper.id(), "-TERM");
//! let (status, _took) = rulka_test_support::wait_exit(sleeper.child(), Duration::from_secs(10));
//! assert!(!status.success());
//!
//! let svg = r##"<polyline fill="none" stroke="#0000FF" points="10,20 30,40 "/>"##;
//! assert_eq!(rulka_test_support::polylines(svg, "#0000FF"), [vec![(10, 20), (30, 40)]]);
//!
//! // A float32 sum of 100 terms of size ≤ 1 is off by at most 100·2⁻²⁴ per term.
//! let sum: f32 = (0..100).map(|i| 1.0 / (i as f32 + 1.0)).sum();
//! let exact: f64 = (0..100).map(|i| 1.0 / (i as f64 + 1.0)).sum();
//! rulka_test_support::margin::close("harmonic sum", f64::from(sum), exact, 100.0 * 100.0 * 2f64.powi(-24));
//! ```

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)] // test support: a panic fails the test

mod fixtures;
pub mod margin;
mod process;
mod python;
mod svg;

pub use fixtures::{hf_model_folders, sim_maps, transformer_preset, BERT_L2_H128, VIT_TI_16};
pub use process::{
    children_of, descendants, free_port, games_on, parent_of, signal, sim_game, wait_exit,
    wait_for, Kill,
};
pub use python::{venv_python, workspace};
pub use svg::polylines;
