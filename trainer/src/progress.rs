//! What the user sees while the trainer runs: a progress line (a spinner on
//! a terminal, a line every 15 s otherwise) of running means over a window
//! of trajectories, and messages that do not tear it.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::prepare::Summary;

/// Running means of the trajectories in a window.
#[derive(Debug, Default, Clone)]
pub(crate) struct Window {
    pub n: usize,
    pub ret: f64,
    pub progress: f64,
    pub finished: usize,
    pub lag: f64,
}

impl Window {
    pub fn add(&mut self, s: &Summary) {
        self.n += 1;
        self.ret += s.ret;
        self.progress += s.progress_frac;
        self.finished += usize::from(s.finished);
        self.lag += s.lag;
    }

    /// The mean of a sum `x` over the window (NaN when it is empty).
    pub fn mean(&self, x: f64) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            x / self.n as f64
        }
    }
}

/// `x` with `decimals`, or `-` when there is nothing to show (no
/// trajectory in the window: NaN).
pub(crate) fn shown(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".into()
    }
}

/// The progress line and its windows: exploration runs since the last line
/// (or the last 20 on a terminal), greedy runs likewise, the last window
/// that had a greedy run, and every exploration run of this trainer.
#[derive(Debug)]
pub(crate) struct Progress {
    bar: ProgressBar,
    tty: bool,
    last_print: Instant,
    pub window: Window,
    window_eval: Window,
    pub last_eval: Window,
    pub all: Window,
}

impl Progress {
    /// A spinner on a terminal, plain lines otherwise.
    pub fn new() -> Self {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let bar = if tty {
            let b = ProgressBar::new_spinner();
            b.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        } else {
            ProgressBar::hidden()
        };
        Self {
            bar,
            tty,
            last_print: Instant::now(),
            window: Window::default(),
            window_eval: Window::default(),
            last_eval: Window::default(),
            all: Window::default(),
        }
    }

    /// Counts a trajectory that is not a duplicate.
    pub fn add(&mut self, s: &Summary) {
        if s.eval {
            self.window_eval.add(s);
        } else {
            self.window.add(s);
            self.all.add(s);
        }
    }

    /// Whether a new line is due (4 a second on a terminal, else every 15 s).
    pub fn due(&self) -> bool {
        self.last_print.elapsed() >= Duration::from_millis(if self.tty { 250 } else { 15_000 })
    }

    /// The windows' part of the line: return, progress, finishes, greedy
    /// progress.
    pub fn means(&mut self) -> (String, String, String) {
        if self.window_eval.n > 0 {
            self.last_eval = self.window_eval.clone();
        }
        let w = &self.window;
        (
            shown(w.mean(w.ret), 2),
            shown(100.0 * w.mean(w.progress), 0),
            shown(100.0 * self.last_eval.mean(self.last_eval.progress), 0),
        )
    }

    /// Shows `msg` (on the spinner's line on a terminal, else as a log line
    /// prefixed by the minutes since `started`) and starts new windows.
    pub fn show(&mut self, msg: String, started: Instant) {
        if self.tty {
            self.bar.set_message(msg);
        } else {
            tracing::info!(
                "[rulka train {:>6.1} min] {msg}",
                started.elapsed().as_secs_f64() / 60.0
            );
        }
        if self.window.n >= 20 || !self.tty {
            self.window = Window::default();
            self.window_eval = Window::default();
        }
        self.last_print = Instant::now();
    }

    /// A function printing a trainer message without tearing the line.
    pub fn sayer(&self) -> impl Fn(&str) + Clone + Send + 'static {
        let (bar, tty) = (self.bar.clone(), self.tty);
        move |m: &str| {
            if tty {
                bar.suspend(|| tracing::info!("[rulka train] {m}"));
            } else {
                tracing::info!("[rulka train] {m}");
            }
        }
    }

    /// Removes the spinner.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
